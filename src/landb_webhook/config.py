"""Every setting of the service, read from ``LANDB_*`` environment variables and command-line flags."""

from __future__ import annotations

import difflib
import ipaddress
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from landb_webhook.landb.name_policy import NamePolicy
from landb_webhook.landb.names import InvalidName, label_for, validate_label
from landb_webhook.provider.read.txt_registry import validate_owner_id
from landb_webhook.provider.registry import Registry
from landb_webhook.selector import (
    AnySelector,
    InvalidSelector,
    LabelSelector,
    is_valid_label_key,
)

PROG = "landb-webhook"
"""The command whose settings these are: the refusals below name its ``--help``."""
ENV_PREFIX = "LANDB_"
SELECTOR_SYNTAX = (
    "a selector is comma-separated requirements, each key=value, key!=value, key in (a,b), "
    "key notin (a,b), key or !key"
)
NOT_SETTINGS = frozenset({"LANDB_TOOLS_DIR", "LANDB_EXTERNAL_DNS", "LANDB_FAULT_SEEDS", "LANDB_CRASH_SEEDS"})
"""``LANDB_*`` names the build scripts and the tests read (where tools are cached, seeds): no setting of
the service, and no mistake either when they are set."""

DNS_PORT = 53
DEFAULT_MAX_REQUEST_BODY = 16 * 2**20
"""The largest request body read by default (LANDB_MAX_REQUEST_BODY): it holds the ApplyChanges of a node
joining or leaving every cluster of the chart's memory envelope (docs/configuration.md states the rule and
the figures)."""
DEFAULT_MAX_REQUEST_ENDPOINTS = 10_000
"""The most endpoints one request may carry by default (LANDB_MAX_REQUEST_ENDPOINTS): a body's bytes do
not bound what it costs, its names do, and this holds the largest request of every cluster of the envelope
while keeping ``serve`` under the chart's memory limit (docs/configuration.md has the measurements)."""

DEFAULT_MAX_NAMES_PER_RESOURCE = 200
"""Names one Ingress or Service may ask for (LANDB_MAX_NAMES_PER_RESOURCE): far above any real Ingress's
hosts, far below what would crowd out other teams (provider.ownership.tenancy, rule 1)."""
DEFAULT_MAX_NAMES_PER_NAMESPACE = 1_000
"""Names the resources of one namespace may ask for together (LANDB_MAX_NAMES_PER_NAMESPACE): half of what
one server's metadata quota holds (2,057 names)."""


def flag_and_variable(field: str) -> str:
    """How an operator names a setting: ``--api-port (LANDB_API_PORT)``."""
    return f"--{field.replace('_', '-')} ({ENV_PREFIX}{field.upper()})"


