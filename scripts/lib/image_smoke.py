"""The image's smoke test against the simulator, in the chart's setting (scripts/smoke-image.sh).

Runs with the project's environment (.venv): the wire format from landb_webhook.webhook.wire, httpx from
the test extra.

``python image_smoke.py setup STATE_DIR OUT_DIR`` writes what a pod of deploy/helm/values.yaml would have
mounted, from the simulator's clouds.yaml and kubeconfig in STATE_DIR: the cluster's cloud.conf (a
Magnum trust, Keystone over TLS, its ``ca-file`` the CA bundle the chart mounts) and the in-cluster
service account (token, ca.crt, namespace). It prints podman run options, one a line: those mounts, the
chart's environment (but LANDB_DRY_RUN=false, so that the apply below really writes), its memory limit,
and the Kubernetes service address a pod is given.

``python image_smoke.py check API_URL HEALTH_URL TIMEOUT_SECONDS`` plays one external-dns loop: waits for
/readyz; GET / negotiates the media type and answers the domain filter; GET /records answers a list;
POST /adjustendpoints makes a desired name's targets the ingress nodes' IPs; POST /records publishes it
with its TXT claim (retried while the writer Lease is not yet this replica's); GET /records then shows
it. Exits 1 naming the first answer that is wrong.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx
import yaml

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.webhook.wire import (
    MEDIA_TYPE,
    decode_endpoints,
    encode_changes,
    encode_endpoints,
)

CHART_VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "values.yaml"
# Where the chart mounts the credentials Secret, and where Kubernetes mounts a pod's service account.
OPENSTACK_DIR = "/etc/landb-webhook"
CA_BUNDLE = "/etc/kubernetes/ca-bundle.crt"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TRUST_CLOUD = "simulator-trust"  # how a Magnum cluster's trustee logs in

NAME = "smoke.cern.ch"
OWNER = yaml.safe_load(CHART_VALUES.read_text())["txtOwnerId"]
"""external-dns' --txt-owner-id as the chart sets it (and LANDB_TXT_OWNER_ID with it): the claim is ours."""
CLAIM = Endpoint(
    f"a-{NAME}",
    "TXT",
    (f'"heritage=external-dns,external-dns/owner={OWNER},external-dns/resource=ingress/default/smoke"',),
    labels=(("ownedRecord", NAME),),
)
POLL_SECONDS = 0.2


def setup(state_dir: str, out_dir: str) -> None:
    state, out = Path(state_dir), Path(out_dir)
    kubeconfig = yaml.safe_load((state / "kubeconfig").read_text())
    cluster = kubeconfig["clusters"][0]["cluster"]
    ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    api = urlsplit(cluster["server"])  # the simulator's HTTPS port: Kubernetes, Keystone and Nova alike
    trust = yaml.safe_load((state / "clouds.yaml").read_text())["clouds"][TRUST_CLOUD]["auth"]

    openstack, service_account = out / "openstack", out / "serviceaccount"
    openstack.mkdir(parents=True)
    service_account.mkdir(parents=True)
    (openstack / "ca-bundle.crt").write_bytes(ca_pem)
    (openstack / "cloud.conf").write_text(
        "[Global]\n"
        f'auth-url = "https://{api.netloc}/identity/v3"\n'
        f'user-id = "{trust["user_id"]}"\n'
        f'password = "{trust["password"]}"\n'
        f'trust-id = "{trust["trust_id"]}"\n'
        'region = "cern"\n'
        f'ca-file = "{CA_BUNDLE}"\n'
    )
    (service_account / "token").write_text(kubeconfig["users"][0]["user"]["token"])
    (service_account / "ca.crt").write_bytes(ca_pem)
    (service_account / "namespace").write_text("default")

    webhook = yaml.safe_load(CHART_VALUES.read_text())["provider"]["webhook"]
    environment = {variable["name"]: variable["value"] for variable in webhook["env"]}
    environment |= {"LANDB_DRY_RUN": "false", "KUBERNETES_SERVICE_HOST": str(api.hostname)}
    environment["KUBERNETES_SERVICE_PORT"] = str(api.port)
    memory = webhook["resources"]["limits"]["memory"]
    options = [
        # ",U": the files (0600 from the simulator) become the container user's, as a Secret's
        # defaultMode and fsGroup make them readable to it.
        f"--volume={openstack}:{OPENSTACK_DIR}:ro,U",
        f"--volume={openstack / 'ca-bundle.crt'}:{CA_BUNDLE}:ro,U",
        f"--volume={service_account}:{SERVICE_ACCOUNT_DIR}:ro,U",
        f"--memory={_podman_size(memory)}",
        *(f"--env={name}={value}" for name, value in environment.items()),
    ]
    print("\n".join(options))


