"""Knot DNS for the tests (bench/knot.py starts it): a fixture that skips naming the package when knotd is
not installed, and a resolver that never answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest
from bench.knot import KnotServer, knotd_path, running_knot

__all__ = ["KnotServer", "knot", "silent_resolver"]


@pytest.fixture(scope="module")
def knot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnotServer]:
    """One knotd for a test module (each test uses its own names)."""
    if knotd_path() is None:
        pytest.skip("knotd is not installed: apt-get install knot (.ci/run installs it)")
    with running_knot(tmp_path_factory.mktemp("knot")) as server:
        yield server


@contextmanager
def silent_resolver() -> Iterator[str]:
    """A loopback UDP socket that receives questions and never answers: a resolver that times out."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as sink:
        sink.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sink.getsockname()[1]}"
