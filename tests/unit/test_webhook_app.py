"""The HTTP contract external-dns enforces, checked on the wire against a real uvicorn on 127.0.0.1.

Mirrors external-dns' provider/webhook/api/httpapi_test.go and provider/webhook/webhook_test.go, with
the status codes docs/reference.md describes (503, never 500; 400 only for a bad body).
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

import httpx
import pytest
from structlog.testing import capture_logs

from landb_webhook.backends import UpstreamError
from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_REQUEST_ENDPOINTS
from landb_webhook.endpoint import Changes, DomainFilter, Endpoint
from landb_webhook.logs import configure_logging
from landb_webhook.metrics import Metrics
from landb_webhook.provider.interface import Readiness, WebhookProvider
from landb_webhook.webhook.api import create_api_app, decode_within
from landb_webhook.webhook.liveness import CallProgress
from landb_webhook.webhook.server import HttpServers, api_limits, bind_listener, listener_url
from landb_webhook.webhook.wire import MEDIA_TYPE, decode_changes, encode_changes
from support.logging_state import restored_logging
from support.memory_provider import InMemoryProvider
from support.metrics import counted
from support.serving import WAIT, Webhook, client, serving
from support.waiting import eventually

FOO = Endpoint(dns_name="foo.bar.com", record_type="A", targets=("1.2.3.4",))
CREATE_FOO = encode_changes(Changes(create=(FOO,)))
CREATE_BAR = encode_changes(Changes(create=(Endpoint(dns_name="bar.bar.com", record_type="A"),)))


# --- Providers: real behaviour (InMemoryProvider), plus switches for failure and blocking ------------


class UnreliableProvider(InMemoryProvider):
    """An in-memory provider whose upstream can be "down" or its calls "stuck" until released."""

    def __init__(self, domain_filter: DomainFilter | None = None, records: Iterable[Endpoint] = ()) -> None:
        super().__init__(domain_filter, records)
        self.outage: Exception | None = None
        self.stuck: set[str] = set()
        self.release = threading.Event()
        self.entered = {name: threading.Event() for name in ("records", "adjust_endpoints", "apply_changes")}
        self.remote_calls: list[str] = []
        self.readiness_now = Readiness(True, "all good")

    def _remote(self, name: str) -> None:
        self.remote_calls.append(name)
        self.entered[name].set()
        if name in self.stuck:
            assert self.release.wait(WAIT), "the test never released the stuck call"
        if self.outage is not None:
            raise self.outage

    def records(self) -> list[Endpoint]:
        self._remote("records")
        return super().records()

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        self._remote("adjust_endpoints")
        return super().adjust_endpoints(endpoints)

    def apply_changes(self, changes: Changes) -> None:
        self._remote("apply_changes")
        super().apply_changes(changes)

    def readiness(self) -> Readiness:
        return self.readiness_now


class ProviderSlot:
    """Forwards to the provider of the running test, so that one server serves a whole module."""

    def __init__(self, current: WebhookProvider) -> None:
        self.current = current

    def domain_filter(self) -> DomainFilter:
        return self.current.domain_filter()

    def records(self) -> list[Endpoint]:
        return self.current.records()

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        return self.current.adjust_endpoints(endpoints)

    def apply_changes(self, changes: Changes) -> None:
        self.current.apply_changes(changes)

    def readiness(self) -> Readiness:
        return self.current.readiness()


@pytest.fixture
def provider() -> Iterator[UnreliableProvider]:
    fresh = UnreliableProvider(DomainFilter(include=("foo.bar.com",)), records=[FOO])
    yield fresh
    fresh.release.set()  # whatever the test left stuck


@pytest.fixture(scope="module")
def shared_webhook() -> Iterator[tuple[ProviderSlot, Webhook]]:
    slot = ProviderSlot(UnreliableProvider())
    with serving(slot) as webhook:
        yield slot, webhook


@pytest.fixture
def webhook(shared_webhook: tuple[ProviderSlot, Webhook], provider: UnreliableProvider) -> Webhook:
    """The module's server, answering from this test's fresh provider (tests needing a deadline or
    blocking calls start their own server with :func:`serving`)."""
    slot, webhook = shared_webhook
    slot.current = provider
    return webhook


def raw_content_type(reply: httpx.Response) -> bytes:
    [value] = [value for name, value in reply.headers.raw if name.lower() == b"content-type"]
    return value


# --- Negotiation -------------------------------------------------------------------------------------


def test_negotiation_answers_the_domain_filter_with_the_exact_media_type(
    webhook: Webhook, provider: UnreliableProvider
) -> None:
    reply = webhook.api.get("/", headers={"Accept": MEDIA_TYPE})

    assert reply.status_code == 200
    assert raw_content_type(reply) == b"application/external.dns.webhook+json;version=1"
    assert reply.json() == {"include": ["foo.bar.com"]}
    assert provider.remote_calls == []


def test_negotiation_answers_while_the_upstream_hangs(provider: UnreliableProvider) -> None:
    provider.stuck.add("records")
    with serving(provider, request_timeout=WAIT) as webhook:
        stuck = threading.Thread(target=webhook.api.get, args=("/records",), daemon=True)
        stuck.start()
        assert provider.entered["records"].wait(WAIT)

        reply = webhook.api.get("/")

        assert reply.status_code == 200
        assert reply.json() == {"include": ["foo.bar.com"]}
        provider.release.set()
        stuck.join(WAIT)


def test_an_empty_domain_filter_is_an_empty_object() -> None:
    with serving(UnreliableProvider()) as webhook:
        reply = webhook.api.get("/")

    assert reply.content == b"{}"


# --- Records, AdjustEndpoints, ApplyChanges ----------------------------------------------------------


def test_records_returns_the_endpoints(webhook: Webhook) -> None:
    reply = webhook.api.get("/records", headers={"Accept": MEDIA_TYPE})

    assert reply.status_code == 200
    assert raw_content_type(reply) == MEDIA_TYPE.encode()
    assert reply.json() == [{"dnsName": "foo.bar.com", "recordType": "A", "targets": ["1.2.3.4"]}]


def test_adjust_endpoints_returns_what_the_provider_makes_of_them(webhook: Webhook) -> None:
    # TestAdjustEndpoints: the provider drops the TTL; the webhook passes its answer on unchanged.
    reply = webhook.api.post(
        "/adjustendpoints",
        content=b'[{"dnsName":"Test.Example.com","recordTTL":10,"recordType":"A","targets":[""]}]',
    )

    assert reply.status_code == 200
    assert raw_content_type(reply) == MEDIA_TYPE.encode()
    assert reply.json() == [{"dnsName": "test.example.com", "recordType": "A", "targets": [""]}]


def test_adjust_endpoints_of_an_empty_list(webhook: Webhook) -> None:
    # external-dns calls it every loop, even with nothing desired.
    reply = webhook.api.post("/adjustendpoints", content=b"[]")

    assert (reply.status_code, reply.json()) == (200, [])


def test_apply_changes_answers_204_with_an_empty_body_and_applies(webhook: Webhook) -> None:
    reply = webhook.api.post("/records", content=CREATE_BAR)

    assert reply.status_code == 204
    assert reply.content == b""
    names = [endpoint["dnsName"] for endpoint in webhook.api.get("/records").json()]
    assert names == ["bar.bar.com", "foo.bar.com"]


def test_apply_changes_with_mixed_case_keys() -> None:
    # TestRecordsHandlerWithMixedCase: Create and Delete capitalised, updateOld/updateNew not.
    provider = UnreliableProvider(records=[Endpoint("bar", ""), Endpoint("qux", "")])
    body = (
        b'{"Create":[{"dnsName":"foo"}],"updateOld":[{"dnsName":"bar"}],'
        b'"updateNew":[{"dnsName":"baz"}],"Delete":[{"dnsName":"qux"}]}'
    )
    with serving(provider) as webhook:
        reply = webhook.api.post("/records", content=body)

    assert reply.status_code == 204
    assert sorted(endpoint.dns_name for endpoint in provider.records()) == ["baz", "foo"]


def test_apply_changes_with_null_lists_changes_nothing(webhook: Webhook) -> None:
    before = webhook.api.get("/records").json()

    reply = webhook.api.post(
        "/records", content=b'{"Create":null,"UpdateOld":null,"UpdateNew":null,"Delete":null}'
    )

    assert reply.status_code == 204
    assert webhook.api.get("/records").json() == before


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Accept": "text/html"},
        {"Accept": "*/*"},
        {"Accept": "application/external.dns.webhook+json;version=2"},
    ],
)
def test_odd_or_missing_accept_headers_are_never_refused(webhook: Webhook, headers: dict[str, str]) -> None:
    # ApplyChanges is sent with no Accept header at all; only a POST's media type is checked.
    assert webhook.api.get("/", headers=headers).status_code == 200
    assert webhook.api.get("/records", headers={**headers, "Content-Type": "text/plain"}).status_code == 200
    assert webhook.api.post("/adjustendpoints", content=b"[]", headers=headers).status_code == 200
    assert webhook.api.post("/records", content=b"{}", headers=headers).status_code == 204


def test_a_body_of_the_largest_accepted_size_is_accepted(webhook: Webhook) -> None:
    def body_of(target_length: int) -> bytes:
        change = {"dnsName": "big.bar.com", "recordType": "TXT", "targets": ["x" * target_length]}
        return json.dumps({"create": [change]}).encode()

    body = body_of(DEFAULT_MAX_REQUEST_BODY - len(body_of(0)))
    assert len(body) == DEFAULT_MAX_REQUEST_BODY

    reply = webhook.api.post("/records", content=body)

    assert reply.status_code == 204


# --- What external-dns never sends: another Host, another media type (DNS rebinding) ------------------


@pytest.mark.parametrize(
    "content_type",
    [
        MEDIA_TYPE,
        "application/external.dns.webhook+json; version=1",
        "Application/External.DNS.Webhook+JSON;Version=1;charset=utf-8",
    ],
)
def test_a_post_in_the_webhook_media_type_is_accepted(webhook: Webhook, content_type: str) -> None:
    reply = webhook.api.post("/records", content=CREATE_BAR, headers={"Content-Type": content_type})

    assert reply.status_code == 204


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json",
        "application/external.dns.webhook+json",
        "application/external.dns.webhook+json;version=2",
    ],
)
@pytest.mark.parametrize("path", ["/records", "/adjustendpoints"])
def test_a_post_in_another_media_type_is_415_and_changes_nothing(
    webhook: Webhook, provider: UnreliableProvider, content_type: str | None, path: str
) -> None:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    request = webhook.api.build_request("POST", path, content=CREATE_BAR, headers=headers)
    if content_type is None:
        del request.headers["Content-Type"]

    reply = webhook.api.send(request)

    assert reply.status_code == 415
    assert MEDIA_TYPE in reply.json()["error"]
    assert provider.remote_calls == []


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8888", "localhost", "LOCALHOST:8888", "[::1]:8888", "::1", "127.1.2.3"]
)
def test_loopback_hosts_are_served(webhook: Webhook, host: str) -> None:
    reply = webhook.api.post("/records", content=CREATE_BAR, headers={"Host": host})

    assert reply.status_code == 204


@pytest.mark.parametrize(
    "host", ["evil.example.com", "evil.example.com:8888", "10.0.0.1", "localhost.evil.com"]
)
def test_another_host_is_421_naming_the_setting_and_changes_nothing(
    webhook: Webhook, provider: UnreliableProvider, host: str
) -> None:
    with capture_logs() as logs:
        applied = webhook.api.post("/records", content=CREATE_BAR, headers={"Host": host})
        read = webhook.api.get("/records", headers={"Host": host})

    assert applied.status_code == read.status_code == 421
    assert "LANDB_API_ALLOWED_HOSTS" in applied.json()["error"]
    assert provider.remote_calls == []
    [line] = [entry for entry in logs if entry["event"] == "request refused: wrong host"]
    assert line["host"] == host


def test_a_configured_host_is_served(provider: UnreliableProvider) -> None:
    with serving(provider, allowed_hosts=("landb-webhook.example.svc",)) as webhook:
        allowed = webhook.api.post(
            "/records", content=CREATE_BAR, headers={"Host": "Landb-Webhook.example.svc:8888"}
        )
        other = webhook.api.post("/records", content=CREATE_BAR, headers={"Host": "evil.example.com"})

    assert allowed.status_code == 204
    assert other.status_code == 421


def test_health_and_metrics_answer_any_host(webhook: Webhook) -> None:
    # The kubelet probes the pod IP, Prometheus scrapes it by address: the health listener checks no Host.
    assert webhook.health.get("/healthz", headers={"Host": "10.1.2.3:8080"}).status_code == 200
    assert webhook.health.get("/metrics", headers={"Host": "10.1.2.3:8080"}).status_code == 200


# --- Bad requests: 400, and only for the body ---------------------------------------------------------


@pytest.mark.parametrize("path", ["/records", "/adjustendpoints"])
@pytest.mark.parametrize("body", [b"", b"{", b"invalid-json", b"[1, 2", b'"a string"'])
def test_a_body_that_is_not_the_right_json_is_400(webhook: Webhook, path: str, body: bytes) -> None:
    reply = webhook.api.post(path, content=body)

    assert reply.status_code == 400
    assert raw_content_type(reply) == MEDIA_TYPE.encode()
    assert reply.json()["error"].startswith("invalid")


def test_a_bad_body_reaches_no_provider(webhook: Webhook, provider: UnreliableProvider) -> None:
    webhook.api.post("/records", content=b'{"create":"foo"}')

    assert provider.remote_calls == []


def numbered(count: int, start: int = 0) -> list[dict[str, object]]:
    """``count`` endpoints of distinct names, as external-dns encodes them."""
    return [
        {"dnsName": f"n{index:06d}.bar.com", "recordType": "A", "targets": ["192.0.2.1"]}
        for index in range(start, start + count)
    ]


def over_the_endpoint_limit(path: str, keys: tuple[str, ...]) -> bytes:
    """One endpoint more than LANDB_MAX_REQUEST_ENDPOINTS' default: ApplyChanges' spread over its four
    lists (named ``keys``), none of them over the limit alone."""
    over = DEFAULT_MAX_REQUEST_ENDPOINTS + 1
    if path == "/adjustendpoints":
        return json.dumps(numbered(over)).encode()
    quarter = over // 4
    counts = (quarter, quarter, quarter, over - 3 * quarter)
    return json.dumps({key: numbered(count) for key, count in zip(keys, counts, strict=True)}).encode()


EXTERNAL_DNS_KEYS = ("create", "updateOld", "updateNew", "delete")
GO_STYLE_KEYS = ("Create", "UpdateOld", "UpdateNew", "Delete")
"""Another spelling Go's decoder takes: the forgiving decoder reads it, and its result is counted."""


