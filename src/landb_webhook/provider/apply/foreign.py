"""ApplyChanges' side of rule 3 of provider.ownership.tenancy: no tag write on another team's load balancer.

AdjustEndpoints already takes another namespace's load balancer out of a name's targets, so external-dns
plans none; a change set that names one anyway (sent by another client, or planned from an older answer)
is refused for that name: no tag written, the name left where it is, said like every refusal (metric
``foreign_load_balancer``, one log line, a ``Refused`` event on the objects asking).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.provider.apply.loadbalancers import LoadBalancers
from landb_webhook.provider.context import ALIAS_RECORD_TYPES, Context
from landb_webhook.provider.ownership.tenancy import may_publish_on
from landb_webhook.provider.read.txt_registry import RESOURCE_LABEL, is_ownership_record, owner_resources
from landb_webhook.provider.refusals import Refusals


def foreign_homes(
    context: Context,
    changes: Changes,
    homes: Mapping[str, frozenset[str]],
    lbs: LoadBalancers,
    claim_records: Sequence[Endpoint],
    *,
    refusals: Refusals,
) -> set[str]:
    """The aliases routed to a load balancer (``homes``) their asker may not publish on, refused: the
    owner's namespace when the name is owned (its claim before this apply), else the asker's."""
    owners = owner_resources(claim_records)
    shared = context.options.shared_load_balancers
    refused: set[str] = set()
    wanted: Iterable[Endpoint] = (*changes.create, *changes.update_new)
    for endpoint in wanted:
        if is_ownership_record(endpoint) or endpoint.record_type.upper() not in ALIAS_RECORD_TYPES:
            continue
        label = context.label_or_none(endpoint.dns_name)
        if label is None or label not in homes:
            continue
        owner = owners.get(context.dns_name(label))
        may = may_publish_on(shared, endpoint.label(RESOURCE_LABEL), owner)
        if foreign := [lb for lb in lbs.of(homes[label]) if not may(lb)]:
            names = lbs.named(lb.id for lb in foreign)
            refused.add(label)
            why = f"load balancer {', '.join(names)} is another namespace's" + (
                f"; the name is owned by {owner}" if owner else ""
            )
            refusals.refuse(label, "foreign_load_balancer", why)
            refusals.say(
                "change refused: a load balancer of another namespace, no tag is written",
                alias=label,
                resource=endpoint.label(RESOURCE_LABEL) or "",
                load_balancers=names,
                hint="list it in LANDB_SHARED_LOAD_BALANCERS if every namespace may use it",
            )
    return refused
