"""Properties of the load balancer tags (landb/loadbalancers.py): the tag form, what a write keeps, and
the apply ordering of tag writes (make before break), and the cases of its docstring, row by row."""

from __future__ import annotations

from collections.abc import Mapping, Set

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.landb import loadbalancers
from landb_webhook.landb.loadbalancers import (
    TagPlan,
    TagWrite,
    alias_tag,
    plan_tags,
    tag_label,
    tag_labels,
    tags_after,
)
from landb_webhook.landb.names import InvalidName
from support.rule_tables import table_rows

labels = st.sampled_from(["app", "web", "api", "x1", "a-b"])
lb_ids = st.sampled_from(["lb-1", "lb-2", "lb-3"])
foreign_tags = st.sampled_from(
    [
        "kube_service_cluster_default_web",
        "landb-alias=App",  # not the form we write: someone else's
        "landb-alias=a.b",
        "landb-alias=",
        "landb-alias=x--load-1-",
        "LANDB-ALIAS=app",
        "landb-alias =app",
        "owner=me",
    ]
)
tag_lists = st.lists(st.one_of(labels.map(alias_tag), foreign_tags), max_size=8)


def test_a_tag_names_one_alias_in_the_form_lanDB_reads() -> None:
    assert alias_tag("myapp") == "landb-alias=myapp"
    assert tag_label("landb-alias=myapp") == "myapp"


@pytest.mark.parametrize("tag", ["landb-alias=App", "landb-alias=a.b", "landb-alias=", "other=app", "app"])
def test_a_tag_in_another_form_is_not_ours(tag: str) -> None:
    assert tag_label(tag) is None


def test_an_invalid_alias_never_becomes_a_tag() -> None:
    with pytest.raises(InvalidName):
        alias_tag("a.b")


@given(tag_lists, st.sets(labels), st.sets(labels))
def test_a_write_keeps_every_other_tag_and_changes_exactly_ours(
    tags: list[str], add: set[str], remove: set[str]
) -> None:
    remove -= add
    after = tags_after(tags, add, remove)

    assert len(after) == len(set(after))
    ours = {alias_tag(label) for label in add | remove}
    assert [t for t in after if t not in ours] == [t for t in dict.fromkeys(tags) if t not in ours]
    assert tag_labels(after) == (tag_labels(tags) - remove) | add


def _apply(carried: Mapping[str, Set[str]], writes: tuple[TagWrite, ...]) -> dict[str, set[str]]:
    after = {lb_id: set(labels) for lb_id, labels in carried.items()}
    for write in writes:
        held = after.setdefault(write.load_balancer_id, set())
        held |= set(write.add)
        held -= set(write.remove)
    return after


def _carriers(carried: Mapping[str, Set[str]], label: str) -> set[str]:
    return {lb_id for lb_id, labels in carried.items() if label in labels}


carried_maps = st.dictionaries(lb_ids, st.frozensets(labels), max_size=3)
wanted_maps = st.dictionaries(labels, st.frozensets(lb_ids, max_size=2), max_size=4)


@given(carried_maps, wanted_maps, st.sets(labels))
def test_the_plan_reaches_what_is_wanted_and_leaves_other_names_alone(
    carried: dict[str, frozenset[str]], wanted: dict[str, frozenset[str]], leaving: set[str]
) -> None:
    leaving = {label for label in leaving if not wanted.get(label)}
    plan = plan_tags(carried, wanted, leaving=leaving)
    after = _apply(carried, (*plan.make_writes, *plan.break_writes))

    for label in {label for held in carried.values() for label in held} | wanted.keys():
        expected = set(wanted[label]) if label in wanted else _carriers(carried, label)
        assert _carriers(after, label) == expected


@given(carried_maps, wanted_maps, st.sets(labels))
def test_a_name_with_a_home_after_keeps_every_home_until_the_break_phase(
    carried: dict[str, frozenset[str]], wanted: dict[str, frozenset[str]], leaving: set[str]
) -> None:
    """Make before break: the make phase removes only names leaving DNS altogether."""
    leaving = {label for label in leaving if not wanted.get(label)}
    plan = plan_tags(carried, wanted, leaving=leaving)
    after_make = _apply(carried, plan.make_writes)

    for label in {label for held in carried.values() for label in held} - leaving:
        assert _carriers(after_make, label) >= _carriers(carried, label)
    assert all(not write.add for write in plan.break_writes)