def owned_by(
    resource: str, count: int, start: int = 0, domain: str = "foo.bar.com"
) -> list[dict[str, object]]:
    """``count`` endpoints of distinct names asked by ``resource``, as external-dns encodes them."""
    return [
        {
            "dnsName": f"n{index:06d}.{domain}",
            "recordType": "A",
            "targets": ["192.0.2.1"],
            "labels": {"resource": resource},
        }
        for index in range(start, start + count)
    ]


@pytest.mark.parametrize(
    ("path", "keys"),
    [("/records", EXTERNAL_DNS_KEYS), ("/records", GO_STYLE_KEYS), ("/adjustendpoints", ())],
)
def test_more_endpoints_than_the_limit_are_cut_to_it_not_refused(
    webhook: Webhook, provider: UnreliableProvider, path: str, keys: tuple[str, ...]
) -> None:
    """Names outside the domain filter go first, uncounted; the rest still over the limit is cut from the
    largest requester: never a 503, which would stop external-dns' loop for every namespace."""
    body = over_the_endpoint_limit(path, keys)
    before = counted(webhook.metrics, "dropped_endpoints_total", reason="outside_domain_filter")

    with capture_logs() as logs:
        reply = webhook.api.post(path, content=body)

    assert reply.status_code == (200 if path == "/adjustendpoints" else 204)
    assert counted(webhook.metrics, "dropped_endpoints_total", reason="outside_domain_filter") == before + (
        DEFAULT_MAX_REQUEST_ENDPOINTS + 1
    )
    assert not [entry for entry in logs if entry["event"].startswith("request body refused")]


