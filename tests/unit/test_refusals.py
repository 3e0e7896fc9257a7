"""A refusal is one value: what an apply refused is one list, and step 9 derives from it, in one place, the
metric, the log, the events and the 503's text (provider/refusals.py, its table ``KINDS``)."""

from __future__ import annotations

from collections.abc import Iterable

from structlog.testing import capture_logs

from landb_webhook.config import Settings
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.plan import Refusal, ServerState
from landb_webhook.landb.propagation import Transition
from landb_webhook.metrics import Metrics
from landb_webhook.provider.context import Context
from landb_webhook.provider.refusals import Refusals
from landb_webhook.provider.watch.events import NameChange
from landb_webhook.wiring import provider_options


class ToldEvents:
    """The NameEvents port, keeping what it was told."""

    def __init__(self) -> None:
        self.told: list[NameChange] = []

    def learn(self, endpoints: Iterable[Endpoint]) -> None:
        pass

    def tell(self, change: NameChange, endpoints: Iterable[Endpoint] = ()) -> None:
        self.told.append(change)

    def tell_dns(self, change: Transition) -> None:
        pass


def context() -> tuple[Context, ToldEvents]:
    events = ToldEvents()
    options = provider_options(Settings())
    return Context(options, Metrics.create(process_metrics=False), events=events), events


def refused(context: Context, reason: str) -> float:
    value = context.metrics.registry.get_sample_value(
        "landb_webhook_refused_changes_total", {"reason": reason}
    )
    return value or 0.0


NODE = ServerState("id-a", "vm-a", "node-a", {})


def test_each_refusal_is_counted_once_by_its_kind_and_a_verdict_on_many_names_once() -> None:
    ctx, _ = context()
    refusals = Refusals()
    refusals.refuse("a", "not_owned", "no ownership record")
    refusals.refuse("b", "not_owned", "no ownership record")
    refusals.refuse("a-claim.cern.ch", "claim_alone", "ownership record not stored without its alias")
    for label in ("c", "d", "e"):
        refusals.refuse(label, "removal_guard", "removal guard: namespace team-b: ...")
    refusals.refuse("f", "write_failed", "a metadata write for it failed")

    refusals.settle(ctx)

    assert refused(ctx, "not_owned") == 3  # two names and a claim alone
    assert refused(ctx, "removal_guard") == 1  # one namespace held back
    assert (
        ctx.metrics.registry.get_sample_value(
            "landb_webhook_removals_held_back_total", {"reason": "removal_guard"}
        )
        == 3
    )
    counted = sum(
        sample.value
        for metric in ctx.metrics.registry.collect()
        if metric.name == "landb_webhook_refused_changes"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )
    assert counted == 4  # the write failure is no refusal of ours: not counted


def test_the_plans_refusals_count_per_node_and_are_said_once_per_alias() -> None:
    ctx, _ = context()
    refusals = Refusals()
    other = ServerState("id-b", "vm-b", "node-b", {})
    refusals.planned(
        [
            Refusal("app", "capacity", "metadata quota reached", NODE),
            Refusal("app", "capacity", "metadata quota reached", other),
            Refusal("old", "frozen", "held in a key or form we never edit", NODE),
        ]
    )

    with capture_logs() as logs:
        answer = refusals.settle(ctx)

    assert refused(ctx, "plan") == 2 and refused(ctx, "frozen") == 1
    assert [e["alias"] for e in logs if e["event"] == "change refused"] == ["app"]
    assert answer == ["app on node-a, node-b: metadata quota reached"]  # the frozen one is never retried


def test_one_event_per_name_with_the_first_reason_and_none_for_what_the_owner_cannot_see() -> None:
    ctx, events = context()
    refusals = Refusals()
    refusals.refuse("app", "namespace_cap", "namespace team-a publishes 20 names, its cap")
    refusals.refuse("app", "write_failed", "a metadata write for it failed")
    refusals.refuse("app-claim.cern.ch", "claim_alone", "ownership record not stored without its alias")
    refusals.refuse("www", "dns_elsewhere", "DNS already answers it for another device (192.0.2.9)")

    refusals.settle(ctx)

    assert [(e.name, e.what, e.kind, e.detail) for e in events.told] == [
        ("app.cern.ch", "refused", "namespace_cap", "namespace team-a publishes 20 names, its cap"),
        ("www.cern.ch", "refused", "dns_elsewhere", "DNS already answers it for another device (192.0.2.9)"),
    ]


def test_the_answer_has_one_line_per_reason_naming_every_name_and_leaves_out_what_is_no_failure() -> None:
    ctx, _ = context()
    refusals = Refusals()
    guard = "removal guard: namespace team-b: the apply would remove 30 of 30 aliases published"
    for i in range(30):
        refusals.refuse(f"b{i:02}", "removal_guard", guard)
    refusals.refuse("legacy", "not_owned", "no ownership record")
    refusals.refuse("www", "dns_elsewhere", "DNS already answers it for another device (192.0.2.9)")
    refusals.refuse("app", "write_failed", "a metadata write for it failed")

    answer = refusals.settle(ctx)

    first_ten = ", ".join(f"b{i:02}" for i in range(10))
    assert answer == [f"{first_ten} and 20 more: {guard}", "legacy: no ownership record"]


def test_what_a_stage_says_is_logged_as_it_said_it_and_once_when_it_asks() -> None:
    ctx, _ = context()
    with capture_logs() as logs:
        for _ in range(2):
            refusals = Refusals()
            refusals.refuse("www", "dns_elsewhere", "DNS already answers it")
            refusals.say("change refused: DNS already answers www", once=("www", "dns"), dns="192.0.2.9")
            refusals.say("no node matches the ingress selector", level="error", nodes_seen=0)
            refusals.settle(ctx)

    said = [(e["event"], e["log_level"]) for e in logs]
    assert said.count(("change refused: DNS already answers www", "warning")) == 1
    assert said.count(("no node matches the ingress selector", "error")) == 2
