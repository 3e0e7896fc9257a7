"""The estimate behind Records' warning that the request body limit is too small for the cluster: it is
never below the body external-dns sends when a node joins, and not far above it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.provider.records.view import apply_body_estimate
from landb_webhook.webhook import wire

LABELS = (("owner", "default"), ("resource", "ingress/some-namespace/some-ingress-name"))


def claim(name: str) -> Endpoint:
    """The TXT record the txt registry sends beside each update."""
    return Endpoint(
        f"a-{name}",
        "TXT",
        ('"heritage=external-dns,external-dns/owner=default,external-dns/resource=ingress/ns/web"',),
        labels=LABELS,
    )


@given(st.integers(1, 40), st.integers(1, 60), st.sampled_from(["10.0.{}.{}", "137.138.{}.{}"]))
def test_the_estimate_covers_the_body_of_a_node_joining(names: int, nodes: int, form: str) -> None:
    addresses = [form.format(i // 250, i % 250) for i in range(nodes)]
    joined = [*addresses, form.format(254, 254)]
    dns_names = [f"app{i:03d}.cern.ch" for i in range(names)]
    body = wire.encode_changes(
        Changes(
            update_old=(
                *(Endpoint(n, "A", tuple(addresses), labels=LABELS) for n in dns_names),
                *(claim(n) for n in dns_names),
            ),
            update_new=(
                *(Endpoint(n, "A", tuple(joined), labels=LABELS) for n in dns_names),
                *(claim(n) for n in dns_names),
            ),
        )
    )

    assert len(body) <= apply_body_estimate(names, addresses)


def node_join_body(names: int, nodes: int) -> bytes:
    addresses = [f"137.138.{i // 250}.{i % 250}" for i in range(nodes + 1)]
    dns_names = [f"app{i:03d}.cern.ch" for i in range(names)]
    return wire.encode_changes(
        Changes(
            update_old=tuple(Endpoint(n, "A", tuple(addresses[:-1]), labels=LABELS) for n in dns_names),
            update_new=tuple(Endpoint(n, "A", tuple(addresses), labels=LABELS) for n in dns_names),
        )
    )


def test_at_150_nodes_x_300_names_a_node_joining_is_over_the_default_limit_and_the_estimate_close() -> None:
    body = node_join_body(300, 150)
    addresses = [f"137.138.{i // 250}.{i % 250}" for i in range(150)]

    assert len(body) > 2**20
    assert len(body) <= apply_body_estimate(300, addresses) <= 1.25 * len(body)