def test_past_the_limit_the_largest_requester_loses_its_excess_and_the_others_reach_the_provider(
    webhook: Webhook, provider: UnreliableProvider
) -> None:
    team_b = owned_by("ingress/team-b/grab", DEFAULT_MAX_REQUEST_ENDPOINTS + 1)
    team_a = owned_by("ingress/team-a/site", 2, start=DEFAULT_MAX_REQUEST_ENDPOINTS + 1)
    before = counted(webhook.metrics, "dropped_endpoints_total", reason="request_cap")

    with capture_logs() as logs:
        reply = webhook.api.post("/adjustendpoints", content=json.dumps([*team_b, *team_a]).encode())

    assert reply.status_code == 200
    names = [endpoint["dnsName"] for endpoint in reply.json()]
    assert len(names) == DEFAULT_MAX_REQUEST_ENDPOINTS
    assert {"n010001.foo.bar.com", "n010002.foo.bar.com"} <= set(names)  # team-a's, after team-b's
    assert counted(webhook.metrics, "dropped_endpoints_total", reason="request_cap") == before + 3
    [line] = [entry for entry in logs if entry["event"].startswith("endpoints dropped: the request is over")]
    assert (line["resource"], line["dropped"], line["limit"]) == (
        "ingress/team-b/grab",
        3,
        DEFAULT_MAX_REQUEST_ENDPOINTS,
    )
    assert "LANDB_MAX_REQUEST_ENDPOINTS" in line["setting"]