def _podman_size(quantity: str) -> str:
    """A Kubernetes memory quantity (``384Mi``) in podman's units (``384m``, which are binary too)."""
    for suffix in ("Ki", "Mi", "Gi"):
        if quantity.endswith(suffix):
            return quantity.removesuffix(suffix) + suffix[0].lower()
    return quantity


class Answer(NamedTuple):
    status: int
    content_type: str
    body: bytes


class SmokeFailure(Exception):
    pass


def call(method: str, url: str, body: bytes | None = None) -> Answer:
    headers = {"Accept": MEDIA_TYPE} | ({"Content-Type": MEDIA_TYPE} if body is not None else {})
    response = httpx.request(method, url, content=body, headers=headers, timeout=10)
    return Answer(response.status_code, response.headers.get("Content-Type", ""), response.content)


def expect(answer: Answer, status: int, what: str) -> Answer:
    if answer.status != status:
        text = answer.body.decode(errors="replace").strip()
        raise SmokeFailure(f"{what}: answered {answer.status}, not {status}: {text[:300]}")
    return answer


def until(deadline: float, what: str, attempt: Callable[[], Answer | None]) -> Answer:
    """``attempt()`` until it gives an answer (None: not yet), polling, until ``deadline``."""
    while True:
        answer = attempt()
        if answer is not None:
            return answer
        if time.monotonic() > deadline:
            raise SmokeFailure(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)


def check(api: str, health: str, timeout_seconds: str) -> None:
    deadline = time.monotonic() + float(timeout_seconds)

    def ready() -> Answer | None:
        try:
            answer = call("GET", f"{health}/readyz")
        except httpx.TransportError:
            return None
        return answer if answer.status == 200 else None

    print("GET /readyz:", until(deadline, "/readyz to answer 200", ready).body.decode().strip())

    negotiation = expect(call("GET", f"{api}/"), 200, "GET / (negotiation)")
    if negotiation.content_type != MEDIA_TYPE:
        raise SmokeFailure(f"GET /: Content-Type {negotiation.content_type!r}, not {MEDIA_TYPE!r}")
    domain_filter = json.loads(negotiation.body)
    if not isinstance(domain_filter, dict) or set(domain_filter) - {"include", "exclude"}:
        raise SmokeFailure(f"GET /: {negotiation.body!r} is not a domain filter")
    print("GET /:", domain_filter)

    before = decode_endpoints(expect(call("GET", f"{api}/records"), 200, "GET /records").body)
    print(f"GET /records: {len(before)} records")

    desired = [Endpoint(NAME, "A", ("192.0.2.1",), record_ttl=300)]
    adjusted = decode_endpoints(
        expect(call("POST", f"{api}/adjustendpoints", encode_endpoints(desired)), 200, "adjustendpoints").body
    )
    [record] = [endpoint for endpoint in adjusted if endpoint.dns_name == NAME]
    if not record.targets or "192.0.2.1" in record.targets:
        raise SmokeFailure(f"adjustendpoints did not make the targets the ingress nodes: {record}")
    print(f"POST /adjustendpoints: {NAME} -> {', '.join(record.targets)}")

    changes = encode_changes(Changes(create=(record, CLAIM)))

    def publish() -> Answer | None:
        answer = call("POST", f"{api}/records", changes)
        return None if answer.status == 503 else expect(answer, 204, "POST /records")

    until(deadline, "POST /records to be applied (the writer Lease)", publish)
    after = {endpoint.dns_name: endpoint for endpoint in decode_endpoints(call("GET", f"{api}/records").body)}
    if NAME not in after or set(after[NAME].targets) != set(record.targets):
        raise SmokeFailure(f"GET /records after the apply does not show {NAME} on its nodes: {after}")
    print(f"POST /records (204), then GET /records: {NAME} -> {', '.join(after[NAME].targets)}")


COMMANDS: dict[str, Callable[..., Any]] = {"setup": setup, "check": check}

if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    try:
        COMMANDS[command](*arguments)
    except (SmokeFailure, httpx.HTTPError, ValueError) as failure:
        print(f"image_smoke: {failure}", file=sys.stderr)
        raise SystemExit(1) from None
