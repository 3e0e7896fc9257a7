"""The webhook's own state in one ConfigMap beside the ownership ConfigMaps: ``<ownership name>-state``.

What the provider must not forget at a restart (``carrying-servers``: the servers carrying its aliases,
so that one whose node left can still be cleaned; ``removal-window``: the removal guard's window;
``dns-writes``: when each name was written), one ``data`` key each, as JSON meant to be read with
``kubectl get cm -o yaml``. Only ApplyChanges writes it, and only the writer-lease holder applies; a 409
is someone else's write (an operator's edit): it is read again and this write, made from the writer's own
knowledge, goes over it.
Labelled like the ownership ConfigMaps; one of the same name without the label is never overwritten.
Read with one GET, written with one create or replace: RBAC as for the ownership store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.kubeclient import (
    UPSTREAM,
    json_body,
    release_failed_response,
    upstream_error,
)
from landb_webhook.adapters.ownership import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    create_or_replace,
    labelled_configmap,
)
from landb_webhook.backends import UpstreamError

log = structlog.get_logger(__name__)

STATE_SUFFIX = "-state"
FORMAT = "webhook state written by ApplyChanges: one JSON value per data key"
_HTTP_NOT_FOUND = 404
_HTTP_CONFLICT = 409
_ATTEMPTS = 3


class ConfigMapStateStore:
    """backends.StateStore in one ConfigMap."""

    def __init__(self, api: client.CoreV1Api, *, namespace: str, name: str, request_timeout: float):
        self._api = api
        self._namespace = namespace
        self.name = name
        self._request_timeout = request_timeout
        self._last: dict[str, Any] | None = None
        """The ConfigMap as last read or written: a save replaces it at that resourceVersion."""
        self._known = False
        """Whether ``_last`` was read or written (None then means: it does not exist)."""

    def load(self) -> Mapping[str, str]:
        found = self._read()
        return {} if found is None else dict(found.get("data") or {})

    def save(self, data: Mapping[str, str]) -> None:
        """One create or replace, at the version last read; a 409 costs a fresh read and another try."""
        for _ in range(_ATTEMPTS):
            found = self._last if self._known else self._read()
            body = labelled_configmap(found, self.name, self._namespace, data, FORMAT)
            try:
                self._remember(
                    create_or_replace(self._api, found is not None, body, timeout=self._request_timeout)
                )
                return
            except ApiException as exc:
                if exc.status not in (_HTTP_CONFLICT, _HTTP_NOT_FOUND):
                    raise upstream_error(exc, f"write ConfigMap {self._where}") from exc
                release_failed_response(exc)
                self._known = False
                log.info("state ConfigMap changed concurrently; re-reading", configmap=self._where)
            except Exception as exc:
                raise upstream_error(exc, f"write ConfigMap {self._where}") from exc
        raise UpstreamError(UPSTREAM, f"ConfigMap {self._where} kept changing during {_ATTEMPTS} attempts")

    @property
    def _where(self) -> str:
        return f"{self._namespace}/{self.name}"

    def _read(self) -> dict[str, Any] | None:
        """The ConfigMap, None when it does not exist; one of ours, else UpstreamError."""
        try:
            found: dict[str, Any] = json_body(
                self._api.read_namespaced_config_map(
                    self.name, self._namespace, _preload_content=False, _request_timeout=self._request_timeout
                )
            )
        except ApiException as exc:
            if exc.status == _HTTP_NOT_FOUND:
                return self._remember(None)
            raise upstream_error(exc, f"read ConfigMap {self._where}") from exc
        except Exception as exc:
            raise upstream_error(exc, f"read ConfigMap {self._where}") from exc
        labels = (found.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise UpstreamError(
                UPSTREAM,
                f"ConfigMap {self._where} exists without label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; "
                "refusing to use it",
                retryable=False,
            )
        return self._remember(found)

    def _remember(self, found: dict[str, Any] | None) -> dict[str, Any] | None:
        self._last, self._known = found, True
        return found