def test_an_update_cut_past_the_limit_loses_both_sides() -> None:
    half = DEFAULT_MAX_REQUEST_ENDPOINTS // 2
    old = owned_by("ingress/team-b/grab", half + 1)
    new = [{**endpoint, "targets": ["192.0.2.2"]} for endpoint in old]
    creates = owned_by("ingress/team-a/site", 1, start=half + 1)
    body = {"create": creates, "updateOld": old, "updateNew": new}

    changes, cuts = decode_within(decode_changes, json.dumps(body).encode(), DEFAULT_MAX_REQUEST_ENDPOINTS)

    assert len(changes.update_old) == len(changes.update_new) == half - 1
    assert [e.dns_name for e in changes.update_old] == [e.dns_name for e in changes.update_new]
    assert len(changes.create) == 1
    assert [(c.requester, c.dropped) for c in cuts] == [("ingress/team-b/grab", 4)]


def test_too_many_endpoints_are_cut_before_they_are_decoded(webhook: Webhook) -> None:
    """Decoding 16 MiB of names alone would take ``serve`` past the chart's memory limit: the cut reads
    the body element by element, and what it drops is never decoded (a wrong member there is not seen)."""
    endpoints = owned_by("ingress/team-b/grab", DEFAULT_MAX_REQUEST_ENDPOINTS + 1)
    endpoints[-1]["targets"] = 5

    reply = webhook.api.post("/records", content=json.dumps({"create": endpoints}).encode())

    assert reply.status_code == 204


