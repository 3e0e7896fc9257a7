"""What the provider is told at start-up: the zone, the registry, the limits, the policies.

Each field is a setting, whose default is written once, in config.Settings; wiring.provider_options turns
the settings into these options."""

from __future__ import annotations

from dataclasses import dataclass

from landb_webhook.landb.name_policy import NamePolicy
from landb_webhook.provider.read.health import HealthPolicy
from landb_webhook.provider.registry import Registry


@dataclass(frozen=True, kw_only=True)
class RemovalGuard:
    """How many aliases may go off the air within one window before an apply is refused as a likely mistake:
    at least ``min_count`` and more than ``max_share`` of those published, unless ``allow`` is set."""

    max_share: float
    """LANDB_MAX_REMOVAL_SHARE."""
    min_count: int
    """LANDB_MAX_REMOVAL_MIN_COUNT."""
    allow: bool
    """LANDB_ALLOW_MASS_REMOVAL."""
    window_seconds: float
    """LANDB_REMOVAL_WINDOW."""

    def trips(self, withdrawn: int, published: int) -> bool:
        return not self.allow and withdrawn >= self.min_count and withdrawn > self.max_share * published


@dataclass(frozen=True, kw_only=True)
class ProviderOptions:
    dns_domain: str
    domain_filter: tuple[str, ...]
    registry: Registry
    """external-dns' --registry (LANDB_REGISTRY, ``Registry.named``)."""
    index_floor: int
    max_value_length: int
    reserved_metadata_keys: int
    """Keys of each server's quota no addition takes (LANDB_RESERVED_METADATA_KEYS)."""
    max_published_per_namespace: int | None
    """Most names one namespace publishes at once (LANDB_MAX_PUBLISHED_PER_NAMESPACE); None: no cap."""
    write_concurrency: int
    inventory_max_age: float
    dry_run: bool
    health: HealthPolicy
    adopt_existing: bool
    name_policy: NamePolicy
    """Which names each namespace may publish (LANDB_NAME_POLICY, LANDB_RESERVED_NAMES)."""
    txt_owner_id: str | None
    """external-dns' --txt-owner-id (LANDB_TXT_OWNER_ID): a claim of another owner is not ours; None: a
    claim is trusted on its label alone."""
    removal_guard: RemovalGuard
    write_fence_margin: float
    """Seconds the writer lease must surely last for a write to be sent: the upstream timeout."""
    ingress_selector: str
    """LANDB_INGRESS_SELECTOR as given: named by the lines that say no node matches it."""
    takeover_names: frozenset[str]
    """LANDB_TAKEOVER_NAMES: DNS names written although DNS answers them elsewhere (provider.first_look)."""
    max_names_per_resource: int
    """LANDB_MAX_NAMES_PER_RESOURCE (provider.ownership.tenancy)."""
    max_names_per_namespace: int
    """LANDB_MAX_NAMES_PER_NAMESPACE."""
    shared_load_balancers: frozenset[str]
    """Load balancers (names or ids) any namespace may publish on (provider.ownership.tenancy, rule 3)."""
    max_request_body: int | None
    """The HTTP layer's largest request body (LANDB_MAX_REQUEST_BODY): Records says when the ApplyChanges
    of a node joining or leaving would not fit it. None: not said."""
