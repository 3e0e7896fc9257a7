"""Properties of the load balancer tags (landb/loadbalancers.py): the tag form, what a write keeps, and
the apply ordering of tag writes (make before break)."""

from __future__ import annotations

from collections.abc import Mapping, Set

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