def test_a_request_of_exactly_the_endpoint_limit_reaches_the_provider(
    webhook: Webhook, provider: UnreliableProvider
) -> None:
    endpoints = numbered(DEFAULT_MAX_REQUEST_ENDPOINTS)

    adjusted = webhook.api.post("/adjustendpoints", content=json.dumps(endpoints).encode())
    applied = webhook.api.post("/records", content=json.dumps({"create": endpoints}).encode())

    assert (adjusted.status_code, applied.status_code) == (200, 204)
    assert len(adjusted.json()) == DEFAULT_MAX_REQUEST_ENDPOINTS
    assert len(provider.records()) == 1 + DEFAULT_MAX_REQUEST_ENDPOINTS


def test_unknown_paths_are_404_and_trailing_slashes_are_not_redirected(webhook: Webhook) -> None:
    # A 3xx is fatal to external-dns; so is a 404, but external-dns never asks for these paths.
    assert webhook.api.get("/records/").status_code == 404
    assert webhook.api.get("/nothing-here").status_code == 404


# --- Upstream trouble: 503 with a reason, never 500 ---------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", "/records", None), ("POST", "/adjustendpoints", b"[]"), ("POST", "/records", CREATE_BAR)],
)
def test_an_upstream_failure_is_503_naming_the_upstream(
    webhook: Webhook, provider: UnreliableProvider, method: str, path: str, body: bytes | None
) -> None:
    provider.outage = UpstreamError("nova", "connection refused")

    reply = webhook.api.request(method, path, content=body)

    assert reply.status_code == 503
    assert raw_content_type(reply) == MEDIA_TYPE.encode()
    assert reply.json() == {"error": "nova unavailable: connection refused"}


