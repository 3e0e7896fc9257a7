"""ConfigMapOwnershipStore against the simulated Kubernetes API, through the kubernetes client over HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters import ownership as ownership_adapter
from landb_webhook.adapters.ownership import MANAGED_BY_LABEL, ConfigMapOwnershipStore
from landb_webhook.backends import UpstreamError
from landb_webhook.endpoint import Endpoint
from support.clusters import KubeCluster
from support.kube_requests import configmap_requests

MakeStore = Callable[..., ConfigMapOwnershipStore]
Eventually = Callable[..., Any]
CONFIGMAP = "landb-webhook-ownership"  # what make_configmap_store uses by default, in the cluster's namespace


def txt(name: str, owner: str = "default", resource: str = "ingress/web/app") -> Endpoint:
    value = f'"heritage=external-dns,external-dns/owner={owner},external-dns/resource={resource}"'
    owned = name.removeprefix("a-")
    return Endpoint(name, "TXT", (value,), labels=(("ownedRecord", owned),))


class InterleavingApi(client.CoreV1Api):
    """A CoreV1Api that lets another writer act right before each of this client's writes.

    This is a real concurrent writer going through the same API server, placed in the one window
    optimistic concurrency exists for: after our read, before our write. ``write_statuses`` records
    what the API server answered each of this client's writes.
    """

    def __init__(
        self, api_client: client.ApiClient, before_write: Callable[[], None], times: int = 1
    ) -> None:
        super().__init__(api_client)
        self._before_write = before_write
        self._times = times
        self.write_statuses: list[int] = []

    def _interleave(self) -> None:
        if self._times:
            self._times -= 1
            self._before_write()

    def _write(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._interleave()
        try:
            written = write(*args, **kwargs)
        except ApiException as exc:
            self.write_statuses.append(int(exc.status))
            raise
        self.write_statuses.append(200)
        return written

    def replace_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        return self._write(super().replace_namespaced_config_map, *args, **kwargs)

    def create_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        return self._write(super().create_namespaced_config_map, *args, **kwargs)


# -- the basic contract ------------------------------------------------------------------------------


def test_an_empty_store_has_no_records_and_no_configmap(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    assert make_configmap_store().records() == []
    assert kube_cluster.configmap(CONFIGMAP) is None


def test_upserts_create_deletes_remove_and_missing_deletes_succeed(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    store = make_configmap_store()
    app, web = txt("a-app.cern.ch"), txt("a-web.cern.ch")
    store.apply([app, web], [])
    assert store.records() == [app, web]
    store.apply([], [web, txt("a-never-existed.cern.ch")])
    assert store.records() == [app]
    store.apply([], [txt("a-never-existed.cern.ch")])
    assert store.records() == [app]


def test_an_update_whose_old_and_new_share_a_name_keeps_the_new(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    store = make_configmap_store()
    old = txt("a-app.cern.ch", resource="ingress/web/old")
    new = txt("A-App.cern.ch", resource="ingress/web/new")
    store.apply([old], [])
    store.apply([new], [old])
    assert store.records() == [new]


def test_records_are_readable_with_kubectl(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    record = txt("a-app.cern.ch")
    make_configmap_store().apply([record], [])
    configmap = kube_cluster.configmap(CONFIGMAP)
    assert configmap["metadata"]["labels"][MANAGED_BY_LABEL] == "landb-webhook"
    stored = json.loads(configmap["data"]["a-app.cern.ch"])
    assert stored["dnsName"] == "a-app.cern.ch"
    assert stored["recordType"] == "TXT"
    assert stored["targets"] == list(record.targets)
    assert stored["labels"] == {"ownedRecord": "app.cern.ch"}


# Values as external-dns writes them and as people might break them: quotes, commas, unicode.
values = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
ownership_records = st.builds(
    Endpoint,
    dns_name=st.from_regex(r"a-[a-z0-9]{1,10}(\.[a-z0-9-]{1,10})?\.cern\.ch", fullmatch=True),
    record_type=st.just("TXT"),
    targets=st.lists(values, min_size=1, max_size=2).map(tuple),
    set_identifier=st.one_of(st.just(""), values),
    labels=st.dictionaries(
        st.sampled_from(["ownedRecord", "resource", 'ünïcode,"k"']), values, max_size=2
    ).map(lambda labels: tuple(labels.items())),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(ownership_records, max_size=6, unique_by=lambda record: (record.dns_name, record.set_identifier))
)
def test_records_round_trip_byte_for_byte(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, records: list[Endpoint]
) -> None:
    store = make_configmap_store(name=f"roundtrip-{uuid.uuid4().hex[:12]}")
    store.apply(records, [])
    expected = sorted(records, key=lambda record: (record.dns_name.lower(), record.set_identifier))
    assert store.records() == expected


# -- concurrency -------------------------------------------------------------------------------------


def test_a_concurrent_write_is_merged_not_overwritten(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, kube_api_client: client.ApiClient
) -> None:
    other = make_configmap_store()
    other.apply([txt("a-first.cern.ch")], [])
    api = InterleavingApi(kube_api_client, lambda: other.apply([txt("a-theirs.cern.ch")], []))
    make_configmap_store(api=api).apply([txt("a-ours.cern.ch")], [])
    names = [record.dns_name for record in make_configmap_store().records()]
    assert names == ["a-first.cern.ch", "a-ours.cern.ch", "a-theirs.cern.ch"]
    assert api.write_statuses == [409, 200]  # refused as stale after theirs landed, then merged


def test_a_concurrent_first_write_is_merged_too(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, kube_api_client: client.ApiClient
) -> None:
    other = make_configmap_store()
    api = InterleavingApi(kube_api_client, lambda: other.apply([txt("a-theirs.cern.ch")], []))
    make_configmap_store(api=api).apply([txt("a-ours.cern.ch")], [])
    names = [record.dns_name for record in make_configmap_store().records()]
    assert names == ["a-ours.cern.ch", "a-theirs.cern.ch"]


def test_endless_conflicts_give_up_with_an_upstream_error(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, kube_api_client: client.ApiClient
) -> None:
    other = make_configmap_store()
    other.apply([txt("a-first.cern.ch")], [])
    counter = iter(range(1000))
    api = InterleavingApi(
        kube_api_client, lambda: other.apply([txt(f"a-theirs-{next(counter)}.cern.ch")], []), times=1000
    )
    with pytest.raises(UpstreamError) as raised:
        make_configmap_store(api=api, max_attempts=3).apply([txt("a-ours.cern.ch")], [])
    assert (raised.value.upstream, raised.value.retryable) == ("kubernetes", True)
    assert "a-ours.cern.ch" not in {record.dns_name for record in other.records()}


def test_a_configmap_we_do_not_own_is_never_overwritten(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    kube_cluster.put_configmap(CONFIGMAP, {"someone": "else's data"})
    with pytest.raises(UpstreamError) as raised:
        make_configmap_store().apply([txt("a-app.cern.ch")], [])
    assert raised.value.retryable is False
    assert "refusing" in raised.value.reason
    assert kube_cluster.configmap(CONFIGMAP)["data"] == {"someone": "else's data"}


# -- splitting ---------------------------------------------------------------------------------------


def stored_configmaps(cluster: KubeCluster, count: int = 20) -> dict[str, dict[str, str]]:
    names = [CONFIGMAP] + [f"{CONFIGMAP}-{index}" for index in range(1, count)]
    return {name: (cm.get("data") or {}) for name in names if (cm := cluster.configmap(name)) is not None}


def test_records_spill_into_numbered_configmaps_under_the_size_limit(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    limit = 1000
    store = make_configmap_store(max_bytes=limit)
    records = [txt(f"a-app{i:02d}.cern.ch") for i in range(20)]
    store.apply(records, [])
    configmaps = stored_configmaps(kube_cluster)
    assert len(configmaps) >= 3
    for name, data in configmaps.items():
        assert sum(len(key) + len(value.encode()) for key, value in data.items()) <= limit, name
        assert kube_cluster.configmap(name)["metadata"]["labels"][MANAGED_BY_LABEL] == "landb-webhook"
    assert sorted(key for data in configmaps.values() for key in data) == sorted(r.dns_name for r in records)
    assert store.records() == records

    store.apply([], records[:10])
    assert store.records() == records[10:]


def test_storing_claims_is_linear_in_the_records(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work is counted, not timed: the entry sizes summed to place the records. Re-summing a ConfigMap
    for each record made it quadratic (8,000 claims in one apply kept the single writer busy 20 s); now
    each stored entry is sized a bounded number of times, however many there are and however many
    ConfigMaps they spill into."""
    sized: list[str] = []
    entry_size = ownership_adapter.entry_size

    def counted(key: str, value: str) -> int:
        sized.append(key)
        return entry_size(key, value)

    monkeypatch.setattr(ownership_adapter, "entry_size", counted)
    store = make_configmap_store(max_bytes=64 * 1024)
    stored = 0
    for batch, count in enumerate((250, 1000, 3000)):
        records = [txt(f"a-app{batch}-{i:05d}.cern.ch") for i in range(count)]
        sized.clear()
        store.apply(records, [])
        stored += count
        assert len(sized) <= 2 * stored, (
            f"{len(sized)} entry sizes computed to store {count} onto {stored - count}"
        )
    assert len(stored_configmaps(kube_cluster, count=40)) >= 10, "spread over many ConfigMaps"
    assert len(store.records()) == stored


