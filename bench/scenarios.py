"""The scenario grid: cluster and project sizes, alias sets, and the events one loop reacts to."""

from __future__ import annotations

import random
from dataclasses import dataclass

CLUSTER = "paas-prod-ingress-2026"
"""A realistic Magnum cluster name: node names are ``<cluster>-<12 chars>-node-<i>`` (44-46 characters)."""

EVENTS = (
    "first publish",
    "settling loop",
    "steady state",
    "+1 alias",
    "-1 alias",
    "+1 ingress node",
    "-1 ingress node (middle)",
    "node relabelled out",
)


@dataclass(frozen=True)
class Config:
    """One cluster in one project: ``ingress`` ingress nodes plus as many workers, ``project`` servers
    in all (the cluster's included), ``aliases`` names published on every ingress node."""

    ingress: int
    project: int
    aliases: int

    @property
    def cluster_nodes(self) -> int:
        return 2 * self.ingress

    @property
    def title(self) -> str:
        nodes = f"{self.ingress} ingress / {self.cluster_nodes} nodes"
        return f"{nodes}, {self.project} servers, {self.aliases} aliases"


_SIZES = ((3, 50), (3, 5000), (30, 5000), (150, 5000))
"""(ingress nodes, project servers). 30 and 150 ingress nodes with as many workers do not fit in a
project of 50 servers, so those cells do not exist."""

FULL = tuple(Config(ingress, project, aliases) for ingress, project in _SIZES for aliases in (10, 300))
DEFAULT = (Config(3, 50, 10), Config(30, 5000, 300))
QUICK = (Config(3, 50, 10),)
HEADLINE = Config(150, 5000, 300)


_GROUPS = (
    "atlas", "cms", "lhcb", "alice", "it", "ep", "be", "hse", "fap", "sft", "cds", "edms", "indico",
    "gitlab", "twiki", "cernbox", "ams", "na62", "ntof", "isolde", "hr", "library", "openlab", "linac4",
)  # fmt: skip
_SERVICES = (
    "web", "api", "monitoring", "grafana", "dashboard", "portal", "docs", "registry", "status",
    "jupyter", "search", "auth", "builds", "kibana", "opensearch", "wiki", "runner", "proxy", "events",
    "db-admin", "alerts", "reports", "shifts", "calendar", "mattermost", "forms", "tickets", "mirror",
)  # fmt: skip
_SUFFIXES = ("", "", "", "-dev", "-qa", "-test", "-next", "2", "-staging", "-old")


def alias_names(count: int, *, seed: int = 9) -> list[str]:
    """``count`` distinct CERN-like alias labels of 5 to 30 characters, the same for the same seed."""
    rng = random.Random(seed)
    names: set[str] = set()
    while len(names) < count:
        name = f"{rng.choice(_GROUPS)}-{rng.choice(_SERVICES)}{rng.choice(_SUFFIXES)}"
        if rng.random() < 0.2:
            name = name.split("-", 1)[1]  # some names carry no group
        if 5 <= len(name) <= 30:
            names.add(name)
    return sorted(names)


def extra_alias(existing: list[str]) -> str:
    """The alias added by the "+1 alias" event: it sorts in the middle of the existing ones."""
    middle = sorted(existing)[len(existing) // 2]
    return f"{middle}-x"[:30]
