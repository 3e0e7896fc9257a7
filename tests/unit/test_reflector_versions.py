"""A cache that never goes back in resourceVersion once it has seen a write's reply."""

from __future__ import annotations

from typing import Any

from landb_webhook.adapters.reflector import Reflector
from support.default_options import watch_options


def configmap(version: str, data: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "claims", "namespace": "ns", "resourceVersion": version}, "data": data}


def never_listed(**_: Any) -> Any:
    raise AssertionError("these tests start no watch")


def test_an_older_version_never_replaces_a_newer_one() -> None:
    seen: list[dict[str, str] | None] = []
    cache: Reflector[dict[str, str]] = Reflector(
        "configmaps",
        never_listed,
        lambda obj: dict(obj["data"]),
        on_change=lambda _, __, now: seen.append(now),
        options=watch_options(),
    )
    cache.observe(configmap("11", {"ours": "x"}))
    cache.observe(configmap("10", {}))  # the watch catching up with a state before our write
    cache.observe(configmap("11", {"ours": "x"}))  # the watch delivering our write: nothing new
    cache.observe(configmap("12", {"ours": "x", "theirs": "y"}))
    assert seen == [{"ours": "x"}, {"ours": "x", "theirs": "y"}]