@given(carried_maps, wanted_maps, st.sets(labels))
def test_each_load_balancer_is_written_at_most_once_per_phase_and_only_when_it_changes(
    carried: dict[str, frozenset[str]], wanted: dict[str, frozenset[str]], leaving: set[str]
) -> None:
    leaving = {label for label in leaving if not wanted.get(label)}
    plan = plan_tags(carried, wanted, leaving=leaving)

    for phase in (plan.make_writes, plan.break_writes):
        assert len({w.load_balancer_id for w in phase}) == len(phase)
        for write in phase:
            held = carried.get(write.load_balancer_id, frozenset())
            assert write.add or write.remove
            assert not set(write.add) & held
            assert set(write.remove) <= held
    settled = _apply(carried, (*plan.make_writes, *plan.break_writes))
    assert plan_tags(settled, wanted, leaving=leaving) == TagPlan()


def test_a_name_leaving_dns_rides_along_with_that_load_balancers_make_write() -> None:
    """One PENDING_UPDATE round instead of two, and nothing to wait for: it needs no replacement."""
    plan = plan_tags(
        {"lb-1": frozenset({"old", "moving"})},
        {"new": frozenset({"lb-1"}), "old": frozenset(), "moving": frozenset()},
        leaving={"old"},
    )

    assert plan == TagPlan(
        make_writes=(TagWrite("lb-1", add=("new",), remove=("old",)),),
        break_writes=(TagWrite("lb-1", remove=("moving",)),),
    )


def test_a_name_moving_between_load_balancers_is_added_before_it_is_removed() -> None:
    plan = plan_tags({"lb-1": frozenset({"app"})}, {"app": frozenset({"lb-2"})}, leaving=set())

    assert plan == TagPlan(
        make_writes=(TagWrite("lb-2", add=("app",)),), break_writes=(TagWrite("lb-1", remove=("app",)),)
    )


# -- the cases of the rule's docstring: one entry per row of its table, the row's case as its id ----------
# The make and break cells are lb-1's writes in the table's words; the last row is about the other tags.

# fmt: off
WRITES = [  # lb-1 and lb-2's aliases now, wanted, leaving -> lb-1's make write, its break write
    pytest.param({"lb-1": set()}, {"app": {"lb-1"}}, set(), "add", "-",
                 id="gains a name"),
    pytest.param({"lb-1": {"app"}}, {"app": {"lb-2"}}, set(), "-", "remove",
                 id="loses a name that moves elsewhere"),
    pytest.param({"lb-1": {"old"}}, {"new": {"lb-1"}, "old": set()}, {"old"}, "add + remove", "-",
                 id="loses a name leaving DNS, gains another"),
    pytest.param({"lb-1": {"old"}}, {"old": set()}, {"old"}, "-", "remove",
                 id="loses a name leaving DNS, gains nothing"),
]
KEPT = [  # the same, lb-1 also holding tags we do not own or do not write -> them after each write
    pytest.param({"lb-1": {"app"}}, {"web": {"lb-1"}, "app": {"lb-2"}}, set(), "kept", "kept",
                 id="carries a tag we do not own or do not write"),
]
# fmt: on
FOREIGN = ("owner=me", "landb-alias=App")


def test_each_row_of_the_rules_docstring_is_a_case_below_in_its_order() -> None:
    rows = table_rows(loadbalancers.__doc__, starts_row="the load balancer ...")
    assert [(case.id, *case.values[3:]) for case in (*WRITES, *KEPT)] == [
        (row["the load balancer ..."], row["make write"], row["break write"]) for row in rows
    ]


def _in_the_tables_words(writes: tuple[TagWrite, ...]) -> str:
    """lb-1's write in one phase: ``add``, ``remove``, ``add + remove``, or ``-`` for none."""
    mine = [write for write in writes if write.load_balancer_id == "lb-1"]
    if not mine:
        return "-"
    (write,) = mine
    return " + ".join(word for word, done in (("add", write.add), ("remove", write.remove)) if done)


@pytest.mark.parametrize(("carried", "wanted", "leaving", "make", "brk"), WRITES)
def test_the_writes_of_the_rules_docstring(
    carried: dict[str, set[str]], wanted: dict[str, set[str]], leaving: set[str], make: str, brk: str
) -> None:
    plan = plan_tags(carried, wanted, leaving=leaving)
    assert (_in_the_tables_words(plan.make_writes), _in_the_tables_words(plan.break_writes)) == (make, brk)


@pytest.mark.parametrize(("carried", "wanted", "leaving", "make", "brk"), KEPT)
def test_the_other_tags_of_the_rules_docstring(
    carried: dict[str, set[str]], wanted: dict[str, set[str]], leaving: set[str], make: str, brk: str
) -> None:
    plan = plan_tags(carried, wanted, leaving=leaving)
    tags = [*FOREIGN, *(alias_tag(label) for label in sorted(carried["lb-1"]))]
    after = []
    for phase in (plan.make_writes, plan.break_writes):
        (write,) = (write for write in phase if write.load_balancer_id == "lb-1")
        tags = tags_after(tags, write.add, write.remove)
        after.append("kept" if set(FOREIGN) <= set(tags) else "dropped")
    assert after == [make, brk]