def test_a_partial_apply_is_503_with_its_reason(webhook: Webhook) -> None:
    # The in-memory provider refuses to create a record that exists: an ApplyError.
    reply = webhook.api.post("/records", content=CREATE_FOO)

    assert reply.status_code == 503
    assert "already exists" in reply.json()["error"]


def test_an_unexpected_exception_is_503_without_its_details(
    webhook: Webhook, provider: UnreliableProvider
) -> None:
    provider.outage = KeyError("server-1234 internal detail")

    reply = webhook.api.get("/records")

    assert reply.status_code == 503
    assert reply.json() == {"error": "internal error: KeyError"}


def test_the_reply_body_never_carries_a_secret(webhook: Webhook, provider: UnreliableProvider) -> None:
    provider.outage = UpstreamError("keystone", "401 for password=hunter2")

    reply = webhook.api.get("/records")

    assert reply.status_code == 503
    assert "hunter2" not in reply.text


# --- Deadline and single writer -----------------------------------------------------------------------


def test_a_call_past_the_deadline_is_503_and_finishes_in_the_background(provider: UnreliableProvider) -> None:
    provider.stuck.add("apply_changes")
    deadline = 0.3
    with serving(provider, request_timeout=deadline) as webhook:
        started = time.monotonic()
        first = webhook.api.post("/records", content=CREATE_BAR)
        elapsed = time.monotonic() - started

        assert first.status_code == 503
        assert first.json() == {"error": "deadline exceeded"}
        assert deadline <= elapsed < deadline + 2

        second = webhook.api.post("/records", content=encode_changes(Changes()))
        assert second.status_code == 503
        assert second.json() == {"error": "apply in progress"}

        provider.release.set()
        assert webhook.calls.wait_for_apply(WAIT)
        # The first apply landed although its request had given up; the writer is free again.
        assert [e["dnsName"] for e in webhook.api.get("/records").json()] == ["bar.bar.com", "foo.bar.com"]
        third = webhook.api.post("/records", content=encode_changes(Changes(delete=(FOO,))))
        assert third.status_code == 204


def test_a_second_apply_while_the_first_runs_is_503(provider: UnreliableProvider) -> None:
    provider.stuck.add("apply_changes")
    with serving(provider) as webhook:
        replies: list[httpx.Response] = []
        first = threading.Thread(
            target=lambda: replies.append(webhook.api.post("/records", content=CREATE_BAR))
        )
        first.start()
        assert provider.entered["apply_changes"].wait(WAIT)

        second = webhook.api.post("/records", content=CREATE_BAR)

        assert second.status_code == 503
        assert second.json() == {"error": "apply in progress"}
        provider.release.set()
        first.join(WAIT)
        assert [reply.status_code for reply in replies] == [204]


def test_reads_are_not_blocked_by_a_running_apply(provider: UnreliableProvider) -> None:
    provider.stuck.add("apply_changes")
    with serving(provider) as webhook:
        first = threading.Thread(target=webhook.api.post, args=("/records",), kwargs={"content": CREATE_BAR})
        first.start()
        assert provider.entered["apply_changes"].wait(WAIT)

        assert webhook.api.get("/records").status_code == 200
        assert webhook.api.post("/adjustendpoints", content=b"[]").status_code == 200
        provider.release.set()
        first.join(WAIT)


