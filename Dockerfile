# The webhook image: run it as a sidecar of external-dns (see deploy/ and the README).
FROM python:3.11-slim AS build
RUN pip install --no-cache-dir 'uv>=0.5,<1'
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY src ./src
RUN uv export --frozen --no-dev --no-emit-project -o /tmp/requirements.txt \
 && python -m venv /opt/landb-webhook \
 && /opt/landb-webhook/bin/pip install --no-cache-dir -r /tmp/requirements.txt \
 && /opt/landb-webhook/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11-slim
COPY --from=build /opt/landb-webhook /opt/landb-webhook
ENV PATH=/opt/landb-webhook/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LANDB_HEALTH_HOST=0.0.0.0
# The official external-dns chart runs the pod as non-root: a numeric USER is required.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["landb-webhook"]
CMD ["serve"]
