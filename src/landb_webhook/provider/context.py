"""What Records, AdjustEndpoints and ApplyChanges share: the options, the metrics, and how an endpoint
becomes an alias label or is dropped with one warning."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.names import InvalidName, dns_name_for, label_for
from landb_webhook.logs import RepeatLimitedLog
from landb_webhook.metrics import Metrics
from landb_webhook.provider.options import ProviderOptions
from landb_webhook.provider.read.health import Placement
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.watch.events import NameChange, NameEvents, NoEvents
from landb_webhook.provider.watch.publications import PublicationLog

log = structlog.get_logger("landb_webhook.provider")

ALIAS_RECORD_TYPES = frozenset({"A", "AAAA", "CNAME"})

SOME_NAMES = 10
"""How many names one log line lists before it says how many more there are."""


@dataclass
class Context:
    options: ProviderOptions
    metrics: Metrics
    clock: Callable[[], float] = time.time
    """Epoch seconds, compared with the API's timestamps (grace periods) and stamping the removal window."""
    warnings: RepeatLimitedLog = field(default_factory=lambda: RepeatLimitedLog(log))
    published: PublicationLog = field(default_factory=PublicationLog)
    """What each name should resolve to and when it was written, for the DNS watcher."""
    events: NameEvents = field(default_factory=NoEvents)
    """Where a name's transitions are told, for the Kubernetes Events of its Ingress or Service."""

    def warn_once(self, subject: str, message: str, **fields: object) -> None:
        """Warn once per period (logs.REPEAT_PERIOD_SECONDS), with how many repeats were skipped: one bad
        Ingress does not flood every loop's log, and the memory of what was said stays bounded."""
        self.warnings.warning((subject, message), message, subject=subject, **fields)

    def dns_name(self, label: str) -> str:
        return dns_name_for(label, self.options.dns_domain)

    def label_or_none(self, dns_name: str) -> str | None:
        try:
            return label_for(dns_name, self.options.dns_domain)
        except InvalidName:
            return None

    def alias_label(self, endpoint: Endpoint) -> str | None:
        """The alias an endpoint names, or None, dropped with a warning, if it cannot be one."""
        record_type = endpoint.record_type.upper()
        if record_type not in ALIAS_RECORD_TYPES:
            self.drop(endpoint, f"record type {record_type} cannot be a LanDB alias", "record_type")
            return None
        try:
            return label_for(endpoint.dns_name, self.options.dns_domain)
        except InvalidName as exc:
            self.drop(endpoint, str(exc), exc.kind)
            return None

    def labels(self, endpoints: Iterable[Endpoint]) -> set[str]:
        return {label for e in endpoints if (label := self.alias_label(e)) is not None}

    def drop(self, endpoint: Endpoint, reason: str, kind: str) -> None:
        self.metrics.dropped_endpoints_total.labels(reason=kind).inc()
        self.events.tell(NameChange(endpoint.dns_name, "refused", reason, kind), [endpoint])
        resource = endpoint.label("resource")  # the Ingress or Service asking: ingress/<namespace>/<name>
        self.warn_once(
            f"{endpoint.dns_name} {endpoint.record_type}",
            f"endpoint dropped: {reason}",
            **({"resource": resource} if resource else {}),
        )

    def placement(self, inventory: Inventory) -> Placement:
        """Where the aliases go now (provider.health): the one answer AdjustEndpoints and ApplyChanges use."""
        verdicts = inventory.verdicts(self.options.health, self.clock())
        return Placement(
            ingress=inventory.ingress_server_ids(),
            eligible=inventory.eligible_server_ids(verdicts),
            current=inventory.carriers(),
        )

    def unreported_frozen_only(self, inventory: Inventory) -> set[str]:
        """The aliases held only in a key or form we never edit, not reported when the registry does not
        spare what has no owner (noop).

        noop has no owners, so with ``sync`` external-dns would ask every loop to delete such an alias, and
        nothing we write removes it (as with plain aliases). An alias we also hold in a slot is reported
        with all its carriers, frozen ones included: deleting it removes our tokens, what is left is frozen
        only and drops out of Records, and the loop settles. AdjustEndpoints agrees.
        """
        if self.options.registry.spares_ownerless:
            return set()
        frozen = inventory.frozen_carriers()
        if not frozen:
            return set()
        in_slots = {
            label
            for state in inventory.server_states()
            for _, label, _ in state.aliases.editable_load()
            if label in frozen
        }
        return frozen.keys() - in_slots


def named(names: Iterable[str]) -> str:
    """``a, b and 3 more``: names for a log line, bounded however many there are."""
    ordered = sorted(names)
    shown = ", ".join(ordered[:SOME_NAMES])
    more = len(ordered) - SOME_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def node_names(inventory: Inventory) -> dict[str, str]:
    return {s.server_id: s.node_name for s in inventory.server_states()}


def nodes_holding(inventory: Inventory, label: str, names: Mapping[str, str]) -> list[str]:
    """The nodes whose servers carry ``label``; ``names``: server id -> node name (``node_names``)."""
    return sorted(names[i] for i in inventory.carriers().get(label, ()) if i in names)