def test_a_read_past_the_deadline_is_503_and_the_next_one_succeeds(provider: UnreliableProvider) -> None:
    provider.stuck.add("records")
    with serving(provider, request_timeout=0.3) as webhook:
        assert webhook.api.get("/records").json() == {"error": "deadline exceeded"}
        provider.stuck.clear()
        provider.release.set()

        reply = webhook.api.get("/records")

        assert reply.status_code == 200


def test_stopping_waits_for_a_running_apply(provider: UnreliableProvider) -> None:
    # Leaving mid-apply could stop between "alias added" and "alias removed" on the nodes.
    provider.stuck.add("apply_changes")
    metrics = Metrics.create(process_metrics=False)
    listener = bind_listener("127.0.0.1", 0)
    servers = HttpServers(
        [(create_api_app(provider, metrics, request_timeout=0.3), listener, api_limits())], graceful_timeout=1
    )
    thread = threading.Thread(target=asyncio.run, args=(servers.serve(handle_signals=False),), daemon=True)
    thread.start()
    with client(listener_url(listener)) as api:
        assert api.post("/records", content=CREATE_BAR).json() == {"error": "deadline exceeded"}

    servers.stop()
    thread.join(0.5)
    still_draining = thread.is_alive()
    provider.release.set()
    thread.join(WAIT)

    assert still_draining
    assert not thread.is_alive()
    assert [endpoint.dns_name for endpoint in provider.records()] == ["bar.bar.com", "foo.bar.com"]


# --- Health listener ----------------------------------------------------------------------------------


def test_healthz_answers_while_the_provider_is_stuck(provider: UnreliableProvider) -> None:
    provider.stuck.add("records")
    with serving(provider, request_timeout=WAIT) as webhook:
        stuck = threading.Thread(target=webhook.api.get, args=("/records",), daemon=True)
        stuck.start()
        assert provider.entered["records"].wait(WAIT)

        assert webhook.health.get("/healthz").status_code == 200
        provider.release.set()
        stuck.join(WAIT)


def test_healthz_fails_while_calls_are_stuck_and_nothing_returns_and_recovers_when_they_do(
    provider: UnreliableProvider,
) -> None:
    """The liveness rule (webhook/liveness.py) on the wire, its window on a virtual clock: a stuck
    apply alone is no stall while reads keep returning; once nothing returns, /healthz is 503."""
    clock = ManualClock()
    progress = CallProgress(60.0, clock=clock)
    provider.stuck.add("apply_changes")
    with serving(provider, request_timeout=0.2, progress=progress) as webhook:
        assert webhook.api.post("/records", content=CREATE_FOO).status_code == 503  # past its deadline
        assert provider.entered["apply_changes"].is_set()
        clock.now += 61
        assert webhook.api.get("/records").status_code == 200  # reads return: work goes on
        assert webhook.health.get("/healthz").status_code == 200

        clock.now += 61
        stalled = webhook.health.get("/healthz")
        assert stalled.status_code == 503
        assert "1 webhook call(s) in flight" in stalled.text
        assert "landb_webhook_provider_calls_in_flight 1.0" in webhook.health.get("/metrics").text

        provider.release.set()
        # a done-callback runs in the worker thread
        assert eventually(lambda: progress.in_flight() == 0, what="no call in flight", timeout=WAIT)
        assert webhook.health.get("/healthz").status_code == 200


def test_healthz_stays_up_while_the_upstream_fails_fast(provider: UnreliableProvider) -> None:
    clock = ManualClock()
    progress = CallProgress(60.0, clock=clock)
    provider.outage = UpstreamError("nova", "HTTP 503")
    with serving(provider, request_timeout=0.2, progress=progress) as webhook:
        for _ in range(3):
            assert webhook.api.get("/records").status_code == 503
            clock.now += 61
            assert webhook.health.get("/healthz").status_code == 200
        assert progress.in_flight() == 0


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_readyz_follows_the_provider_and_says_why(webhook: Webhook, provider: UnreliableProvider) -> None:
    provider.readiness_now = Readiness(False, "keystone: HTTP 401 The request you have made requires auth")
    not_ready = webhook.health.get("/readyz")
    assert (not_ready.status_code, not_ready.text) == (
        503,
        "not ready: keystone: HTTP 401 The request you have made requires auth\n",
    )

    provider.readiness_now = Readiness(True, "node cache synced")
    ready = webhook.health.get("/readyz")
    assert (ready.status_code, ready.text) == (200, "ready: node cache synced\n")


