"""DNS first: before an apply writes a name this cluster does not publish yet, DNS is asked once what it
answers for it (the rule: landb.first_look); this module asks, and says what it decided.

- the names asked: those to publish that this cluster neither claims nor carries (on a server or a load
  balancer's tag); a name already published is never asked (a node joining gets it while DNS is down);
- the lookups: one per new name, ``CONCURRENCY`` at a time, each bounded by the resolver's own timeout, all
  of them by the reply deadline less ``RESERVE`` (the writes come after); the first lookup that gets no
  answer stops the rest from being sent (a resolver down costs one timeout, not one per name): every name
  not answered is held back, and asked again by the next apply;
- a refusal (DNS answers another device or a CNAME) writes nothing and stores no claim; it is counted in
  ``refused_changes_total{reason="dns_elsewhere"}``, said once an hour per name, told to the objects asking
  for the name (a ``Refused`` event saying what DNS answers and what to do: provider.refusals) and kept for
  ``status``
  (provider.read.dns_refusals). It is no failure of the apply: the rest of the change set lands and the
  answer is 204, so that one name taken elsewhere never blocks external-dns; external-dns asks for it
  again every loop, and it is asked again each time;
- held back (DNS silent): said once an hour, no event, no error either (the answer is 204): external-dns
  asks again next loop;
- with no resolver (LANDB_DNS_WATCH=false) nothing is asked and every name is written, as before.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Set
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextvars import copy_context

import structlog

from landb_webhook.backends import NameLookup
from landb_webhook.deadline import reply_deadline
from landb_webhook.landb.first_look import FirstLook, decide, new_names
from landb_webhook.landb.propagation import Answer, NoAnswer, answered
from landb_webhook.provider.apply.loadbalancers import LoadBalancers
from landb_webhook.provider.context import Context, named
from landb_webhook.provider.read.dns_refusals import DnsRefusal, DnsRefusals
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.refusals import Refusals

log = structlog.get_logger(__name__)

CONCURRENCY = 32
"""Lookups in flight at once (a first publish of many names; bench/first_look.py measures it)."""
RESERVE = 4.0
"""Seconds of the reply deadline left to the writes after the lookups (at most one upstream timeout,
``LANDB_UPSTREAM_TIMEOUT``'s default, less the claims' write)."""
DEFAULT_BUDGET = 5.0
"""Seconds the lookups may take when no reply deadline is set (a one-shot command, a test)."""
REFUSED = "DNS already answers it for another device"
TAKEOVER_HINT = (
    "another device or someone's plain alias holds the name in LanDB: pick another name; to move it to "
    "this cluster on purpose, the webhook's operator lists it in LANDB_TAKEOVER_NAMES"
)
NOTHING_FOUND = FirstLook()


class DnsFirst:
    def __init__(self, context: Context, lookup: NameLookup | None, refused: DnsRefusals) -> None:
        """``lookup`` None: nothing is asked, every name is written; ``refused``: where the refusals are
        kept for ``status`` (stored with the webhook's state)."""
        self._context = context
        self._lookup = lookup
        self._refused = refused

    def look(
        self,
        publish: Set[str],
        *,
        claimed: Set[str],
        inventory: Inventory,
        load_balancers: LoadBalancers,
        homes: Mapping[str, frozenset[str]],
        refusals: Refusals,
    ) -> FirstLook:
        """What DNS decides for the names of ``publish`` this cluster neither ``claimed`` (DNS names, before
        this apply) nor carries; its refusals in ``refusals``. ``homes``: the load balancers this apply
        tags."""
        context = self._context
        # A name one of our servers holds as a plain alias is answered by that CNAME: the plan refuses it
        # (plain_alias, naming its holder), more precisely than DNS would.
        plain = inventory.plain_aliases(context.options.dns_domain).keys()
        carried = inventory.carriers().keys() | load_balancers.carriers().keys() | plain
        asked = new_names(
            publish, {label for label in publish if context.dns_name(label) in claimed}, carried
        )
        if self._lookup is None or not asked:
            return FirstLook(written=asked)
        takeover = {label for label in asked if context.dns_name(label) in context.options.takeover_names}
        found = decide(
            asked, self._ask(sorted(asked)), self._ours(inventory, load_balancers, homes), takeover
        )
        self._report(found, refusals)
        return found

    def _ours(
        self, inventory: Inventory, load_balancers: LoadBalancers, homes: Mapping[str, frozenset[str]]
    ) -> frozenset[str]:
        """Every address of this cluster: its nodes', its departed servers', its former carriers' (as the
        publication log remembers them: DNS lags by a sync) and those of the load balancers it tags."""
        ours = {ip for node in inventory.nodes for ip in node.internal_ips}
        ours.update(ip for gone, _ in inventory.departed for ip in gone.internal_ips)
        for published in self._context.published.published().values():
            ours.update(published.ips | published.former)
        tagging = {lb_id for ids in homes.values() for lb_id in ids}
        tagging.update(lb_id for lb_id, labels in load_balancers.carried().items() if labels)
        ours.update(load_balancers.addresses_of(tagging))
        return frozenset(ours)

    # -- the lookups --------------------------------------------------------------------------------

    def _ask(self, labels: list[str]) -> dict[str, Answer]:
        """One lookup per label, together, until the budget ends or one gets no answer (module docstring)."""
        assert self._lookup is not None
        resolve, dns_name = self._lookup.resolve, self._context.dns_name
        deadline = reply_deadline()
        until = time.monotonic() + DEFAULT_BUDGET if deadline is None else deadline - RESERVE
        answers: dict[str, Answer] = {}
        pool = ThreadPoolExecutor(min(CONCURRENCY, len(labels)), thread_name_prefix="landb-dns-first")
        try:
            pending: dict[Future[Answer], str] = {
                pool.submit(copy_context().run, resolve, dns_name(label)): label for label in labels
            }
            while pending:
                timeout = max(0.0, until - time.monotonic())
                done, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
                if not done:
                    break  # the budget is spent: what is left was not answered in time
                for future in done:
                    label = pending.pop(future)
                    try:
                        answers[label] = future.result()
                    except Exception as error:  # an adapter bug counts as no answer, never as a 500
                        answers[label] = NoAnswer(f"{type(error).__name__}: {error}")
                    silent = answers[label]
                    if isinstance(silent, NoAnswer):  # a resolver down: the others would time out too
                        return {**answers, **dict.fromkeys(pending.values(), silent)}
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return answers

    # -- what it decided, said --------------------------------------------------------------------------

    def _report(self, found: FirstLook, refusals: Refusals) -> None:
        context = self._context
        now = context.clock()
        for label, answer in sorted(found.refused.items()):
            name, dns = context.dns_name(label), answered(answer)
            refusals.refuse(label, "dns_elsewhere", f"{REFUSED} ({dns})")
            said = f"change refused: DNS already answers {name} elsewhere ({dns}), nothing written"
            refusals.say(said, once=(name, said), subject=name, dns=dns, hint=TAKEOVER_HINT)
        self._refused.refused(
            DnsRefusal(context.dns_name(label), answered(answer), now)
            for label, answer in found.refused.items()
        )
        self._refused.written(context.dns_name(label) for label in found.written)
        self._refused.expire(now)
        for label, answer in sorted(found.taking_over.items()):
            log.warning(
                "taking over a name DNS answers elsewhere (LANDB_TAKEOVER_NAMES)",
                name=context.dns_name(label),
                dns=answered(answer),
            )
        if found.held_back:
            reasons = sorted({answer.reason for answer in found.held_back.values()})
            context.warnings.warning(
                ("dns first", "held back"),
                "new names held back: DNS did not answer whether another device holds them; asked again "
                "next loop",
                names=named(context.dns_name(label) for label in found.held_back),
                count=len(found.held_back),
                reason=reasons[0],
                resolvers=self._lookup.where if self._lookup is not None else "",
                hint="check LANDB_DNS_RESOLVERS and that the pod can reach them (UDP and TCP port 53)",
            )

    @staticmethod
    def taking_over_note(found: FirstLook, label: str) -> str:
        """For the ``Written`` event of a name taken over: what it takes over."""
        answer = found.taking_over.get(label)
        return "" if answer is None else f", taking over from {answered(answer)} (LANDB_TAKEOVER_NAMES)"