def test_a_record_that_outgrows_its_configmap_moves_and_is_never_duplicated(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    store = make_configmap_store(max_bytes=1000)
    records = [txt(f"a-app{i:02d}.cern.ch") for i in range(12)]
    store.apply(records, [])
    grown = txt("a-app00.cern.ch", resource="ingress/web/" + "x" * 400)
    store.apply([grown], [])
    assert store.records() == [grown, *records[1:]]
    holders = [name for name, data in stored_configmaps(kube_cluster).items() if "a-app00.cern.ch" in data]
    assert len(holders) == 1 and holders[0] != CONFIGMAP


def test_a_moving_record_is_never_missing_nor_stale_between_writes(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, kube_api_client: client.ApiClient
) -> None:
    setup = make_configmap_store(max_bytes=1000)
    records = [txt(f"a-app{i:02d}.cern.ch") for i in range(12)]
    setup.apply(records, [])
    before = stored_configmaps(kube_cluster)
    last = max(before, key=lambda name: int(name.removeprefix(CONFIGMAP).removeprefix("-") or 0))
    mover = sorted(before[last])[0]
    # Room in the first ConfigMap, none for the grown record where it is: it must move up, not down.
    setup.apply([], [record for record in records if record.dns_name in before[CONFIGMAP]])
    grown = txt(mover, resource="ingress/web/" + "x" * 600)

    observer = make_configmap_store()
    seen: list[tuple[str, ...]] = []

    def observe() -> None:
        seen.append(tuple(record.targets[0] for record in observer.records() if record.dns_name == mover))

    api = InterleavingApi(kube_api_client, observe, times=10)
    make_configmap_store(api=api, max_bytes=1000).apply([grown], [])
    observe()
    old_value = next(record.targets[0] for record in records if record.dns_name == mover)
    assert len(seen) == 3  # before the write to the new home, before the removal, after both
    assert seen[0] == (old_value,)
    assert seen[1:] == [(grown.targets[0],), (grown.targets[0],)]
    holders = [name for name, data in stored_configmaps(kube_cluster).items() if mover in data]
    assert holders != [CONFIGMAP] and holders != [last] and len(holders) == 1


def test_a_record_larger_than_a_configmap_is_refused(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    store = make_configmap_store(max_bytes=300)
    with pytest.raises(UpstreamError) as raised:
        store.apply([txt("a-app.cern.ch", resource="x" * 400)], [])
    assert raised.value.retryable is False


# -- failures ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retryable"), [(503, True), (500, True), (403, False), (401, False)])
def test_kubernetes_failures_are_upstream_errors(
    simulator: Any, make_configmap_store: MakeStore, status: int, retryable: bool
) -> None:
    simulator.state.inject_fault(api="kubernetes", path_pattern="/configmaps", status=status, times=None)
    store = make_configmap_store()
    with pytest.raises(UpstreamError) as raised:
        store.records()
    assert (raised.value.upstream, raised.value.retryable) == ("kubernetes", retryable)
    assert str(status) in raised.value.reason
    with pytest.raises(UpstreamError):
        store.apply([txt("a-app.cern.ch")], [])


# -- the watch-fed cache (the service starts it; the one-shot commands read fresh) --------------------


def started(store: ConfigMapOwnershipStore) -> ConfigMapOwnershipStore:
    store.start()
    assert store.wait_synced(5)
    return store


def names(store: ConfigMapOwnershipStore) -> list[str]:
    return [record.dns_name for record in store.records()]


def test_records_from_a_synced_cache_make_no_request(simulator: Any, make_configmap_store: MakeStore) -> None:
    store = started(make_configmap_store())
    store.apply([txt("a-app.cern.ch"), txt("a-web.cern.ch")], [])
    simulator.state.reset_api_calls()
    for _ in range(20):
        assert names(store) == ["a-app.cern.ch", "a-web.cern.ch"]
    assert configmap_requests(simulator.state) == []


def test_a_write_is_seen_by_the_very_next_records(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore
) -> None:
    store = started(make_configmap_store())
    for i in range(5):
        store.apply([txt(f"a-app{i}.cern.ch")], [])
        assert f"a-app{i}.cern.ch" in names(store)
    store.apply([], [txt("a-app0.cern.ch")])
    assert names(store) == [f"a-app{i}.cern.ch" for i in range(1, 5)]


def test_a_write_is_seen_at_once_even_while_the_watch_is_down(
    simulator: Any, make_configmap_store: MakeStore, eventually: Eventually
) -> None:
    """Read-your-writes comes from the write's reply, not the watch: with every list and watch of
    ConfigMaps failing (and the cache not yet too old to use), the write plans from the cache and the
    next records() answers from it, both without reading."""
    store = started(make_configmap_store(watch_timeout=1, max_staleness=300))
    store.apply([txt("a-app.cern.ch")], [])
    reads_fail = simulator.state.inject_fault(
        api="kubernetes", method="GET", path_pattern="/configmaps", times=None
    )
    eventually(lambda: reads_fail.hits >= 1, timeout=10, what="the watch to be down")
    store.apply([txt("a-web.cern.ch")], [txt("a-app.cern.ch")])
    assert names(store) == ["a-web.cern.ch"]
    reads_fail.cancel()


def test_another_writers_change_arrives_by_the_watch(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, eventually: Eventually
) -> None:
    ours = started(make_configmap_store())
    ours.apply([txt("a-ours.cern.ch")], [])
    make_configmap_store().apply([txt("a-theirs.cern.ch")], [])  # say, `adopt`: it reads and writes fresh
    eventually(lambda: names(ours) == ["a-ours.cern.ch", "a-theirs.cern.ch"], what="their claim, watched")


def test_a_write_planned_from_a_cache_behind_the_api_is_merged_not_lost(
    kube_cluster: KubeCluster, make_configmap_store: MakeStore, kube_api_client: client.ApiClient
) -> None:
    """Their write lands after our cache was read, before our write: ours carries the resourceVersion
    it planned from, so it is refused (409), re-read fresh and merged."""
    other = make_configmap_store()
    other.apply([txt("a-first.cern.ch")], [])
    api = InterleavingApi(kube_api_client, lambda: other.apply([txt("a-theirs.cern.ch")], []))
    ours = started(make_configmap_store(api=api))
    ours.apply([txt("a-ours.cern.ch")], [])
    assert api.write_statuses == [409, 200]
    expected = ["a-first.cern.ch", "a-ours.cern.ch", "a-theirs.cern.ch"]
    assert names(other) == expected
    assert names(ours) == expected  # the fresh re-read and our write are in the cache at once


def test_an_unsynced_cache_reads_fresh_and_never_reports_nothing(
    simulator: Any, make_configmap_store: MakeStore
) -> None:
    make_configmap_store().apply([txt("a-app.cern.ch")], [])
    lists_fail = simulator.state.inject_fault(
        api="kubernetes", method="GET", path_pattern="/configmaps", times=None
    )
    store = make_configmap_store()
    store.start()
    assert not store.synced
    with pytest.raises(UpstreamError) as raised:
        store.records()  # the cache has nothing to say yet, and the fresh read fails: a 503
    assert raised.value.retryable
    lists_fail.cancel()
    assert names(store) == ["a-app.cern.ch"]


def test_a_cache_too_old_is_not_trusted_records_read_fresh(
    simulator: Any, make_configmap_store: MakeStore
) -> None:
    now = [1000.0]
    store = started(make_configmap_store(watch_timeout=300, max_staleness=60, clock=lambda: now[0]))
    store.apply([txt("a-app.cern.ch")], [])
    simulator.state.reset_api_calls()
    assert names(store) == ["a-app.cern.ch"]
    assert configmap_requests(simulator.state) == []
    now[0] += 61  # no list or watch has ended well for longer than the bound
    assert names(store) == ["a-app.cern.ch"]
    assert [call.method for call in configmap_requests(simulator.state)] == ["GET"]
