"""The provider's background work (one piece at a time, stopped at shutdown) and a cache that never goes
back in resourceVersion once it has seen a write's reply."""

from __future__ import annotations

import threading
from typing import Any

from structlog.testing import capture_logs

from landb_webhook.adapters.reflector import Reflector
from landb_webhook.provider.background import BackgroundWork

WAIT = 5.0
"""Seconds a test waits for a thread it controls; never reached when the promise holds."""


def test_work_offered_while_other_work_runs_is_dropped_not_queued() -> None:
    work = BackgroundWork("test")
    release = threading.Event()
    done: list[str] = []

    def blocked(name: str) -> None:
        assert release.wait(WAIT)
        done.append(name)

    assert work.offer(blocked, "first")
    assert not work.offer(done.append, "second")  # the first still runs
    release.set()
    assert work.wait(WAIT)
    assert work.offer(done.append, "third")
    assert work.close(WAIT)
    assert done == ["first", "third"]


def test_close_waits_for_the_running_work_and_refuses_more() -> None:
    work = BackgroundWork("test")
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def running() -> None:
        started.set()
        assert release.wait(WAIT)
        done.append("finished")

    assert work.offer(running)
    assert started.wait(WAIT)
    assert not work.close(timeout=0)  # still running: close says so rather than pretend
    release.set()
    assert work.close(WAIT)
    assert done == ["finished"]
    assert not work.offer(done.append, "late")
    assert done == ["finished"]


def test_failing_work_is_logged_and_the_next_offer_runs() -> None:
    work = BackgroundWork("test")

    def failing() -> None:
        raise RuntimeError("ConfigMap write refused")

    with capture_logs() as logs:
        assert work.offer(failing)
        assert work.wait(WAIT)
    assert [entry["event"] for entry in logs] == ["background work failed"]
    assert "ConfigMap write refused" in logs[0]["error"]
    done: list[str] = []
    assert work.offer(done.append, "again")
    assert work.close(WAIT)
    assert done == ["again"]


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
    )
    cache.observe(configmap("11", {"ours": "x"}))
    cache.observe(configmap("10", {}))  # the watch catching up with a state before our write
    cache.observe(configmap("11", {"ours": "x"}))  # the watch delivering our write: nothing new
    cache.observe(configmap("12", {"ours": "x", "theirs": "y"}))
    assert seen == [{"ours": "x"}, {"ours": "x", "theirs": "y"}]