def test_readyz_never_shows_a_secret(webhook: Webhook, provider: UnreliableProvider) -> None:
    provider.readiness_now = Readiness(False, "connection failed: https://user:hunter2@keystone.example/v3")

    assert "hunter2" not in webhook.health.get("/readyz").text


def test_upstream_failures_of_reads_and_applies_are_counted(
    webhook: Webhook, provider: UnreliableProvider
) -> None:
    def errors(upstream: str) -> float:
        value = webhook.metrics.registry.get_sample_value(
            "landb_webhook_upstream_errors_total", {"upstream": upstream}
        )
        return value or 0.0

    before = errors("nova"), errors("kubernetes")
    provider.outage = UpstreamError("nova", "HTTP 503")
    webhook.api.get("/records")
    webhook.api.post("/adjustendpoints", content=b"[]")
    provider.outage = UpstreamError("kubernetes", "node inventory is stale")
    webhook.api.post("/records", content=CREATE_FOO)

    assert (errors("nova"), errors("kubernetes")) == (before[0] + 2, before[1] + 1)


def test_metrics_count_requests_by_route_and_code(provider: UnreliableProvider) -> None:
    with serving(provider) as webhook:
        webhook.api.get("/records")
        webhook.api.get("/records")
        provider.outage = UpstreamError("nova", "down")
        webhook.api.get("/records")
        webhook.api.post("/records", content=b"{")

        exposition = webhook.health.get("/metrics").text

    assert 'landb_webhook_requests_total{code="200",route="records"} 2.0' in exposition
    assert 'landb_webhook_requests_total{code="503",route="records"} 1.0' in exposition
    assert 'landb_webhook_requests_total{code="400",route="apply_changes"} 1.0' in exposition
    assert 'landb_webhook_request_duration_seconds_count{route="records"} 3.0' in exposition
    assert "landb_webhook_metadata_writes_total" in exposition


def test_metrics_are_served_as_openmetrics_when_asked(webhook: Webhook) -> None:
    reply = webhook.health.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})

    assert reply.headers["content-type"].startswith("application/openmetrics-text")
    assert reply.text.rstrip().endswith("# EOF")


# --- Access log ---------------------------------------------------------------------------------------


def access_lines(stream: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line.get("logger") == "landb_webhook.access"]


def test_one_access_line_per_webhook_request_at_info(webhook: Webhook) -> None:
    stream = io.StringIO()
    with restored_logging():
        configure_logging("info", "json", stream=stream)
        webhook.api.post("/adjustendpoints", content=b'[{"dnsName":"a.bar.com","recordType":"A"}]')
        webhook.api.post("/records", content=CREATE_BAR)
        webhook.health.get("/healthz")
        webhook.health.get("/readyz")
        webhook.health.get("/metrics")

    adjust, apply = access_lines(stream)
    assert adjust["level"] == "info"
    assert (adjust["method"], adjust["path"], adjust["status"]) == ("POST", "/adjustendpoints", 200)
    assert (adjust["endpoints_in"], adjust["endpoints_out"]) == (1, 1)
    assert isinstance(adjust["duration_ms"], float)
    assert (apply["status"], apply["create"], apply["update"], apply["delete"]) == (204, 1, 0, 0)


def test_probes_and_scrapes_log_at_debug(webhook: Webhook) -> None:
    stream = io.StringIO()
    with restored_logging():
        configure_logging("debug", "json", stream=stream)
        webhook.health.get("/healthz")
        webhook.health.get("/metrics")

    lines = access_lines(stream)
    assert [(line["path"], line["level"]) for line in lines] == [("/healthz", "debug"), ("/metrics", "debug")]
