"""The benchmark's counting (bench/counting.py): a known sequence of real-client calls against the
simulator gives exactly the known counts, and the physical minimum of hand-built cases is right."""

from __future__ import annotations

from pathlib import Path

from bench.counting import (
    ApplyWrites,
    CallCounts,
    Minimum,
    ServerWrites,
    apply_writes,
    converged,
    keys_rewritten,
    minimum_for,
    minimum_writes,
    phase_rounds,
    request_rounds,
)
from kubernetes import client

from landb_simulator import ApiCall, MetadataChange, Simulator, seed_cluster
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import OpenStackSession
from landb_webhook.backends import Node
from support.default_options import openstack_options

CERN = {"landb-mainuser": "admins"}


def test_a_known_sequence_of_calls_gives_the_exact_counts(simulator: Simulator, tmp_path: Path) -> None:
    names = seed_cluster(simulator.state, ingress_nodes=2, workers=0)
    config = simulator.write_client_config(tmp_path)
    store = OpenStackServerStore(
        OpenStackSession(config.cloud_name, clouds_yaml=config.clouds_yaml, options=openstack_options())
    )
    api_client = api_client_for(config.kubeconfig)
    try:
        nodes = [Node(name, None, (), True) for name in names]
        servers = store.servers_for(nodes)  # authenticates first
        server_id = servers[names[0]].id
        before = {server_id: simulator.state.metadata(server_id)}
        simulator.state.reset_api_calls()
        simulator.state.clear_metadata_history()

        store.servers_for(nodes)  # one anchored name search
        store.set_metadata(server_id, {"landb-alias": "app--load-0-", "landb-alias2": "web--load-0-"})
        store.delete_metadata(server_id, "landb-alias2")
        store.delete_metadata(server_id, "landb-alias2")  # already gone: a 404, still a request
        core = client.CoreV1Api(api_client)
        core.list_node()
        core.list_node(watch=True, timeout_seconds=1, _preload_content=False).release_conn()
        client.CoordinationV1Api(api_client).list_namespaced_lease("default")  # the writer Lease's kind

        counts = CallCounts.of(simulator.state.api_calls())
        assert counts == CallCounts(
            nova_reads=1, nova_writes=3, keystone=0, kubernetes=1, watches=1, leases=1
        )
        assert counts.total == 5
        # landb-alias and landb-alias2 set, then landb-alias2 deleted: three key changes.
        assert keys_rewritten(before, simulator.state.metadata_history()) == 3
    finally:
        store.close()
        api_client.close()


def test_the_physical_minimum_of_hand_built_cases() -> None:
    both = {**CERN, "landb-alias": "app--load-0-,web--load-0-", "landb-alias2": "db--load-0-"}
    # Nothing changes: nothing to write.
    assert minimum_writes(both, frozenset({"app", "web", "db"})) == Minimum(writes=0, keys=0)
    # One alias more: one POST of one key.
    assert minimum_writes(both, frozenset({"app", "web", "db", "new"})) == Minimum(writes=1, keys=1)
    # db alone in landb-alias2 goes: that key must be deleted, nothing else written.
    assert minimum_writes(both, frozenset({"app", "web"})) == Minimum(writes=1, keys=1)
    # web goes: landb-alias keeps app, so it is rewritten by one POST.
    assert minimum_writes(both, frozenset({"app", "db"})) == Minimum(writes=1, keys=1)
    # web and db go: one POST for landb-alias and one DELETE for landb-alias2.
    assert minimum_writes(both, frozenset({"app"})) == Minimum(writes=2, keys=2)
    # Everything goes: one DELETE per key.
    assert minimum_writes(both, frozenset()) == Minimum(writes=2, keys=2)
    # A fresh server taking 40 aliases of 20 characters (29-character tokens, 1199 characters with
    # commas): one POST, at least five 254-character keys.
    many = frozenset(f"alias-{i:014d}" for i in range(40))
    assert minimum_writes(CERN, many) == Minimum(writes=1, keys=5)

    fleet = {"a": both, "b": dict(CERN)}
    assert minimum_for(fleet, {"a": frozenset({"app", "web", "db"}), "b": frozenset({"app"})}) == Minimum(
        1, 1
    )


def test_converged_needs_exact_labels_and_unique_indices() -> None:
    wanted = {"a": frozenset({"app"}), "b": frozenset({"app"})}
    assert converged({"a": {"landb-alias": "app--load-0-"}, "b": {"landb-alias": "app--load-1-"}}, wanted)
    assert not converged({"a": {"landb-alias": "app--load-0-"}, "b": {"landb-alias": "app--load-0-"}}, wanted)
    assert not converged({"a": {"landb-alias": "app--load-0-"}, "b": CERN}, wanted)
    assert not converged(
        {"a": {"landb-alias": "app--load-0-,x--load-0-"}, "b": {"landb-alias": "app--load-1-"}}, wanted
    )


