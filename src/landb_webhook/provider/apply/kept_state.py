"""What must survive a restart, kept in the state store (backends.StateStore) and in memory: the servers
holding owned tokens (provider.departed), the removal window (provider.removals), when each name was
written (provider.publications, for the DNS watcher) and the names DNS refused (provider.read.dns_refusals,
for ``status``).

Read at every apply and merged with memory (another replica may have written it since, and what this one
knows may not have been stored); written, fenced, when what it should hold changed. A failure either way
is said and the apply goes on with what is in memory.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from landb_webhook.backends import Server, StateStore, UpstreamError
from landb_webhook.landb.plan import Plan, ServerState
from landb_webhook.provider.apply.fence import WriteFence, WriterLeaseLost
from landb_webhook.provider.apply.removals import WINDOW_STATE_KEY, RemovalWindow
from landb_webhook.provider.read import departed, dns_refusals
from landb_webhook.provider.read.departed import Remembered, holds_owned, remembered_after
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.watch import publications

log = structlog.get_logger(__name__)


class KeptState:
    def __init__(
        self,
        store: StateStore | None,
        window_seconds: float,
        published: publications.PublicationLog | None = None,
    ) -> None:
        """``store`` None: kept in memory only; ``published``: the DNS write times kept with the rest."""
        self.published = published if published is not None else publications.PublicationLog()
        self._store = store
        self._stored: dict[str, str] | None = None
        """What the state store held when last read or written; None until it was read."""
        self.remembered: dict[str, Remembered] = {}
        """Server id -> the servers that held owned tokens when last seen (provider.departed)."""
        self.window = RemovalWindow(window_seconds)
        """The applies of the last removal window, for the removal guard."""
        self.dns_refused = dns_refusals.DnsRefusals()
        """The names refused before their first write because DNS answers them elsewhere (``status``)."""

    def servers_to_look_for(self) -> list[Remembered]:
        if self._stored is None:  # the first Records of this process; then each apply reads it
            self.load(window=False)
        return list(self.remembered.values())

    def load(self, *, window: bool = True) -> None:
        """Read the state store and merge it into what is in memory. Only an apply, which holds the apply
        lock, takes the removal window: the guard changes it under that lock."""
        try:
            stored = dict(self._store.load() if self._store is not None else self._stored or {})
        except UpstreamError as error:
            log.warning(
                "webhook state not read: departed servers and the removal window as in memory",
                reason=error.reason,
            )
            if self._stored is None:
                self._stored = {}  # Records does not ask again: the next apply does
            return
        self._stored = stored
        try:
            remembered = departed.from_state(stored)
            stored_window = RemovalWindow.from_json(stored.get(WINDOW_STATE_KEY, "[]"), self.window.seconds)
        except ValueError as error:
            log.warning("webhook state unreadable: ignored", error=str(error))
            return
        self.remembered = remembered | self.remembered
        self.published.merge_json(stored.get(publications.STATE_KEY, "{}"))
        try:
            self.dns_refused.merged(dns_refusals.from_json(stored.get(dns_refusals.STATE_KEY, "{}")))
        except ValueError as error:
            log.warning(
                "webhook state: the names refused by DNS are unreadable and ignored", error=str(error)
            )
        if window:
            self.window = self.window.merged(stored_window)

    def save(self, fence: WriteFence) -> None:
        """Write the state store when what it should hold changed; a failure is said and the apply goes
        on: memory keeps both until the next apply stores them (lost only if the process restarts).
        Fenced like every write: a replica no longer sure of the lease leaves it to the holder."""
        wanted = {
            departed.STATE_KEY: departed.to_json(self.remembered),
            WINDOW_STATE_KEY: self.window.to_json(),
            publications.STATE_KEY: self.published.to_json(),
        }
        if self.dns_refused.entries or dns_refusals.STATE_KEY in (self._stored or {}):
            wanted[dns_refusals.STATE_KEY] = self.dns_refused.to_json()
        if wanted == self._stored:
            return
        try:
            fence.check("the webhook state was written")
            if self._store is not None:
                self._store.save(wanted)
        except WriterLeaseLost as lost:
            log.warning("webhook state not stored: kept in memory", reason=str(lost))
            return
        except UpstreamError as error:
            log.error(
                "webhook state not stored: departed servers and the removal window are kept in memory only",
                reason=error.reason,
                hint="check the RBAC for ConfigMaps in the webhook's namespace",
            )
            return
        self._stored = wanted

    def remember(
        self,
        inventory: Inventory,
        plan: Plan,
        owned: Callable[[str], bool],
        read_server: Callable[[str], Server | None],
    ) -> None:
        """After an apply's writes: remember the servers holding owned tokens (``owned``: the names claimed
        once the apply's claims are stored and dropped) and forget the departed ones cleaned or deleted
        (provider.departed), read again with ``read_server`` when written; ``save`` stores that."""
        given = {server_plan.server.server_id for server_plan in plan.servers if server_plan.added}
        written = {server_plan.server.server_id for server_plan in plan.servers}
        states = {state.server_id: state for state in inventory.server_states()}
        carrying = {
            server.id: Remembered(server.id, node.name, node.internal_ips)
            for node in inventory.nodes
            if (server := inventory.servers.get(node.name)) is not None
            and (server.id in given or holds_owned(states[server.id], owned))
        }
        departed_now: dict[str, ServerState | None] = dict.fromkeys(inventory.departed_gone)
        for gone, _ in inventory.departed:
            if gone.server_id not in written:
                departed_now[gone.server_id] = states[gone.server_id]
                continue
            try:  # what the writes left on it
                now = read_server(gone.server_id)
            except UpstreamError:
                continue  # not known: remembered as it is
            departed_now[gone.server_id] = (
                None if now is None else ServerState(now.id, now.name, gone.node_name, now.metadata)
            )
        before = self.remembered
        self.remembered = remembered_after(before, carrying, departed_now, owned)
        for server_id in sorted(before.keys() - self.remembered.keys() - carrying.keys()):
            if server_id in departed_now:
                done = "deleted from Nova" if departed_now[server_id] is None else "cleaned of our aliases"
                log.info(
                    f"departed server {done}: forgotten",
                    node=before[server_id].node_name,
                    server_id=server_id,
                )
