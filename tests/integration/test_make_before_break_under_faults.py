"""Make before break, and nothing foreign lost, under random upstream faults (docs/architecture.md,
invariants 3 and 4), over many seeded scenarios.

Each seed builds a scenario from its own random generator: which nodes are ingress nodes before and
after, which names external-dns wants before and after, a hand-set alias without a claim and a frozen
per-interface value on the nodes. The cluster is converged to the "before" state; then external-dns'
loop (landb_simulator.external_dns) runs against the real provider while a seeded fraction of Nova's
metadata writes and server searches fail (5xx, 409, connection resets, replies lost after the write
landed). The faults are lifted and the loop runs until it changes nothing.

The simulator's recorded metadata history must then show, at every single write: every alias carried
before and after with at least one carrier; every key other than ``landb-alias*`` unchanged; the
hand-set alias and the frozen value untouched. And the end state must be exactly what is wanted, with
one TXT claim per wanted name, and a further loop writing nothing.

Bounded: SEEDS scenarios, a few loops each, backoff sleeps virtual (support.fake_time).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import plan
from landb_simulator.state import FaultHandle, SimulatorState
from landb_webhook.backends import UpstreamError
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.metadata import is_alias_key
from landb_webhook.provider import ApplyError
from support.fake_time import FakeTime
from support.history import assert_never_without_carrier, carriers
from support.landb_stack import OWNERSHIP_NAMESPACE, Stack, build_stack

SEEDS = int(os.environ.get("LANDB_FAULT_SEEDS", "50"))
FAULTY_LOOPS = 2
OWNER = "chaos"
NAMES = ("app", "web", "api", "docs", "grafana", "login", "status", "wiki")
HAND_SET = "legacy--load-7-"
FROZEN_KEY, FROZEN_VALUE = "landb-alias1", "eth0.cern.ch:frozen--load-5-;eth1.cern.ch:other"
METADATA_WRITE = r"/servers/[^/]+/metadata(/.*)?$"
SERVER_SEARCH = r"/servers/detail$"
CONFIGMAPS = r"/configmaps"


@dataclass
class Tally:
    """What the random faults did over all seeds, printed at the end (``pytest -s``) for the record."""

    seeds: int = 0
    fired: int = 0
    loops_503: int = 0
    seeds_checked: int = 0


@dataclass
class Fleet:
    sim: Simulator
    stack: Stack
    nodes: list[str]
    ids: dict[str, str]
    """node name -> server id"""
    foreign: dict[str, dict[str, str]]
    """server id -> the keys other than landb-alias* it started with"""
    tally: Tally

    @property
    def state(self) -> SimulatorState:
        return self.sim.state


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with Simulator() as sim:
        config: ClientConfig = sim.write_client_config(tmp_path_factory.mktemp("chaos-clients"))
        nodes = seed_cluster(sim.state, ingress_nodes=4, workers=1)
        ids = {server.name: server.id for server in sim.state.servers()}
        foreign = {server.id: dict(server.metadata) for server in sim.state.servers()}
        stack = build_stack(
            config,
            FakeTime(),
            write_concurrency=3,
            inventory_max_age=30,
            max_removal_share=1.0,  # random scenarios may remove most aliases on purpose
        )
        tally = Tally()
        try:
            yield Fleet(sim, stack, nodes, ids, foreign, tally)
        finally:
            stack.close()
            print(
                f"\nrandom faults: {tally.seeds} seeds, {tally.fired} faults fired, "
                f"{tally.loops_503} loops answered 503 (seeds passing every check: {tally.seeds_checked})"
            )


def desired(labels: set[str]) -> list[Endpoint]:
    return [
        Endpoint(f"{label}.cern.ch", "A", ("192.0.2.10",), labels=(("resource", f"ingress/web/{label}"),))
        for label in sorted(labels)
    ]


def loop(fleet: Fleet, labels: set[str]) -> bool:
    """One external-dns loop; True when it had nothing to change. A 503 is an exception here."""
    provider = fleet.stack.provider
    current = provider.records()
    adjusted = provider.adjust_endpoints(desired(labels))
    changes = plan(current, adjusted, owner=OWNER).changes
    if changes == Changes():
        return True
    provider.apply_changes(changes)
    return False


def converge(fleet: Fleet, labels: set[str]) -> None:
    for _ in range(4):
        if loop(fleet, labels):
            return
    pytest.fail("no convergence within four loops without faults")


def set_ingress(fleet: Fleet, ingress: set[str]) -> None:
    for node in fleet.nodes:
        fleet.state.label_node(node, "role", "ingress" if node in ingress else None)
    deadline = time.monotonic() + 10
    while {n.name for n in fleet.stack.nodes.nodes() if n.is_ingress} != ingress:
        if time.monotonic() > deadline:
            pytest.fail("the node cache did not see the new ingress set")
        time.sleep(0.005)


def inject_random_faults(state: SimulatorState, rng: random.Random) -> tuple[list[str], list[FaultHandle]]:
    """A few fault kinds, each firing on a seeded fraction of the matching Nova calls."""
    kinds: dict[str, dict[str, Any]] = {
        "503": {"status": 503},
        "500": {"status": 500},
        "409": {"status": 409},
        "429 Retry-After": {"status": 429, "headers": {"Retry-After": "1"}},
        "reset": {"reset": True},
        "reply lost after the write": {"reset": True, "after_processing": True},
        "502 after the write": {"status": 502, "after_processing": True},
    }
    chosen = rng.sample(sorted(kinds), k=rng.randint(2, 4))
    handles: list[FaultHandle] = []
    for name in chosen:
        handle = state.inject_fault(
            api="nova",
            path_pattern=METADATA_WRITE,
            times=None,
            probability=rng.uniform(0.1, 0.35),
            seed=rng.getrandbits(32),
            **kinds[name],
        )
        handles.append(handle)
    search = state.inject_fault(
        api="nova",
        path_pattern=SERVER_SEARCH,
        status=503,
        times=None,
        probability=0.1,
        seed=rng.getrandbits(32),
    )
    return chosen, [*handles, search]


def reset_fleet(fleet: Fleet, rng: random.Random) -> tuple[str, str]:
    """Foreign keys as seeded, no alias of ours, no claim; a hand-set alias and a frozen value on two
    random nodes. Returns (hand-set node, frozen node)."""
    state = fleet.state
    state.clear_faults()
    hand_set_node, frozen_node = rng.sample(fleet.nodes, 2)
    for node in fleet.nodes:
        metadata = dict(fleet.foreign[fleet.ids[node]])
        if node == hand_set_node:
            metadata["landb-alias"] = HAND_SET
        if node == frozen_node:
            metadata[FROZEN_KEY] = FROZEN_VALUE
        state.set_metadata_direct(fleet.ids[node], metadata)
    ownership = fleet.stack.ownership
    ownership.apply([], ownership.records())
    return hand_set_node, frozen_node


@pytest.mark.parametrize("seed", range(SEEDS))
def test_no_alias_loses_its_last_carrier_and_nothing_foreign_changes_under_random_faults(
    fleet: Fleet, seed: int
) -> None:
    rng = random.Random(seed)
    state = fleet.state
    hand_set_node, frozen_node = reset_fleet(fleet, rng)
    ingress_before = set(rng.sample(fleet.nodes, rng.randint(1, 4)))
    ingress_after = set(rng.sample(fleet.nodes, rng.randint(1, 4)))
    wanted_before = set(rng.sample(NAMES, rng.randint(1, 5)))
    wanted_after = set(rng.sample(NAMES, rng.randint(1, 5)))

    set_ingress(fleet, ingress_before)
    converge(fleet, wanted_before)
    servers = list(fleet.ids.values())
    before = carriers({s: state.metadata(s) for s in servers})
    first_change = len(state.metadata_history())

    faults, handles = inject_random_faults(state, rng)
    set_ingress(fleet, ingress_after)
    outcomes = []
    for _ in range(FAULTY_LOOPS):
        try:
            outcomes.append("settled" if loop(fleet, wanted_after) else "applied")
        except (ApplyError, UpstreamError) as error:  # the webhook's 503
            outcomes.append(f"503 {type(error).__name__}")
    fleet.tally.fired += sum(handle.hits for handle in handles)
    fleet.tally.loops_503 += sum(outcome.startswith("503") for outcome in outcomes)
    fleet.tally.seeds += 1
    state.clear_faults()
    converge(fleet, wanted_after)

    context = f"seed {seed}: faults {faults}, loops {outcomes}"
    current = {s: state.metadata(s) for s in servers}
    after = carriers(current)
    history = state.metadata_history()[first_change:]
    assert_never_without_carrier(
        _metadata_before(state, first_change, servers), history, before.keys() & after.keys(), context
    )
    for change in history:
        metadata = change.metadata
        assert {k: v for k, v in metadata.items() if not is_alias_key(k)} == fleet.foreign[
            change.server_id
        ], f"{context}: a foreign key changed at change {change.seq}"
        if change.server_id == fleet.ids[hand_set_node]:
            assert HAND_SET in metadata.get("landb-alias", "").split(","), f"{context}: hand-set alias lost"
        if change.server_id == fleet.ids[frozen_node]:
            assert metadata.get(FROZEN_KEY) == FROZEN_VALUE, f"{context}: frozen value changed"

    ingress_ids = {fleet.ids[node] for node in ingress_after}
    ours = {label: ids for label, ids in after.items() if label not in ("legacy", "frozen")}
    assert ours == dict.fromkeys(wanted_after, ingress_ids), context
    claims = {e.dns_name for e in fleet.stack.provider.records() if e.record_type == "TXT"}
    assert claims == {f"a-{label}.cern.ch" for label in wanted_after}, context
    writes_before = len(state.metadata_history())
    assert loop(fleet, wanted_after), f"{context}: a converged loop still had changes"
    assert len(state.metadata_history()) == writes_before, f"{context}: a converged loop wrote"
    fleet.tally.seeds_checked += 1


def _metadata_before(
    state: SimulatorState, first_change: int, servers: list[str]
) -> dict[str, dict[str, str]]:
    """Each server's metadata as it was just before history entry ``first_change``."""
    found: dict[str, dict[str, str]] = {}
    for change in state.metadata_history()[:first_change]:
        found[change.server_id] = change.metadata
    return {server: found.get(server, {}) for server in servers}


