# The webhook image: run it as a sidecar of external-dns (deploy/helm/values.yaml, docs/image.md).
#
# Base pinned by digest: the engine pulls exactly that content and checks it against the digest, whatever
# the tag points to later. python:3.11.13-slim-bookworm, the digest many public projects pin for that tag
# (found by code search; Docker Hub is out of reach from our CI, so not checked against it there). Before
# renewing or trusting it, check both together: `docker buildx imagetools inspect
# python:3.11.13-slim-bookworm` prints the tag's digest.
# Where that base cannot be pulled (our CI), scripts/build-image.sh (`make image`) builds a Debian bookworm
# base with mmdebstrap and passes it as PYTHON_IMAGE; scripts/smoke-image.sh then runs the image.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

FROM ${PYTHON_IMAGE} AS build
# pip and uv verify the package index with the system CA bundle. A build behind a TLS-inspecting proxy
# mounts the host's bundle over it for the RUN steps only (scripts/build-image.sh), so it is never copied
# into a layer; the runtime stage below starts afresh from the base.
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# Downloads are kept in build cache mounts (never in a layer), so a rebuild after a source change fetches
# nothing again.
# Every input is pinned by version and hash: uv (image-pins/uv.txt, pip --require-hashes); the build
# backend, hatchling, and its dependencies (image-pins/build-constraints.txt, uv --require-hashes); the
# dependencies (uv.lock, whose hashes uv sync checks).
WORKDIR /src
COPY image-pins ./image-pins
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m pip install --disable-pip-version-check --root-user-action=ignore --no-deps \
      --require-hashes -r image-pins/uv.txt
COPY pyproject.toml uv.lock README.md ./
COPY src ./src
# The locked production dependencies only (no test or dev extras), then the project's wheel, built with the
# pinned backend (uv sync would fetch whatever hatchling PyPI serves), not editable.
ENV UV_PROJECT_ENVIRONMENT=/opt/landb-webhook UV_PYTHON_DOWNLOADS=never UV_LINK_MODE=copy
RUN --mount=type=cache,target=/root/.cache/uv \
    uv build --wheel --out-dir /tmp/wheel --build-constraints image-pins/build-constraints.txt \
      --require-hashes \
 && uv sync --frozen --no-dev --no-install-project \
 && uv pip install --python /opt/landb-webhook/bin/python --no-deps /tmp/wheel/*.whl \
 # Not needed to serve: the kubernetes client's asyncio copy (41 MB, a fifth of the files to compile; the
 # webhook uses the synchronous client). The simulator is its own distribution, never installed here.
 && rm -rf /opt/landb-webhook/lib/python3.11/site-packages/kubernetes/aio \
 # Byte-compiled here, what is left, because the running container cannot write (read-only root).
 && /opt/landb-webhook/bin/python -m compileall -q -j 0 /opt/landb-webhook/lib/python3.11/site-packages

# The runtime: the same base (the venv's python links to it), no uv, no pip cache, no sources.
FROM ${PYTHON_IMAGE}
COPY --from=build /opt/landb-webhook /opt/landb-webhook
ENV PATH=/opt/landb-webhook/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANDB_HEALTH_HOST=0.0.0.0
# Numeric and non-root, as Pod Security "restricted" and the chart values (runAsUser 65532) require.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["landb-webhook"]
CMD ["serve"]
