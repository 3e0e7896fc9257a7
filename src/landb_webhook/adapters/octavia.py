"""Octavia load balancers and their ``landb-alias=`` tags, through openstacksdk's load-balancer proxy.

Design choices, each forced by an Octavia fact (see /docs/reference.md and landb.loadbalancers):

- One list of the project's load balancers per read (``GET /v2/lbaas/loadbalancers?project_id=<the
  token's project>``, every page), plus, only when there is a load balancer, one list of the project's
  floating IPs (Neutron, filtered the same way): beside the first, at the same time, when the last read
  found a load balancer (one round trip, not two), else after it. Without the filter an admin's (or global
  reader's) token lists every project's, and a name targeting another project's VIP would be tagged on
  *their* load balancer; a tag write also checks the project of the load balancer it reads before its
  PUT. Tags cannot be filtered by prefix (``tags-any`` matches whole tags), so seeing which load
  balancers carry a ``landb-alias=`` tag takes the list anyway; the same list gives every VIP, so routing
  an endpoint by its target costs no call of its own (a ``vip_address`` filter would cost one per
  address).
- A tag write is a GET of the load balancer then a PUT of its whole tag list (Octavia has no tag
  sub-resource and replaces the list): the read is as fresh as it can be, and every other tag is
  written back as read. A PUT that would change nothing is not sent.
- Every request goes through the service proxies (keystoneauth's authentication, endpoint discovery and
  retries) as plain JSON: the requests openstacksdk's ``load_balancers``, ``ips``, ``get_load_balancer``
  and ``update_load_balancer`` send, pages followed as it follows them, without a resource built from each
  item (milliseconds of CPU per list). Failures are mapped as the SDK maps them (``raise_from_response``).
- Every PUT puts the load balancer in ``PENDING_UPDATE``; meanwhile a PUT answers 409. The GET and PUT
  run as one operation under adapters.retry's policy (409: a bounded number of retries), so each retry
  reads the tags afresh after another writer's update.
- Calls run on the OpenStack session the Nova adapter shares (adapters.openstack: one Keystone token, one
  connection, the same deadline, metrics and failure accounting); their errors name ``octavia`` (or
  ``neutron``).
- A cloud without a load-balancer service has no load balancers: its catalog lists none, or the API it
  lists answers 404 (no Octavia behind it; a real Nova-only cloud does). That is not an outage: said
  once, with ``absent_hint`` (the setting that says so), and the lists answer no load balancer, asked
  afresh each time so an Octavia deployed later is seen. Once Octavia has answered a list in this process,
  a 404 is an outage like any other failure (503). A cloud without a network service has no floating IPs
  (said once).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import Any

import openstack.connection
import openstack.exceptions as sdk_exceptions
import structlog

from landb_webhook.adapters.openstack import OpenStackSession, check_own, own_project
from landb_webhook.adapters.openstack_json import json_list, json_member
from landb_webhook.backends import LoadBalancer
from landb_webhook.landb.loadbalancers import tags_after

log = structlog.get_logger(__name__)

OCTAVIA = "octavia"
NEUTRON = "neutron"

_NOT_IN_CATALOG = (sdk_exceptions.EndpointNotFound, sdk_exceptions.ServiceDisabledException)

UNKNOWN = "unknown"
PRESENT = "present"
ABSENT = "absent"
SERVICE_STATES = (UNKNOWN, PRESENT, ABSENT)
"""What :meth:`OctaviaLoadBalancers.service` says of the load-balancer service: not asked yet, it answered
a list, it is not in this cloud."""
_LOAD_BALANCER_ID = re.compile(r"[A-Za-z0-9\-]{1,64}")


class OctaviaLoadBalancers:
    """ports.LoadBalancerStore backed by Octavia (and Neutron for floating IPs); safe to share between
    threads."""

    def __init__(self, session: OpenStackSession, *, absent_hint: str = "") -> None:
        """``session``: the OpenStack session whose connection, retries and metrics are used;
        ``absent_hint``: what to change when this cloud has no load-balancer service, said with it."""
        self._session = session
        self._absent_hint = absent_hint
        self._said_missing: set[str] = set()
        self._expect_ports = False
        """The last read found a load balancer with a VIP port: list the floating IPs beside the next."""
        self._service = UNKNOWN
        self._absent_because = ""

    def service(self) -> tuple[str, str]:
        """The load-balancer service as the last list found it (SERVICE_STATES), and why it is absent."""
        return self._service, self._absent_because

    def load_balancers(self) -> Sequence[LoadBalancer]:
        with ThreadPoolExecutor(1, thread_name_prefix="landb-neutron-read") as pool:
            beside = pool.submit(copy_context().run, self._list_floating_ips) if self._expect_ports else None
            found = self._session.call(
                "list load balancers", self._list_load_balancers, api="list_load_balancers", upstream=OCTAVIA
            )
            ports = {port_id for _, port_id in found if port_id}
            self._expect_ports = bool(ports)
            if not ports:
                floating: dict[str, list[str]] = {}
            elif beside is not None:
                floating = beside.result()
            else:
                floating = self._list_floating_ips()
        if not found:
            return []
        return [
            LoadBalancer(
                id=lb.id,
                name=lb.name,
                vip_address=lb.vip_address,
                floating_ips=tuple(sorted(floating.get(port_id or "", ()))),
                tags=lb.tags,
                description=lb.description,
            )
            for lb, port_id in found
        ]

    def update_tags(self, load_balancer_id: str, add: Sequence[str], remove: Sequence[str]) -> None:
        if not _LOAD_BALANCER_ID.fullmatch(load_balancer_id):
            raise ValueError(f"{load_balancer_id!r} is not a load balancer id")

        path = f"lbaas/loadbalancers/{load_balancer_id}"

        def read_and_write(conn: openstack.connection.Connection) -> None:
            # Plain JSON through the load-balancer proxy: the same GET and PUT as the SDK's
            # get_load_balancer and update_load_balancer, without building a resource from each reply.
            response = conn.load_balancer.get(path)
            sdk_exceptions.raise_from_response(response)
            current = json_member(response, "loadbalancer")
            check_own(conn, "load balancer", load_balancer_id, current.get("project_id"))
            tags = [str(tag) for tag in current.get("tags") or ()]
            wanted = tags_after(tags, add, remove)
            if sorted(set(wanted)) == sorted(set(tags)):
                return
            body = {"loadbalancer": {"tags": wanted}}
            sdk_exceptions.raise_from_response(conn.load_balancer.put(path, json=body))

        self._session.call(
            f"set tags of load balancer {load_balancer_id}",
            read_and_write,
            api="set_load_balancer_tags",
            upstream=OCTAVIA,
        )

    def _list_load_balancers(
        self, conn: openstack.connection.Connection
    ) -> list[tuple[LoadBalancer, str | None]]:
        try:
            found = json_list(
                conn.load_balancer.get,
                "/lbaas/loadbalancers",
                "loadbalancers",
                {"project_id": own_project(conn)},
            )
        except _NOT_IN_CATALOG:
            return self._absent("not in the OpenStack catalog")
        except sdk_exceptions.NotFoundException:
            if self._service == PRESENT:
                raise  # it answered before: an outage, not an absence
            return self._absent("the load-balancer API of the catalog answers 404")
        self._service = PRESENT
        return [(_value_of(lb), _text_or_none(lb.get("vip_port_id"))) for lb in found]

    def _absent(self, why: str) -> list[tuple[LoadBalancer, str | None]]:
        """No load-balancer service: no load balancer, said once per process."""
        self._service, self._absent_because = ABSENT, why
        if "load-balancer" not in self._said_missing:
            self._said_missing.add("load-balancer")
            log.warning(
                "this cloud has no load-balancer service: running without load balancers, only ingress "
                "nodes carry names",
                why=why,
                **({"hint": self._absent_hint} if self._absent_hint else {}),
            )
        return []

    def _list_floating_ips(self) -> dict[str, list[str]]:
        return self._session.call(
            "list floating IPs", self._floating_ips, api="list_floating_ips", upstream=NEUTRON
        )

    def _floating_ips(self, conn: openstack.connection.Connection) -> dict[str, list[str]]:
        """Port id -> floating addresses, for the project's floating IPs bound to a port (a load
        balancer's VIP port is looked up in it)."""
        try:
            found = json_list(
                conn.network.get, "/floatingips", "floatingips", {"project_id": own_project(conn)}
            )
        except _NOT_IN_CATALOG:
            self._say_missing("network", "floating IPs of load balancers are not seen")
            return {}
        floating: dict[str, list[str]] = {}
        for ip in found:
            port_id, address = ip.get("port_id"), ip.get("floating_ip_address")
            if port_id and address:
                floating.setdefault(str(port_id), []).append(str(address))
        return floating

    def _say_missing(self, service: str, consequence: str) -> None:
        if service not in self._said_missing:
            self._said_missing.add(service)
            log.warning(f"no {service} service in the OpenStack catalog: {consequence}")


def _value_of(item: Mapping[str, Any]) -> LoadBalancer:
    lb_id = item.get("id")
    if not lb_id:
        raise sdk_exceptions.InvalidResponse("a load balancer without an id in the list")
    return LoadBalancer(
        id=str(lb_id),
        name=str(item.get("name") or ""),
        vip_address=str(item.get("vip_address") or ""),
        tags=tuple(str(tag) for tag in item.get("tags") or ()),
        description=str(item.get("description") or ""),
    )


def _text_or_none(value: object) -> str | None:
    return str(value) if value else None
