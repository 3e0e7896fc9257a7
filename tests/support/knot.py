"""Knot DNS for the tests (bench/knot.py starts it): a fixture that skips naming the package when knotd is
not installed, a resolver that never answers, and one that can be stopped and started again."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest
from bench.knot import KnotServer, knotd_path, running_knot

__all__ = ["DnsSwitch", "KnotServer", "knot", "silent_resolver", "switchable"]


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


class DnsSwitch:
    """A loopback UDP resolver in front of Knot that can be stopped (it receives questions and drops them,
    as a resolver down) and started again at the same address: DNS stopped, then answering again."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.address = f"127.0.0.1:{self._socket.getsockname()[1]}"
        self.answering = True
        self.questions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._relay, name="dns-switch", daemon=True)

    def _relay(self) -> None:
        while not self._stop.is_set():
            try:
                question, client = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            self.questions += 1
            if not self.answering:
                continue
            with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as upstream:
                upstream.settimeout(2.0)
                upstream.sendto(question, self._upstream)
                try:
                    self._socket.sendto(upstream.recv(65535), client)
                except TimeoutError:
                    continue

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()


@contextmanager
def switchable(knot: KnotServer) -> Iterator[DnsSwitch]:
    """A DnsSwitch in front of ``knot``, answering until told otherwise; stopped on exit."""
    switch = DnsSwitch(knot.port)
    switch.start()
    try:
        yield switch
    finally:
        switch.stop()