def test_writes_are_split_into_make_and_break_phases_per_server() -> None:
    before = {"a": {"landb-alias": "app--load-0-,web--load-0-", "landb-alias2": "db--load-0-"}, "b": {}}
    history = [
        # b gains app: a make write.
        MetadataChange(1, "b", "POST", None, {"landb-alias": "app--load-1-"}),
        # a loses web and db; db's key goes, web's key is rewritten: break writes.
        MetadataChange(2, "a", "POST", None, {"landb-alias": "app--load-0-", "landb-alias2": "db--load-0-"}),
        MetadataChange(3, "a", "DELETE", "landb-alias2", {"landb-alias": "app--load-0-"}),
    ]
    assert apply_writes(before, history) == ApplyWrites(make=(ServerWrites(1, 0),), brk=(ServerWrites(1, 1),))
    # A token moved out of a key about to be deleted adds nothing new: still a break write.
    moved = {"landb-alias": "app--load-0-,db--load-0-", "landb-alias2": "db--load-0-"}
    assert apply_writes(before, [MetadataChange(1, "a", "POST", None, moved)]).brk == (ServerWrites(1, 0),)


def test_writes_before_the_first_make_write_are_the_leave_phase() -> None:
    before = {"a": {"landb-alias": "old--load-0-,app--load-0-"}, "b": {"landb-alias": "gone--load-0-"}}
    history = [
        # old leaves DNS from a, gone from b (its key deleted): the leave phase, before any addition.
        MetadataChange(1, "a", "POST", None, {"landb-alias": "app--load-0-"}),
        MetadataChange(2, "b", "DELETE", "landb-alias", {}),
        # b gains app, then a lets it go: make, then break.
        MetadataChange(3, "b", "POST", None, {"landb-alias": "app--load-1-"}),
        MetadataChange(4, "a", "DELETE", "landb-alias", {}),
    ]
    writes = apply_writes(before, history)
    assert writes == ApplyWrites(
        leave=(ServerWrites(1, 0), ServerWrites(0, 1)), make=(ServerWrites(1, 0),), brk=(ServerWrites(0, 1),)
    )
    assert [phase_rounds(phase, 4) for phase in writes.phases] == [1, 1, 1]
    # Without a make write, removals are one phase: the break phase.
    assert apply_writes(before, history[:2]) == ApplyWrites(brk=(ServerWrites(1, 0), ServerWrites(0, 1)))


def test_the_reads_of_an_apply_are_one_round_as_long_as_nova_s_listing() -> None:
    nova = "/compute/v2.1"
    reads = [
        ApiCall("kubernetes", "GET", "/api/v1/namespaces/default/configmaps/state", 200),
        ApiCall("kubernetes", "GET", "/api/v1/namespaces/default/configmaps", 200),
        ApiCall("nova", "GET", f"{nova}/limits", 200),
        ApiCall("nova", "GET", f"{nova}/servers/detail", 200, "name=a"),
    ]
    assert request_rounds(reads) == 1
    # A second page of the listing needs the first: two rounds, the other reads beside the first.
    assert request_rounds([*reads, ApiCall("nova", "GET", f"{nova}/servers/detail", 200, "marker=x")]) == 2
    # A token, a departed server looked up and the claims stored before the metadata writes are rounds
    # of their own; the Kubernetes writes after the metadata writes (the claims dropped, the state) are
    # one round together; the metadata writes (counted by phase), the Lease, a watch and the event
    # emitter's requests are not counted here.
    claims = "/api/v1/namespaces/default/configmaps/claims"
    others = [
        ApiCall("keystone", "POST", "/identity/v3/auth/tokens", 201),
        ApiCall("nova", "GET", f"{nova}/servers/s-1", 200),
        ApiCall("kubernetes", "PUT", claims, 200),
        ApiCall("nova", "POST", f"{nova}/servers/s-2/metadata", 200),
        ApiCall("kubernetes", "PUT", claims, 200),
        ApiCall("kubernetes", "PUT", "/api/v1/namespaces/default/configmaps/state", 200),
        ApiCall("kubernetes", "PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/w", 200),
        ApiCall("kubernetes", "GET", "/api/v1/nodes", 200, "watch=true"),
        ApiCall("kubernetes", "GET", "/apis/networking.k8s.io/v1/namespaces/web/ingresses/app", 200),
        ApiCall("kubernetes", "POST", "/apis/events.k8s.io/v1/namespaces/web/events", 201),
    ]
    assert request_rounds([*reads, *others]) == 1 + 3 + 1
    assert request_rounds([]) == 0


def test_phase_rounds_count_a_servers_deletes_after_its_post() -> None:
    # 30 POSTs, 4 at a time: 8 rounds.
    assert phase_rounds([ServerWrites(1, 0)] * 30, 4) == 8
    # One POST, then its 30 DELETEs 4 at a time: 1 + 8 rounds.
    assert phase_rounds([ServerWrites(1, 30)], 4) == 9
    # DELETEs with no POST before them start at once.
    assert phase_rounds([ServerWrites(0, 30)], 4) == 8
    # Four POSTs in the first round release twelve DELETEs: 1 + 3 rounds.
    assert phase_rounds([ServerWrites(1, 3)] * 4, 4) == 4
    # A lone POST leaves three slots of its round for independent DELETEs.
    assert phase_rounds([ServerWrites(1, 4), ServerWrites(0, 3)], 4) == 2
    # One at a time: one round per request.
    assert phase_rounds([ServerWrites(1, 3), ServerWrites(0, 2)], 1) == 6
