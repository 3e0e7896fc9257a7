"""Bad input at the HTTP layer: every body gets a status external-dns survives, a log line and a metric,
and a body the webhook cannot read reaches no provider.

The fuzz tests send what hypothesis generates (bytes, any JSON, Changes-shaped JSON with wrong types,
odd key spellings and unknown fields) to the real app on a real socket, with the in-memory reference
provider behind it. The cases found are pinned with ``@example`` and in tests/corpus/http_bodies.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY
from landb_webhook.endpoint import Endpoint
from landb_webhook.webhook.wire import MEDIA_TYPE
from support.memory_provider import InMemoryProvider
from support.metrics import counted
from support.serving import Webhook, serving

CORPUS = Path(__file__).parent.parent / "corpus" / "http_bodies.json"
SURVIVABLE = {200, 204, 400, 503}
"""external-dns logs and retries a 503, exits on any other 4xx or 5xx; 400 is kept for bodies that
are not JSON of the expected shape, which external-dns never sends."""
SEEDED = Endpoint("seed.example.org", "A", ("192.0.2.1",))

_fuzz_settings = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Served:
    def __init__(self, webhook: Webhook) -> None:
        self.webhook = webhook
        self.provider = InMemoryProvider(records=[SEEDED])


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    slot = _Slot()
    with serving(slot, client_timeout=30) as webhook:
        served = Served(webhook)
        slot.target = served
        yield served


class _Slot:
    """Forwards to the current in-memory provider, so one server serves every example."""

    target: Served

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target.provider, name)


def rejected(webhook: Webhook, reason: str) -> float:
    return counted(webhook.metrics, "rejected_requests_total", reason=reason)


def raw_content_type(reply: Any) -> bytes:
    [value] = [value for name, value in reply.headers.raw if name.lower() == b"content-type"]
    return value


# -- generated bodies ------------------------------------------------------------------------------------

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=20)
)
_any_json = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
_spelled = st.sampled_from((str, str.lower, str.upper, str.capitalize))
_endpoint_fields = st.sampled_from(
    ("dnsName", "targets", "recordType", "setIdentifier", "recordTTL", "labels", "providerSpecific", "extra")
)
_endpoint_json = st.dictionaries(
    st.tuples(_endpoint_fields, _spelled).map(lambda pair: pair[1](pair[0])),
    st.one_of(
        _any_json,
        st.text(max_size=30),
        st.lists(st.one_of(st.none(), st.text(max_size=15)), max_size=3),
        st.integers(-(2**64), 2**64),
    ),
    max_size=8,
)
_changes_json = st.dictionaries(
    st.tuples(st.sampled_from(("create", "updateOld", "updateNew", "delete", "unknown")), _spelled).map(
        lambda pair: pair[1](pair[0])
    ),
    st.one_of(st.none(), st.lists(st.one_of(st.none(), _endpoint_json), max_size=3), _any_json),
    max_size=5,
)
_bodies = st.one_of(
    st.binary(max_size=200),
    _any_json.map(lambda value: json.dumps(value).encode()),
    _changes_json.map(lambda value: json.dumps(value).encode()),
    st.lists(_endpoint_json, max_size=3).map(lambda value: json.dumps(value).encode()),
)


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


@_fuzz_settings
@given(path=st.sampled_from(("/records", "/adjustendpoints")), body=_bodies)
@example(path="/records", body=b'{"Create":[{"DNSNAME":"a.example.org","recordType":"A"}],"CREATE":null}')
@example(path="/records", body=b'{"create":[{"recordTTL":18446744073709551616}]}')
@example(path="/adjustendpoints", body=b'[{"targets":[null],"labels":{"a":null}}]')
@example(path="/records", body=b"\xef\xbb\xbf{}")
@example(path="/records", body=b'{"create":[{"dnsName":"\\ud800.example.org"}]}')
def test_any_body_gets_a_survivable_status_and_a_bad_one_changes_nothing(
    served: Served, path: str, body: bytes
) -> None:
    served.provider = InMemoryProvider(records=[SEEDED])
    before = served.provider.records()
    rejected_before = rejected(served.webhook, "not_json") + rejected(served.webhook, "wrong_shape")

    reply = served.webhook.api.post(path, content=body)

    assert reply.status_code in SURVIVABLE
    if reply.status_code != 204:
        assert raw_content_type(reply) == MEDIA_TYPE.encode()
        json.loads(reply.content)
    if not _is_json(body):
        assert reply.status_code == 400
    if reply.status_code == 400:
        assert served.provider.records() == before
        assert rejected(served.webhook, "not_json") + rejected(served.webhook, "wrong_shape") == (
            rejected_before + 1
        )


def _corpus() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(CORPUS.read_text())
    return cases


@pytest.mark.parametrize("case", _corpus(), ids=lambda case: case["name"])
def test_the_corpus_of_found_bodies_gets_its_recorded_status(served: Served, case: dict[str, Any]) -> None:
    served.provider = InMemoryProvider(records=[SEEDED])
    body = bytes.fromhex(case["hex"]) if "hex" in case else json.dumps(case["json"]).encode()

    reply = served.webhook.api.post(case["path"], content=body)

    assert reply.status_code == case["status"], reply.text
    if case["status"] == 400:
        assert served.provider.records() == [SEEDED]


def test_a_non_json_body_is_logged_and_counted(served: Served) -> None:
    before = rejected(served.webhook, "not_json")
    with capture_logs() as logs:
        reply = served.webhook.api.post("/records", content=b"{not json")
    assert reply.status_code == 400
    assert rejected(served.webhook, "not_json") == before + 1
    [line] = [entry for entry in logs if entry["event"] == "rejected request body"]
    assert "Invalid JSON" in line["reason"]


def test_a_body_over_the_limit_is_a_503_naming_the_setting_and_reaches_no_provider(served: Served) -> None:
    served.provider = InMemoryProvider(records=[SEEDED])
    target = "x" * (DEFAULT_MAX_REQUEST_BODY + 1)
    body = json.dumps({"create": [{"dnsName": "big.example.org", "recordType": "TXT", "targets": [target]}]})
    before = rejected(served.webhook, "too_large")

    with capture_logs() as logs:
        reply = served.webhook.api.post("/records", content=body.encode())

    assert reply.status_code == 503  # not a 4xx: external-dns would exit
    assert f"larger than {DEFAULT_MAX_REQUEST_BODY} bytes" in reply.json()["error"]
    assert "LANDB_MAX_REQUEST_BODY" in reply.json()["error"]
    assert served.provider.records() == [SEEDED]
    assert rejected(served.webhook, "too_large") == before + 1
    [line] = [entry for entry in logs if entry["event"] == "request body refused: too large"]
    assert "LANDB_MAX_REQUEST_BODY" in line["setting"]
    assert line["limit"] == DEFAULT_MAX_REQUEST_BODY


def test_a_chunked_body_over_the_limit_is_refused_without_a_content_length(served: Served) -> None:
    served.provider = InMemoryProvider(records=[SEEDED])
    chunk = b" " * 2**16

    def chunks() -> Iterator[bytes]:
        yield b"["
        for _ in range(DEFAULT_MAX_REQUEST_BODY // len(chunk) + 1):
            yield chunk
        yield b"]"

    reply = served.webhook.api.post("/adjustendpoints", content=chunks())

    assert reply.status_code == 503  # not a 4xx: external-dns would exit
    assert served.webhook.api.post("/adjustendpoints", content=b"[]").status_code == 200
