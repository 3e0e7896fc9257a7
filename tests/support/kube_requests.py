"""The Kubernetes requests the simulator recorded, told apart: watch streams and the rest."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs


def is_watch(call: Any) -> bool:
    return parse_qs(call.query).get("watch") == ["true"]


def configmap_requests(state: Any) -> list[Any]:
    """Requests on ConfigMaps other than the opening of a watch stream."""
    return [c for c in state.api_calls("kubernetes") if "/configmaps" in c.path and not is_watch(c)]
