"""How ``status`` and ``adopt`` print what they found: a table for people, JSON for scripts.

Only layout lives here; what counts as a problem is decided in ``provider/status/problems.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from landb_webhook.landb.propagation import State, answered, duration
from landb_webhook.provider.ownership.adopt import AdoptionPlan, Decision
from landb_webhook.provider.status.values import ClusterStatus, Holding, NameStatus
from landb_webhook.provider.watch.dns_watch import DnsCheck

NONE = "none"


@dataclass(frozen=True)
class ReadFrom:
    """What a command read and writes, so an operator can tell it looked where the webhook looks."""

    ingress_selector: str
    registry: str
    namespace: str
    namespace_source: str
    configmap: str
    writer_lease: str
    """``<namespace>/<name>: <holder>``, or why it is not known."""
    load_balancers: str = "on"
    """``on``, ``off (...)``, or ``none: ...`` when the cloud has no load-balancer service."""

    def lines(self) -> list[str]:
        return [
            f"Ingress selector: {self.ingress_selector}   Registry: {self.registry}",
            f"Claims: ConfigMap {self.namespace}/{self.configmap} (namespace from {self.namespace_source})",
            f"Writer lease: {self.writer_lease}",
            f"Load balancers: {self.load_balancers}",
        ]


def status_json(status: ClusterStatus, read_from: ReadFrom, dns: DnsCheck | None = None) -> str:
    """Every field of the status; ``needs_human`` lists what makes ``status`` exit non-zero."""
    document: dict[str, Any] = {
        "read_from": asdict(read_from),
        "names": [
            {
                "name": name.dns_name,
                "label": name.label,
                "claimed": name.claimed,
                "owners": list(name.owners),
                "resources": list(name.resources),
                "carriers": [_holding_json(h) for h in name.holdings],
                "plain_alias_nodes": list(name.plain_nodes),
                "problems": list(name.problems),
                **({"dns": _dns_json(dns, name.dns_name)} if dns is not None else {}),
            }
            for name in status.names
        ],
        "nodes": [
            {
                "name": node.name,
                "ingress": node.ingress,
                "ready": node.ready,
                "deleting": node.deleting,
                "unschedulable": node.unschedulable,
                "problems": list(node.problems),
                "internal_ips": list(node.internal_ips),
                "server_id": node.server_id,
                "server_name": node.server_name,
            }
            for node in status.nodes
        ],
        "metadata_key_quota": status.quota,
        "servers_over_key_quota": [
            {
                "node": use.node,
                "server_id": use.server_id,
                "server_name": use.server_name,
                "keys": use.keys,
                "quota": use.quota,
            }
            for use in status.servers_near_quota
        ],
        "nodes_without_server": list(status.nodes_without_server),
        "aliases_on_non_ingress_nodes": [
            {"name": _dns_name(status, h), **_holding_json(h)} for h in status.non_ingress_holdings
        ],
        "duplicate_indices": [
            {"name": _name_of(status, d.label), "index": d.index, "nodes": list(d.nodes)}
            for d in status.duplicate_indices
        ],
        "frozen_forms": [
            {"node": f.node, "server_id": f.server_id, "key": f.key, "value": f.value}
            for f in status.frozen_forms
        ],
        "load_balancers": [
            {
                **asdict(lb),
                **({"dns": {name: _dns_json(dns, name) for name in lb.names}} if dns is not None else {}),
            }
            for lb in status.load_balancers
        ],
        "departed_servers": [
            {"node": d.node, "server_id": d.server_id, "server_name": d.server_name, "tokens": list(d.tokens)}
            for d in status.departed_servers
        ],
        "refused_by_dns": [
            {"name": refusal.name, "dns": refusal.answer, "at": refusal.at}
            for refusal in status.refused_by_dns
        ],
        "needs_human": status.attention(),
    }
    if dns is not None:
        document["dns"] = {"resolvers": dns.resolvers, "skipped": dns.skipped, "at": dns.now}
    return json.dumps(document, indent=2)


def status_table(status: ClusterStatus, read_from: ReadFrom, dns: DnsCheck | None = None) -> str:
    ingress = sum(1 for node in status.nodes if node.ingress)
    asked = dns if dns is not None and dns.skipped is None else None
    dns_header = ("DNS", "WRITTEN") if asked is not None else ()
    lines = [
        *read_from.lines(),
        *([_dns_line(dns)] if dns is not None else []),
        "",
        *_columns(
            ("NAME", *dns_header, "CLAIM", "INGRESS", "CARRIERS"),
            [
                (
                    name.dns_name,
                    *(_dns_cells(asked, name.dns_name) if asked is not None else ()),
                    _claim_text(name.claimed, name.owners),
                    ", ".join(name.resources) or "-",
                    _name_carriers_text(name),
                )
                for name in status.names
            ],
        ),
        "",
        f"NODES: {len(status.nodes)}, {ingress} matching the ingress selector",
        *_columns(
            ("NODE", "ROLE", "HEALTH", "IPS", "SERVER"),
            [
                (
                    node.name,
                    "ingress" if node.ingress else "-",
                    node.health,
                    ",".join(node.internal_ips) or "-",
                    node.server_name or "(no server)",
                )
                for node in status.nodes
            ],
        ),
        "",
        *_section(
            f"Servers over 80% of their key quota ({status.quota if status.quota is not None else '?'} keys)",
            [f"{u.server_name} (node {u.node}): {u.keys} keys" for u in status.servers_near_quota],
        ),
        *_section("Nodes without a server", status.nodes_without_server),
        *_section(
            "Aliases on non-ingress nodes",
            [
                f"{_dns_name(status, h)} on {h.node}: N={h.index} in {h.key}"
                for h in status.non_ingress_holdings
            ],
        ),
        *_section(
            "Duplicate Ns",
            [
                f"{_name_of(status, d.label)} N={d.index} on {', '.join(d.nodes)}"
                for d in status.duplicate_indices
            ],
        ),
        *_section(
            "Frozen forms (read, never rewritten)",
            [f"{f.node} {f.key} = {f.value}" for f in status.frozen_forms],
        ),
        *_section(
            "Load balancers carrying names (landb-alias= tags)",
            [
                f"{lb.name or '(no name)'} ({lb.id}) {','.join(lb.addresses)}: "
                + ", ".join(_with_dns_state(asked, name) for name in lb.names)
                + (f" (unclaimed: {', '.join(lb.unclaimed)})" if lb.unclaimed else "")
                for lb in status.load_balancers
            ],
        ),
        *_section(
            "Names refused before their first write: DNS answers them elsewhere",
            [
                f"{refusal.name}: DNS answers {refusal.answer}, refused {_when(refusal.at, dns)}"
                for refusal in status.refused_by_dns
            ],
        ),
        *_section(
            "Servers of nodes that left the cluster (the next apply moves their aliases and cleans them)",
            [
                f"{d.server_name} (was node {d.node}): {', '.join(d.tokens) or NONE}"
                for d in status.departed_servers
            ],
        ),
    ]
    attention = status.attention()
    if attention:
        lines += [f"Needs a human ({len(attention)}):", *(f"  - {item}" for item in attention)]
    else:
        lines.append("Nothing needs a human.")
    return "\n".join(lines + _next_steps(status, attention))


def _next_steps(status: ClusterStatus, attention: Sequence[str]) -> list[str]:
    unclaimed = [name.label for name in status.names if not name.claimed and name.holdings]
    steps = []
    if unclaimed:
        steps.append(
            f"{len(unclaimed)} name(s) without a claim, which external-dns leaves alone; to hand them over: "
            f"landb-webhook adopt --owner-id <external-dns --txt-owner-id> --names {','.join(unclaimed)} "
            "--dry-run (then again without --dry-run)"
        )
    if status.refused_by_dns:
        steps.append(
            f"{len(status.refused_by_dns)} name(s) refused because another device holds them in LanDB: their "
            "owners pick other names, or, to move them to this cluster on purpose, list them in "
            "LANDB_TAKEOVER_NAMES (docs/operations.md, cluster replacement)"
        )
    if attention:
        steps.append("fix what needs a human, then run status again: it exits 0 when nothing does")
    return ["", "Next:", *(f"  - {step}" for step in steps)] if steps else []


def adoption_text(
    plan: AdoptionPlan, read_from: ReadFrom, *, dry_run: bool, stored: int | None = None
) -> str:
    header = f"Adopting existing aliases for owner id {plan.owner_id}"
    header += " (dry run: nothing is written)" if dry_run else ""
    lines = [header, *read_from.lines()[:2], ""]
    lines += _columns(
        ("", "NAME", "CLAIM", "CARRIERS", ""),
        [("claim", d.dns_name, _claim_name(d), _carriers_text(d.holdings), d.reason) for d in plan.claims]
        + [("leave", d.dns_name, "-", _carriers_text(d.holdings), d.reason) for d in plan.left],
    )
    verb = "to claim" if dry_run else "claimed"
    count = len(plan.claims) if stored is None else stored
    lines.append(f"{count} {verb}, {len(plan.left)} left.")
    return "\n".join(lines)


# -- helpers -----------------------------------------------------------------------------------------


def _when(at: float, dns: DnsCheck | None) -> str:
    """``3 min ago`` when the time of the reading is known, else the UTC time."""
    if dns is not None:
        return f"{duration(dns.now - at)} ago"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _dns_line(dns: DnsCheck) -> str:
    if dns.skipped is not None:
        return f"DNS: not asked ({dns.skipped})"
    return f"DNS: asked {dns.resolvers}"


def _dns_cells(dns: DnsCheck, name: str) -> tuple[str, str]:
    """``published``, ``pending (no such name)``, ``conflict (CNAME x.cern.ch.)``; and how long ago the
    webhook wrote the name, when it knows."""
    judged = dns.judgements.get(name)
    state = "-"
    if judged is not None:
        state = str(judged.state)
        if judged.state not in (State.PUBLISHED, State.UNKNOWN):
            state += f" ({answered(judged.answer)})"
    published = dns.published.get(name)
    written = published.written_at if published is not None else None
    return state, "-" if written is None else f"{duration(dns.now - written)} ago"


def _with_dns_state(dns: DnsCheck | None, name: str) -> str:
    """``shop.cern.ch`` or, once DNS was asked, ``shop.cern.ch (published)``."""
    return name if dns is None else f"{name} ({_dns_cells(dns, name)[0]})"


def _dns_json(dns: DnsCheck, name: str) -> dict[str, Any] | None:
    judged = dns.judgements.get(name)
    published = dns.published.get(name)
    if judged is None and published is None:
        return None
    return {
        "state": str(judged.state) if judged is not None else None,
        "answer": answered(judged.answer) if judged is not None else None,
        "written_at": published.written_at if published is not None else None,
        "expected_ips": sorted(published.ips) if published is not None else [],
    }


def _holding_json(holding: Holding) -> dict[str, Any]:
    return {
        "node": holding.node,
        "server_id": holding.server_id,
        "index": holding.index,
        "key": holding.key,
        "frozen": holding.frozen,
        "ingress": holding.ingress,
        "ready": holding.ready,
    }


def _name_of(status: ClusterStatus, label: str) -> str:
    found = status.name(label)
    return found.dns_name if found is not None else label


def _dns_name(status: ClusterStatus, holding: Holding) -> str:
    return _name_of(status, holding.label)


def _claim_text(claimed: bool, owners: Sequence[str]) -> str:
    if not claimed:
        return "unclaimed"
    return "owner " + ", ".join(owners) if owners else "claimed (owner unreadable)"


def _claim_name(decision: Decision) -> str:
    return decision.claim.dns_name if decision.claim is not None else "-"


def _name_carriers_text(name: NameStatus) -> str:
    plain = [f"{node} (plain CNAME)" for node in name.plain_nodes]
    return ", ".join([_carriers_text(name.holdings), *plain] if name.holdings else plain) or "-"


def _carriers_text(holdings: Iterable[Holding]) -> str:
    parts = []
    for h in holdings:
        notes = [
            note
            for note, applies in (
                ("not ingress", not h.ingress),
                ("not Ready", not h.ready),
                (h.key, h.frozen),
            )
            if applies
        ]
        parts.append(f"{h.node} N={h.index}" + (f" ({', '.join(notes)})" if notes else ""))
    return ", ".join(parts) or "-"


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def _section(title: str, items: Sequence[str]) -> list[str]:
    if not items:
        return [f"{title}: {NONE}"]
    return [f"{title}:", *(f"  {item}" for item in items)]