def test_a_removal_that_landed_though_reported_failed_leaves_no_claim_behind(fleet: Fleet) -> None:
    """Every metadata write lands but loses its reply, and so does every retry: the apply
    reports the removal failed and keeps its claim. Records, seeing no carrier, no longer reports it
    and writes nothing (a read never writes); the next apply drops it after its break writes:
    external-dns would never delete it, and it would make a hand-set alias of that name look ours."""
    state = fleet.state
    reset_fleet(fleet, random.Random(0))
    set_ingress(fleet, set(fleet.nodes[:3]))
    converge(fleet, {"app", "web"})
    state.inject_fault(api="nova", path_pattern=METADATA_WRITE, reset=True, after_processing=True, times=None)
    with pytest.raises(ApplyError):
        loop(fleet, {"app"})
    state.clear_faults()
    assert "web" not in carriers({s: state.metadata(s) for s in fleet.ids.values()})
    assert "a-web.cern.ch" in stored_claims(fleet)

    state.reset_api_calls()
    for _ in range(3):
        records = fleet.stack.provider.records()
        assert {e.dns_name for e in records if e.record_type == "TXT"} == {"a-app.cern.ch"}
        assert loop(fleet, {"app"}), "nothing is left to change: external-dns sends no apply"
    assert [c for c in state.api_calls("kubernetes") if c.method not in ("GET", "HEAD")] == []
    assert "a-web.cern.ch" in stored_claims(fleet)

    assert not loop(fleet, {"app", "api"})  # the next apply, whatever it changes
    assert stored_claims(fleet) == {"a-app.cern.ch", "a-api.cern.ch"}
    assert loop(fleet, {"app", "api"})


def stored_claims(fleet: Fleet) -> set[str]:
    """The claims in the ConfigMap as the API server has it (not the provider's cache)."""
    stored = fleet.state.configmap(OWNERSHIP_NAMESPACE, fleet.stack.settings.ownership_configmap) or {}
    return {json.loads(value)["dnsName"] for value in (stored.get("data") or {}).values()}
