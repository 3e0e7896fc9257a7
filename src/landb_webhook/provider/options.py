"""What the provider is told at start-up: the zone, the registry, the limits, the policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from landb_webhook.landb.name_policy import NamePolicy
from landb_webhook.provider.read.health import HealthPolicy
from landb_webhook.provider.registry import TXT, Registry

DEFAULT_WINDOW_SECONDS = 3600.0


@dataclass(frozen=True)
class RemovalGuard:
    """How many aliases may go off the air within one window before an apply is refused as a likely mistake:
    at least ``min_count`` and more than ``max_share`` of those published, unless ``allow`` is set."""

    max_share: float = 0.5
    min_count: int = 5
    allow: bool = False
    window_seconds: float = DEFAULT_WINDOW_SECONDS

    def trips(self, withdrawn: int, published: int) -> bool:
        return not self.allow and withdrawn >= self.min_count and withdrawn > self.max_share * published


@dataclass(frozen=True)
class ProviderOptions:
    dns_domain: str = "cern.ch"
    domain_filter: tuple[str, ...] = ("cern.ch",)
    registry: Registry = TXT
    """external-dns' --registry (LANDB_REGISTRY, ``Registry.named``)."""
    index_floor: int = 0
    max_value_length: int = 254
    reserved_metadata_keys: int = 0
    """Keys of each server's quota no addition takes (LANDB_RESERVED_METADATA_KEYS)."""
    max_published_per_namespace: int | None = None
    """Most names one namespace publishes at once (LANDB_MAX_PUBLISHED_PER_NAMESPACE); None: no cap."""
    write_concurrency: int = 4
    inventory_max_age: float = 30.0
    dry_run: bool = False
    health: HealthPolicy = field(default_factory=HealthPolicy)
    adopt_existing: bool = False
    name_policy: NamePolicy = field(default_factory=NamePolicy)
    """Which names each namespace may publish (LANDB_NAME_POLICY, LANDB_RESERVED_NAMES)."""
    txt_owner_id: str | None = None
    """external-dns' --txt-owner-id (LANDB_TXT_OWNER_ID): a claim of another owner is not ours; None: a
    claim is trusted on its label alone."""
    removal_guard: RemovalGuard = field(default_factory=RemovalGuard)
    write_fence_margin: float = 5.0
    """Seconds the writer lease must surely last for a write to be sent: the upstream timeout."""
    ingress_selector: str = ""
    """LANDB_INGRESS_SELECTOR as given: named by the lines that say no node matches it."""
    takeover_names: frozenset[str] = frozenset()
    """LANDB_TAKEOVER_NAMES: DNS names written although DNS answers them elsewhere (provider.first_look)."""
    max_names_per_resource: int = 200
    """LANDB_MAX_NAMES_PER_RESOURCE (config.DEFAULT_MAX_NAMES_PER_RESOURCE; provider.ownership.tenancy)."""
    max_names_per_namespace: int = 1_000
    """LANDB_MAX_NAMES_PER_NAMESPACE (config.DEFAULT_MAX_NAMES_PER_NAMESPACE)."""
    shared_load_balancers: frozenset[str] = frozenset()
    """Load balancers (names or ids) any namespace may publish on (provider.ownership.tenancy, rule 3)."""
    max_request_body: int | None = None
    """The HTTP layer's largest request body (LANDB_MAX_REQUEST_BODY): Records says when the ApplyChanges
    of a node joining or leaving would not fit it. None: not said."""
