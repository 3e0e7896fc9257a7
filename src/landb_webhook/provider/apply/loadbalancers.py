"""Names published on Octavia load balancers: routed by target, tagged make-before-break.

A desired endpoint whose targets include the VIP (or a floating IP of the VIP) of one of the project's
load balancers is that load balancer's name: LanDB publishes it from a ``landb-alias=<label>`` tag on
it (landb.loadbalancers), not from the ingress nodes, which would send a LoadBalancer Service's traffic
to the ingress controller. Every other endpoint takes the ingress-node path as before.

- Records reports a tagged name as an A record with its load balancers' addresses (VIP and floating
  IPs), merged with whatever servers carry the same name; AdjustEndpoints gives such an endpoint
  exactly those addresses, so the loop settles.
- ApplyChanges: the ownership gate and the removal guard see these names like any other. The tag
  writes join the apply ordering (provider.apply.write_in_order): load balancer makes, server makes,
  server breaks, load balancer breaks; a break waits for every make of its name, wherever.
- One list of load balancers per loop: Records reads it, AdjustEndpoints reuses it while it is recent,
  ApplyChanges reads it afresh.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock

import structlog

from landb_webhook.backends import LoadBalancer, LoadBalancerStore, UpstreamError
from landb_webhook.deadline import contexts_for
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.loadbalancers import TagPlan, TagWrite, tag_labels
from landb_webhook.landb.names import dns_name_for
from landb_webhook.logs import RepeatLimitedLog
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.fence import WriteFence, WriterLeaseLost, send_fenced
from landb_webhook.provider.read.inventory import sorted_ips

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LoadBalancers:
    """The project's load balancers at one moment."""

    load_balancers: tuple[LoadBalancer, ...] = ()
    taken_at: float = 0.0

    @functools.cached_property
    def _by_id(self) -> dict[str, LoadBalancer]:
        return {lb.id: lb for lb in self.load_balancers}

    @functools.cached_property
    def _by_address(self) -> dict[str, str]:
        return {address: lb.id for lb in self.load_balancers for address in lb.addresses}

    @functools.cached_property
    def _carried(self) -> dict[str, frozenset[str]]:
        return {lb.id: tag_labels(lb.tags) for lb in self.load_balancers}

    @functools.cached_property
    def _carriers(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for lb_id, labels in self._carried.items():
            for label in labels:
                found.setdefault(label, set()).add(lb_id)
        return found

    def carried(self) -> dict[str, frozenset[str]]:
        """Load balancer id -> the aliases its tags hold. Shared: never modify it."""
        return self._carried

    def carriers(self) -> dict[str, set[str]]:
        """Alias -> the load balancers whose tags hold it. Shared: never modify it."""
        return self._carriers

    def homes(self, targets: Iterable[str]) -> frozenset[str]:
        """The load balancers whose VIP or floating IP is among ``targets``."""
        if not self._by_address:  # no load balancer: 1,000 names x 500 node addresses go unlooked
            return frozenset()
        return frozenset(lb_id for target in targets if (lb_id := self._by_address.get(target.strip())))

    def of(self, lb_ids: Iterable[str]) -> list[LoadBalancer]:
        """The load balancers of these ids, sorted by id."""
        return [self._by_id[lb_id] for lb_id in sorted(lb_ids) if lb_id in self._by_id]

    def addresses_of(self, lb_ids: Iterable[str]) -> tuple[str, ...]:
        return sorted_ips(address for lb_id in lb_ids for address in self._by_id[lb_id].addresses)

    def named(self, lb_ids: Iterable[str]) -> list[str]:
        """``name (id)`` of each, for log lines."""
        return sorted(_named(self._by_id[lb_id]) if lb_id in self._by_id else lb_id for lb_id in lb_ids)


NONE = LoadBalancers()


@dataclass(frozen=True)
class TagOutcome:
    failures: tuple[tuple[TagWrite, str], ...] = ()
    held_back: tuple[TagWrite, ...] = ()
    """Break writes not sent because an addition of the same name, somewhere, did not land."""
    abandoned: WriterLeaseLost | None = None
    succeeded: tuple[TagWrite, ...] = ()
    """The writes that landed (in a dry run: would have been sent)."""

    @property
    def written(self) -> tuple[str, ...]:
        """The load balancers whose write landed."""
        return tuple(write.load_balancer_id for write in self.succeeded)

    def changed_labels(self) -> set[str]:
        """Names a landed write added or removed: what DNS should now answer for them changed."""
        return {label for write in self.succeeded for label in (*write.add, *write.remove)}

    def failed_labels(self) -> set[str]:
        """Names whose change did not fully land: their claims must stay."""
        writes = (*(write for write, _ in self.failures), *self.held_back)
        return {label for write in writes for label in (*write.add, *write.remove)}

    def not_added(self) -> set[str]:
        """Names a failed make write was adding: their removals elsewhere must wait."""
        return {label for write, _ in self.failures for label in write.add}

    def then(self, later: TagOutcome) -> TagOutcome:
        """This phase's outcome followed by ``later``'s."""
        return TagOutcome(
            failures=(*self.failures, *later.failures),
            held_back=(*self.held_back, *later.held_back),
            abandoned=self.abandoned or later.abandoned,
            succeeded=(*self.succeeded, *later.succeeded),
        )

    def problems(self, named: Callable[[Iterable[str]], list[str]]) -> list[str]:
        return [f"load balancer {named([w.load_balancer_id])[0]}: {why}" for w, why in self.failures] + [
            f"load balancer {named([w.load_balancer_id])[0]}: removal held back" for w in self.held_back
        ]


NO_TAG_WRITES = TagOutcome()


@dataclass(frozen=True)
class TagWrites:
    """One apply's load balancer writes, sent by the apply ordering (provider.apply.write_in_order)."""

    path: LoadBalancerPath
    plan: TagPlan
    load_balancers: LoadBalancers

    def make_writes(self, fence: WriteFence) -> TagOutcome:
        return self.path.run("make", self.plan.make_writes, self.load_balancers, fence)

    def break_writes(self, not_added: Set[str], fence: WriteFence) -> TagOutcome:
        """The break writes, but for those removing a name whose addition elsewhere did not land."""
        held_back = tuple(write for write in self.plan.break_writes if not_added & set(write.remove))
        for write in held_back:
            log.warning(
                "removal held back until the new carriers are written",
                load_balancer=self.load_balancers.named([write.load_balancer_id])[0],
                aliases_kept=list(write.remove),
            )
        sent = [write for write in self.plan.break_writes if write not in held_back]
        return TagOutcome(held_back=held_back).then(self.path.run("break", sent, self.load_balancers, fence))


class LoadBalancerPath:
    """What the provider does with load balancers: read them once per loop, route, report, write."""

    def __init__(
        self,
        store: LoadBalancerStore | None,
        metrics: Metrics,
        *,
        dns_domain: str,
        dry_run: bool,
        concurrency: int,
        max_age: float,
    ) -> None:
        """``store`` None: load balancers are not looked at (LANDB_LOADBALANCERS=false)."""
        self._store = store
        self._metrics = metrics
        self._domain = dns_domain
        self._dry_run = dry_run
        self._concurrency = concurrency
        self._max_age = max_age
        self._lock = Lock()
        self._last: LoadBalancers = NONE
        self._warnings = RepeatLimitedLog(log)

    # -- reading ---------------------------------------------------------------------------

    def fresh(self) -> LoadBalancers:
        if self._store is None:
            return NONE
        found = LoadBalancers(tuple(self._store.load_balancers()), time.monotonic())
        with self._lock:
            self._last = found
        return found

    def recent(self) -> LoadBalancers:
        """The last read if younger than ``max_age`` (Records' read of the same loop), else afresh."""
        with self._lock:
            last = self._last
        if self._store is None or time.monotonic() - last.taken_at <= self._max_age:
            return last
        return self.fresh()

    # -- Records and AdjustEndpoints -------------------------------------------------------

    def carried(
        self, by_servers: Mapping[str, Iterable[str]], lbs: LoadBalancers
    ) -> dict[str, tuple[str, ...]]:
        """What DNS should answer per name (DNS name -> IPs): the servers' carriers, with each tagged name's
        load balancer addresses merged in, as Records reports them (what the DNS watcher follows)."""
        merged = {name: tuple(ips) for name, ips in by_servers.items()}
        for label, lb_ids in lbs.carriers().items():
            name = dns_name_for(label, self._domain)
            merged[name] = sorted_ips((*merged.get(name, ()), *lbs.addresses_of(lb_ids)))
        return merged

    def tagged(self, lbs: LoadBalancers) -> dict[str, int]:
        """DNS name -> how many load balancers' tags carry it."""
        return {dns_name_for(label, self._domain): len(ids) for label, ids in lbs.carriers().items()}

    def records(
        self, aliases: Sequence[Endpoint], lbs: LoadBalancers, *, unowned: Set[str], hidden: Set[str]
    ) -> list[Endpoint]:
        """``aliases`` (the servers' A records) with each tagged name's load balancer addresses merged in:
        one endpoint per name. ``unowned``: tagged names without a claim, said once, reported as taken."""
        by_name = {endpoint.dns_name: endpoint for endpoint in aliases}
        for label, lb_ids in sorted(lbs.carriers().items()):
            if label in hidden:
                continue
            name = dns_name_for(label, self._domain)
            held = by_name.get(name)
            targets = sorted_ips((*(held.targets if held else ()), *lbs.addresses_of(lb_ids)))
            by_name[name] = Endpoint(name, "A", targets)
            if label in unowned:
                self._warnings.warning(
                    (label, "unowned"),
                    "alias tag on a load balancer set by someone else (no ownership record): left untouched",
                    subject=label,
                    load_balancers=lbs.named(lb_ids),
                )
        self._metrics.load_balancer_aliases.labels(ownership="owned").set(len(lbs.carriers()) - len(unowned))
        self._metrics.load_balancer_aliases.labels(ownership="unowned").set(len(unowned))
        return [by_name[name] for name in sorted(by_name)]

    def adjusted(self, endpoint: Endpoint, lbs: LoadBalancers, also: Iterable[str]) -> Endpoint | None:
        """The endpoint Records will report once a name routed to load balancers is applied: their
        addresses (and ``also``: those of servers holding it in a form we never edit); None when its
        targets are no load balancer's."""
        homes = lbs.homes(endpoint.targets)
        if not homes:
            return None
        others = sorted(set(endpoint.targets) - set(lbs.addresses_of(homes)))
        if others:
            self._warnings.warning(
                (endpoint.dns_name, "mixed targets"),
                "endpoint targets a load balancer and other addresses: published on the load balancer only",
                subject=endpoint.dns_name,
                load_balancers=lbs.named(homes),
                ignored_targets=others,
                **({"resource": resource} if (resource := endpoint.label("resource")) else {}),
            )
        return Endpoint(
            dns_name=endpoint.dns_name,
            record_type="A",
            targets=sorted_ips((*lbs.addresses_of(homes), *also)),
            labels=endpoint.labels,
        )

    # -- ApplyChanges ----------------------------------------------------------------------

    def homes(
        self, wanted: Iterable[Endpoint], lbs: LoadBalancers, label_of: Callable[[Endpoint], str | None]
    ) -> dict[str, frozenset[str]]:
        """Name -> the load balancers it is to be published on, for the desired endpoints that target one."""
        found: dict[str, frozenset[str]] = {}
        for endpoint in wanted:
            if (label := label_of(endpoint)) is not None and (homes := lbs.homes(endpoint.targets)):
                found[label] = found.get(label, frozenset()) | homes
        return found

    def run(
        self, phase: str, writes: Sequence[TagWrite], lbs: LoadBalancers, fence: WriteFence
    ) -> TagOutcome:
        if not writes:
            return TagOutcome()
        if self._dry_run:
            for write in writes:
                self._metrics.load_balancer_tag_writes_total.labels(result="dry_run").inc()
                log.info("dry run: load balancer tags not written", **_context(phase, write, lbs))
            return TagOutcome(succeeded=tuple(writes))
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix=f"landb-lb-{phase}") as pool:
            results = list(
                pool.map(
                    lambda args: args[0].run(self._send, args[1], fence),
                    zip(contexts_for(len(writes)), writes, strict=True),
                )
            )
        failures: list[tuple[TagWrite, str]] = []
        succeeded: list[TagWrite] = []
        abandoned: WriterLeaseLost | None = None
        for write, error in zip(writes, results, strict=True):
            if isinstance(error, WriterLeaseLost):
                abandoned = abandoned or error
                continue
            self._metrics.load_balancer_tag_writes_total.labels(
                result="ok" if error is None else "error"
            ).inc()
            if error is None:
                log.info("load balancer tags written", **_context(phase, write, lbs))
                succeeded.append(write)
                continue
            self._metrics.upstream_errors_total.labels(upstream=error.upstream).inc()
            log.error(
                "load balancer tag write failed",
                reason=error.reason,
                retryable=error.retryable,
                **_context(phase, write, lbs),
            )
            failures.append((write, error.reason))
        if abandoned is not None:
            log.error(
                "apply abandoned: writer lease no longer certain, nothing more is sent",
                phase=phase,
                reason=str(abandoned),
            )
        return TagOutcome(failures=tuple(failures), abandoned=abandoned, succeeded=tuple(succeeded))

    def _send(self, write: TagWrite, fence: WriteFence) -> UpstreamError | WriterLeaseLost | None:
        store = self._store
        assert store is not None  # a plan names load balancers only when there is a store
        return send_fenced(
            fence,
            f"the tags of load balancer {write.load_balancer_id}",
            lambda: store.update_tags(write.load_balancer_id, write.add, write.remove),
        )


def _named(lb: LoadBalancer) -> str:
    return f"{lb.name} ({lb.id})" if lb.name else lb.id


def _context(phase: str, write: TagWrite, lbs: LoadBalancers) -> dict[str, object]:
    return {
        "phase": phase,
        "load_balancer": lbs.named([write.load_balancer_id])[0],
        "aliases_added": list(write.add),
        "aliases_removed": list(write.remove),
    }


def merged_carriers(*carriers: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Alias -> every carrier (server ids and load balancer ids), for what counts names as published."""
    merged: dict[str, set[str]] = {}
    for found in carriers:
        for label, ids in found.items():
            merged.setdefault(label, set()).update(ids)
    return merged
