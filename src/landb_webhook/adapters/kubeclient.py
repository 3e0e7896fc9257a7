"""The kubernetes client as the adapters use it: a dedicated ApiClient, raw JSON bodies, mapped errors."""

from __future__ import annotations

import json
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.retry import connection_failure
from landb_webhook.backends import UpstreamError

log = structlog.get_logger(__name__)

UPSTREAM = "kubernetes"
_MAX_REASON_LENGTH = 200
_STATUS_REASON = re.compile(r"[A-Z][A-Za-z]{1,63}")
_AUDIT_ID = re.compile(r"[0-9a-f-]{8,64}")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Namespace:
    name: str
    source: str
    """Where the name came from, for the operator: a setting, the service account, a kubeconfig context."""


def current_namespace(
    kubeconfig: Path | None, *, service_account_file: Path = SERVICE_ACCOUNT_NAMESPACE
) -> Namespace:
    """The namespace kubectl would use with the configuration :func:`api_client_for` loads: in a pod,
    the service account's; elsewhere, the kubeconfig's current context's; else ``default``.

    A command run from a workstation then reads and writes where the webhook in the cluster does,
    provided the context names that namespace (``kubectl config set-context --current --namespace=...``).
    """
    if kubeconfig is None:
        try:
            in_cluster = service_account_file.read_text(encoding="utf-8").strip()
        except OSError:
            in_cluster = ""
        if in_cluster:
            return Namespace(in_cluster, f"the service account's namespace ({service_account_file})")
    path = str(kubeconfig) if kubeconfig is not None else os.environ.get("KUBECONFIG", "~/.kube/config")
    try:
        _, context = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    except Exception:  # no usable kubeconfig: api_client_for says why
        return Namespace("default", "default: no service account and no kubeconfig context")
    name = (context.get("context") or {}).get("namespace")
    if name:
        return Namespace(str(name), f"the namespace of kubeconfig context {context.get('name')!r} ({path})")
    return Namespace("default", f"default: kubeconfig context {context.get('name')!r} names no namespace")


def api_client_for(kubeconfig: Path | None) -> client.ApiClient:
    """A dedicated ApiClient: the kubeconfig file if given, else in-cluster, else the default kubeconfig.

    A dedicated client (never the library's global default configuration) keeps the webhook's
    credentials out of reach of any other code in the process that uses the kubernetes package.
    """
    configuration = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    if not configuration.verify_ssl:
        log.warning(
            "TLS verification of the Kubernetes API is OFF (insecure-skip-tls-verify in the kubeconfig): "
            "the service account token may be sent to an impostor",
            hint="remove it; the kubeconfig's certificate-authority(-data) or the in-cluster CA verifies it",
        )
    return client.ApiClient(configuration)


def verifies_tls(api_client: client.ApiClient) -> bool:
    """Whether the client verifies the API server's certificate (False: insecure-skip-tls-verify)."""
    return bool(api_client.configuration.verify_ssl)


ApiClient = client.ApiClient
"""The type the composition root hands from :func:`api_client_for` to the adapters' constructors."""


def core_api(api_client: client.ApiClient) -> client.CoreV1Api:
    """Nodes, pods and ConfigMaps (the node source, the ownership and state stores)."""
    return client.CoreV1Api(api_client)


def coordination_api(api_client: client.ApiClient) -> client.CoordinationV1Api:
    """Leases (the writer lease)."""
    return client.CoordinationV1Api(api_client)


def secret_values(api_client: client.ApiClient) -> list[str]:
    """The credentials ``api_client`` sends (its bearer token, a basic-auth password), for
    logs.register_secrets."""
    configuration = api_client.configuration
    values = [str(value).split()[-1] for value in (configuration.api_key or {}).values() if value]
    return [*values, *(value for value in (configuration.password,) if value)]


def json_body(response: Any) -> Any:
    """The decoded body of a call made with ``_preload_content=False``, its connection given back."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def upstream_error(exc: BaseException, action: str) -> UpstreamError:
    """Map a kubernetes-client or urllib3 failure to an UpstreamError; 4xx other than 429 is not retryable.

    The reason names the action, the status, the Status ``reason`` word (Forbidden, Conflict...) and the
    API server's audit id, never the body: a proxy's or an API server's error text is not ours to echo.
    """
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, ApiException):
        release_failed_response(exc)
        status = exc.status or 0
        audit_id = str((exc.headers or {}).get("Audit-Id") or "")
        audit = f" (audit id {audit_id})" if _AUDIT_ID.fullmatch(audit_id) else ""
        reason = f"{action}: HTTP {status} {_status_reason(exc.body)}".strip() + audit
        retryable = status in {0, 429} or status >= 500
        return UpstreamError(UPSTREAM, reason[:_MAX_REASON_LENGTH], retryable=retryable, status=status)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return UpstreamError(UPSTREAM, f"{action}: {connection_failure(str(exc))}", retryable=True)
    return UpstreamError(UPSTREAM, f"{action}: {type(exc).__name__}"[:_MAX_REASON_LENGTH])


def release_failed_response(exc: ApiException) -> None:
    """Close the connection of a failed call now rather than whenever the exception is collected.

    The client leaves a failed response checked out of its pool, reachable only from the frames of
    the exception's traceback; an error kept for a log line or a test would hold the socket open.
    """
    traceback.clear_frames(exc.__traceback__)


def _status_reason(body: object) -> str:
    """The ``reason`` of a Kubernetes Status body (one CamelCase word), if the body is one."""
    if not isinstance(body, str | bytes) or not body:
        return ""
    try:
        decoded = json.loads(body)
    except ValueError:
        return ""
    reason = decoded.get("reason") if isinstance(decoded, dict) else None
    return reason if isinstance(reason, str) and _STATUS_REASON.fullmatch(reason) else ""