class SettingError(ValueError):
    """A setting that passed validation but cannot work here (a busy port, an unreadable file)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{flag_and_variable(field)}: {problem.rstrip('.')}")
        self.field = field


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # HTTP
    api_host: str = Field("127.0.0.1", description="Address of the webhook API (external-dns calls it).")
    api_port: int = Field(8888, ge=0, le=65535, description="Port of the webhook API.")
    health_host: str = Field("0.0.0.0", description="Address of /healthz, /readyz and /metrics.")
    health_port: int = Field(8080, ge=0, le=65535, description="Port of /healthz, /readyz and /metrics.")
    request_timeout: float = Field(
        10.0, gt=0, le=14, description="Seconds a webhook call may take before it answers 503."
    )
    max_request_body: int = Field(
        DEFAULT_MAX_REQUEST_BODY,
        ge=2**16,
        le=2**25,
        description="Largest webhook request body in bytes (the default holds the ApplyChanges of a node "
        "joining or leaving every cluster of the chart's memory envelope; Records warns when that would "
        "not fit); a larger one is refused with a 503 naming this setting.",
    )
    max_request_endpoints: int = Field(
        DEFAULT_MAX_REQUEST_ENDPOINTS,
        ge=1_000,
        le=1_000_000,
        description="Most endpoints in one webhook request (AdjustEndpoints' list; ApplyChanges' create, "
        "updateOld, updateNew and delete together); a request of more is cut before the provider reads it "
        "(names outside the domain filter first, then the excess of the largest requester), with a log "
        "line naming this setting. What a request costs grows with its names, not its bytes: the default "
        "holds a node joining or leaving a cluster of the most names one server's quota holds.",
    )
    api_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        [],
        description="Host names (comma-separated, any port) the webhook API answers besides loopback "
        "(127.0.0.1, ::1, localhost); another Host is refused with 421, which stops a web page from "
        "driving the API through DNS rebinding. Needed only if external-dns calls it by another name.",
    )
    allow_unsafe_api_host: bool = Field(
        False,
        description="Let the webhook API listen on an address beyond loopback (LANDB_API_HOST): it has no "
        "authentication, so any pod that reaches it could publish and remove names. Without this such an "
        "address stops `serve` (exit 2).",
    )
    api_max_connections: int = Field(
        32,
        ge=2,
        le=4096,
        description="Open connections to the webhook API (external-dns keeps one or two); more are "
        "answered 503 and closed, so that a flood cannot use up the process' file descriptors.",
    )

    # DNS
    dns_domain: str = Field(
        "cern.ch", description="Zone LanDB publishes aliases in: alias `app` is `app.<zone>`."
    )
    # NoDecode: pydantic-settings would otherwise insist on JSON for a list read from the environment.
    domain_filter: Annotated[list[str], NoDecode] = Field(
        ["cern.ch"],
        description="Domain suffixes announced to external-dns at negotiation (comma-separated).",
    )

    # Kubernetes
    kubeconfig: Path | None = Field(
        None, description="Kubeconfig file; unset means in-cluster config, then $KUBECONFIG."
    )
    ingress_selector: str = Field(
        "role=ingress",
        description="Label selector of the nodes that carry the aliases; several separated by `;` "
        "match when any does (`role=ingress;node-role.kubernetes.io/ingress`).",
    )
    node_cache_max_age: float = Field(
        300.0,
        ge=60,
        description="Seconds the node cache may go without a successful list or watch of the "
        "Kubernetes API; past that, Records and ApplyChanges answer 503 rather than use it. At least "
        "one watch period (60 s): a quiet, healthy cluster refreshes it only that often.",
    )
    exclude_label: str = Field(
        "node.kubernetes.io/exclude-from-external-load-balancers",
        description="Nodes with this label never carry aliases, even if they match the selector.",
    )

    node_grace_period: float = Field(
        300.0,
        ge=0,
        description="Seconds an unhealthy ingress node (NotReady or Unknown, being deleted, no Ready "
        "ingress controller pod) keeps its aliases, counted from when it became unhealthy.",
    )
    cordoned_nodes_carry: bool = Field(
        True, description="Whether a cordoned (unschedulable) ingress node keeps carrying aliases."
    )
    ingress_pod_selector: str = Field(
        "",
        description="Label selector of the ingress controller's pods (`app.kubernetes.io/name="
        "ingress-nginx`); when set, a node carries aliases only while a Ready one runs on it.",
    )
    ingress_pod_namespace: str | None = Field(
        None, description="Namespace of the ingress controller's pods; unset means every namespace."
    )

    # OpenStack
    os_cloud: str | None = Field(
        None, description="Cloud name in clouds.yaml; unset means the OS_CLOUD / OS_* environment."
    )
    os_cloud_conf: Path | None = Field(
        None,
        description="A CERN cluster's cloud.conf file ([Global] section) to take the OpenStack "
        "credentials from, instead of clouds.yaml.",
    )
    os_cacert: Path | None = Field(
        None,
        description="CA bundle to verify OpenStack's TLS certificates with (else clouds.yaml `cacert`, "
        "cloud.conf `ca-file`, or the system CAs); it wins over both. Verification is never turned off by "
        "the webhook.",
    )
    allow_unsafe_tls: bool = Field(
        False,
        description="Run although the kubeconfig (insecure-skip-tls-verify) or the OpenStack "
        "configuration (verify: false, insecure: true, OS_INSECURE) turns TLS verification off: credentials "
        "would be sent to whoever answers. Without this such a configuration stops start-up (exit 2).",
    )
    upstream_timeout: float = Field(
        5.0, gt=0, description="Seconds one OpenStack or Kubernetes call may take."
    )
    upstream_retries: int = Field(
        4,
        ge=0,
        le=10,
        description="Retries of an OpenStack call after a 5xx, 429, connection failure or timeout "
        "(jittered exponential backoff, Retry-After honoured, never past the request deadline).",
    )
    conflict_retries: int = Field(
        2,
        ge=0,
        le=5,
        description="Retries of a metadata write Nova refused with 409 (locked server, vm_state) "
        "before it is reported for that server.",
    )
    write_concurrency: int = Field(
        4, ge=1, le=32, description="Nova metadata requests (POST or DELETE) in flight at the same time."
    )
    inventory_max_age: float = Field(
        30.0, ge=0, description="Seconds AdjustEndpoints may reuse the inventory read by Records."
    )

    # LanDB
    max_value_length: int = Field(
        254, ge=80, le=255, description="Longest landb-alias* value written, commas included."
    )
    index_floor: int = Field(0, ge=0, description="Smallest N given to a new `--load-N-` token.")
    takeover_names: Annotated[list[str], NoDecode] = Field(
        [],
        description="DNS names (comma-separated, in the zone) published although DNS answers them for "
        "another device or as a CNAME: a cluster replacing another takes its names over on purpose (with "
        "a --index-floor clear of the other's Ns). Any other name DNS answers elsewhere is refused before "
        "its first write.",
    )
    reserved_metadata_keys: int = Field(
        16,
        ge=0,
        le=127,
        description="Metadata keys of each server the webhook never fills with aliases, kept for other "
        "writers (LanDB's own keys, an operator, another tool): a new landb-alias* key is opened only while "
        "the server holds fewer than Nova's quota (128 by default) less these; 0 fills the quota.",
    )
    max_published_per_namespace: int | None = Field(
        None,
        ge=1,
        description="Most names one namespace (the `resource` label of a name's claim) may publish at "
        "once; a creation past it is refused (a Refused event on its object), so one team cannot fill the "
        "servers' metadata for everyone. Unset: no cap.",
    )

    # Ownership
    registry: Literal["txt", "noop"] = Field(
        "txt",
        description="external-dns' --registry: with txt, aliases without a TXT claim are never touched.",
    )
    ownership_store: Literal["configmap", "memory"] = Field(
        "configmap", description="Where TXT ownership records live (memory is for tests and demos)."
    )
    ownership_namespace: str | None = Field(
        None, description="Namespace of the ownership ConfigMap; unset means the pod's own namespace."
    )
    ownership_configmap: str = Field(
        "landb-webhook-ownership", description="Name of the ownership ConfigMap."
    )
    txt_owner_id: str | None = Field(
        None,
        description="external-dns' --txt-owner-id: with registry txt, a claim naming another owner (or none "
        "readable) is not ours: ignored for ownership and said once. Unset: a claim is trusted on its "
        "label alone. Leave it unset while migrating owners (--migrate-from-txt-owner) or with encrypted "
        "TXT records.",
    )
    name_policy: str = Field(
        "",
        description="Which names each namespace may publish: rules separated by `;`, each "
        "`<namespace or *>=<patterns>`, a pattern an alias label or a prefix ending in `*`, `{namespace}` "
        "standing for the namespace (`*={namespace}-*;web=www,www-*`). A namespace without a rule (and no "
        "`*` rule) may publish any name. A creation it does not allow is refused with a Refused event; "
        "a name already published is never taken away.",
    )
    reserved_names: str = Field(
        "",
        description="Names no namespace may publish (comma-separated alias labels or prefixes ending in "
        "`*`: `www,login,cern-*`). Labels starting with `xn--` are refused unless LANDB_NAME_POLICY "
        "allows them with a pattern starting with `xn--`.",
    )
    adopt_existing: bool = Field(
        False,
        description="With registry txt: an alias already on the nodes without a TXT claim is claimed "
        "when external-dns wants its name (its carriers keep their N), instead of left alone.",
    )

    loadbalancers: bool = Field(
        True,
        description="A name whose targets are the VIP (or a floating IP) of one of the project's Octavia "
        "load balancers is published as a landb-alias=<name> tag on it, not on the ingress nodes "
        "(needs Octavia read and tag rights); false: load balancers are never read or written.",
    )

    shared_load_balancers: Annotated[list[str], NoDecode] = Field(
        [],
        description="Load balancers (names or ids, comma-separated) any namespace may publish names on. "
        "Otherwise a name goes to a load balancer only when the cloud controller manager made it for a "
        "Service of the namespace of the name's owner (or of its asker, for a new name): "
        "`kube_service_<cluster>_<namespace>_<service>`.",
    )

    # Tenants (namespaces)
    max_names_per_resource: int = Field(
        DEFAULT_MAX_NAMES_PER_RESOURCE,
        ge=1,
        description="Names one Ingress, Service or other resource may ask for; past it, the rest are "
        "dropped from AdjustEndpoints (the names it owns kept first) with a Refused event on the object.",
    )
    max_names_per_namespace: int = Field(
        DEFAULT_MAX_NAMES_PER_NAMESPACE,
        ge=1,
        description="Names the resources of one namespace may ask for together; past it, the excess of "
        "its largest requester is dropped, with a Refused event on that object.",
    )

    # Safety
    max_removal_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Largest share of a namespace's published aliases one apply (or the removal window) "
        "may remove; that namespace's removals beyond it are held back as a likely mistake (a source "
        "misconfigured, a namespace deleted) while everything else lands (503 naming them).",
    )
    max_removal_min_count: int = Field(
        5,
        ge=1,
        description="Removals of fewer aliases of one namespace than this are never held back by the "
        "share rule (small namespaces).",
    )
    removal_window: float = Field(
        3600.0,
        ge=0,
        description="Seconds over which the removal guard adds up removals: every owned alias withdrawn "
        "within it counts, against the aliases published at its start (0: one apply at a time).",
    )
    allow_mass_removal: bool = Field(
        False,
        description="Let removals exceed the share above (set it for one loop); each apply made with it "
        "starts the removal window afresh.",
    )

    # Single writer
    leader_election: bool = Field(
        True,
        description="Apply changes only while holding a coordination.k8s.io Lease, so that two replicas "
        "never write at once; a replica without it answers ApplyChanges with 503 naming the holder.",
    )
    lease_name: str = Field("landb-webhook", description="Name of the writer Lease.")
    lease_namespace: str | None = Field(
        None, description="Namespace of the writer Lease; unset means the ownership namespace."
    )
    lease_identity: str | None = Field(
        None, description="This replica's holderIdentity; unset means the pod name and a random suffix."
    )
    lease_duration: float = Field(
        15.0, gt=0, description="Seconds a Lease not renewed stays with its holder before another takes it."
    )
    lease_renew_deadline: float = Field(
        10.0, gt=0, description="Seconds the holder keeps writing without a successful renewal."
    )
    lease_retry_period: float = Field(2.0, gt=0, description="Seconds between acquire or renew attempts.")

    # Kubernetes Events
    events: bool = Field(
        True,
        description="`serve`: write Kubernetes Events (events.k8s.io/v1) on the Ingress or Service behind "
        "each name at each transition (written, refused and why, on the air, conflict, removed), off the "
        "request path, at most 10 a second after a burst of 100; a failure changes no webhook answer.",
    )

    # DNS watch
    dns_watch: bool = Field(
        True,
        description="Watch what DNS answers for every published name (pending, published, stale, "
        "conflict) in a thread of its own; it never changes a webhook answer.",
    )
    dns_resolvers: Annotated[list[str], NoDecode] = Field(
        [],
        description="Resolvers the DNS watch and `status` ask, separated by commas: `ip` or `ip:port` "
        "(an IPv6 address with a port in brackets); none means the system's (/etc/resolv.conf).",
    )
    dns_queries_per_second: float = Field(
        5.0, gt=0, le=50, description="Most DNS questions the watch asks in one second."
    )
    dns_recheck_period: float = Field(
        120.0,
        ge=10,
        description="Seconds between two questions about one name; a name written since its last "
        "question is asked first.",
    )
    landb_sync_period: float = Field(
        900.0,
        ge=60,
        description="Seconds between two LanDB publications into DNS: a name answered by something "
        "else for two of these after the write is in conflict.",
    )

    # Operation
    dry_run: bool = Field(False, description="Log every metadata write instead of doing it.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    log_format: Literal["json", "console"] = Field(
        "json", description="json for production, console for humans."
    )

    @field_validator("ingress_selector", "ingress_pod_selector")
    @classmethod
    def _selector_parses(cls, value: str, info: ValidationInfo) -> str:
        """Node selectors may be several (``;``); the pod one goes to the API server, which takes one."""
        parse = AnySelector.parse if info.field_name == "ingress_selector" else LabelSelector.parse
        try:
            parse(value)
        except InvalidSelector as exc:
            several = (
                "; several separated by ';' match when any does"
                if info.field_name == "ingress_selector"
                else ""
            )
            raise ValueError(f"{exc}; {SELECTOR_SYNTAX}{several}") from None
        return value

    @field_validator("txt_owner_id")
    @classmethod
    def _owner_id_reads_back(cls, value: str | None) -> str | None:
        return None if value is None else validate_owner_id(value)  # InvalidOwnerId is a ValueError

    @field_validator("name_policy")
    @classmethod
    def _name_policy_reads(cls, value: str) -> str:
        NamePolicy.parse(value)  # InvalidPolicy is a ValueError naming the wrong part
        return value

    @field_validator("reserved_names")
    @classmethod
    def _reserved_names_read(cls, value: str) -> str:
        NamePolicy.parse("", value)
        return value

    @field_validator("adopt_existing")
    @classmethod
    def _adoption_needs_claims(cls, value: bool, info: ValidationInfo) -> bool:
        registry = info.data.get("registry")  # absent when LANDB_REGISTRY was refused itself
        if value and (registry is None or not Registry.named(registry).has_owners):
            raise ValueError("adoption claims aliases with TXT records, so it needs registry txt")
        return value

    @property
    def external_dns_registry(self) -> Registry:
        """LANDB_REGISTRY as the value the provider asks (``provider/registry.py``)."""
        return Registry.named(self.registry)

    @model_validator(mode="after")
    def _lease_timings_are_ordered(self) -> Settings:
        if not self.lease_duration > self.lease_renew_deadline > 1.2 * self.lease_retry_period:
            raise ValueError(
                "--lease-duration (LANDB_LEASE_DURATION) must exceed --lease-renew-deadline, which must "
                "exceed 1.2 x --lease-retry-period"
            )
        if self.leader_election and not (
            self.lease_renew_deadline > self.upstream_timeout + 1.2 * self.lease_retry_period
        ):
            # A write is sent only while the lease surely lasts one upstream timeout more; with a
            # renewal every retry period, that must leave room or the holder never writes.
            raise ValueError(
                "--lease-renew-deadline (LANDB_LEASE_RENEW_DEADLINE) must exceed --upstream-timeout "
                "(LANDB_UPSTREAM_TIMEOUT) + 1.2 x --lease-retry-period: a write is sent only while the "
                "writer lease surely lasts one upstream timeout more"
            )
        return self

    @field_validator("dns_domain")
    @classmethod
    def _domain_is_lower_case(cls, value: str) -> str:
        value = value.strip(".").lower()
        for part in value.split("."):
            validate_label(part)
        return value

    @field_validator("takeover_names")
    @classmethod
    def _takeover_names_are_aliases(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """Each name one alias of the zone, as external-dns sends it (``app.cern.ch``); kept lower-case."""
        domain = info.data.get("dns_domain", "cern.ch")
        for name in value:
            try:
                label_for(name, domain)
            except InvalidName as error:
                raise ValueError(f"{error}; each name is <alias>.{domain}") from None
        return sorted({name.strip().rstrip(".").lower() for name in value})

    @field_validator("ingress_selector")
    @classmethod
    def _selector_selects_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("empty: it would make every node of the cluster carry every alias")
        return value

    @field_validator("exclude_label")
    @classmethod
    def _exclude_label_is_a_label_key(cls, value: str) -> str:
        if not is_valid_label_key(value):
            raise ValueError("not a Kubernetes label key")
        return value

    @field_validator("dns_resolvers")
    @classmethod
    def _resolvers_are_addresses(cls, value: list[str]) -> list[str]:
        for resolver in value:
            parse_resolver(resolver)  # InvalidResolver is a ValueError naming the bad one
        return value

    @field_validator(
        "domain_filter",
        "api_allowed_hosts",
        "dns_resolvers",
        "takeover_names",
        "shared_load_balancers",
        mode="before",
    )
    @classmethod
    def _split_comma_list(cls, value: object) -> object:
        """Accept ``a.ch,b.org`` (env and flags) and a JSON list, as pydantic-settings users expect."""
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                try:
                    return json.loads(value)
                except json.JSONDecodeError:
                    raise ValueError("neither a JSON list nor a comma-separated list") from None
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("domain_filter", "api_allowed_hosts")
    @classmethod
    def _suffixes_are_lower_case(cls, value: list[str]) -> list[str]:
        return [suffix.strip().strip(".").lower() for suffix in value if suffix.strip().strip(".")]


def setting_default(field: str) -> Any:
    """The default of one setting as Settings writes it, the one place a default is written: for code
    built without Settings at hand (a test's server) that takes a setting's value."""
    return Settings.model_fields[field].default


class InvalidResolver(ValueError):
    """A resolver address that is not ``ip``, ``ip:port`` or ``[ipv6]:port``."""


def parse_resolver(text: str) -> tuple[str, int]:
    """``192.0.2.1``, ``192.0.2.1:5353``, ``2001:db8::1``, ``[2001:db8::1]:5353`` -> (address, port)."""
    text = text.strip()
    address, port = text, DNS_PORT
    if text.startswith("["):
        address, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise InvalidResolver(f"{text!r}: an IPv6 address with a port is written [address]:port")
        port = _port(text, rest[1:]) if rest else DNS_PORT
    elif text.count(":") == 1:
        address, _, port_text = text.partition(":")
        port = _port(text, port_text)
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise InvalidResolver(f"{text!r}: not an IP address (a resolver is ip or ip:port)") from None
    return address, port


def _port(text: str, port: str) -> int:
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidResolver(f"{text!r}: the port must be a number from 1 to 65535")
    return int(port)


def unknown_variables(environment: Mapping[str, str]) -> list[str]:
    """``LANDB_*`` variables that set nothing (a typo would be silently ignored otherwise), each with a
    hint; the tooling's own names (:data:`NOT_SETTINGS`) are not counted.

    Names are compared in upper case, as the settings are read (pydantic-settings is case-insensitive:
    ``landb_dry_run`` sets LANDB_DRY_RUN), so ``landb_dryrun`` is refused as ``LANDB_DRYRUN`` is. The
    environment is the only source the settings read besides the flags (no dotenv, secrets or file)."""
    known = [field.upper() for field in Settings.model_fields]
    found = []
    for name in sorted(environment):
        upper = name.upper()
        suffix = upper.removeprefix(ENV_PREFIX)
        if upper.startswith(ENV_PREFIX) and suffix not in known and upper not in NOT_SETTINGS:
            close = difflib.get_close_matches(suffix, known, n=1, cutoff=0.8)
            found.append(f"{name} (did you mean {ENV_PREFIX}{close[0]}?)" if close else name)
    return found


def describe_unknown_variables(unknown: Sequence[str]) -> str:
    """Why start-up stops on what :func:`unknown_variables` found: a misspelled ``LANDB_DRY_RUN`` would
    otherwise leave the real writes on."""
    return (
        f"unknown environment variable{'s' if len(unknown) > 1 else ''} {'; '.join(unknown)}: no setting "
        f"has that name, so it would be ignored. Rename or unset it ('{PROG} serve --help' lists every "
        f"{ENV_PREFIX}* setting)."
    )
