"""Octavia's load-balancer API v2 over HTTP, under ``/load-balancer``: load balancers and their tags.

What openstacksdk's load-balancer proxy and python-octaviaclient (``openstack loadbalancer ...``) use, with
Octavia's contracts: the version document they negotiate with, both ``/v2`` and ``/v2.0`` paths, list
filters (exact matches; ``tags``, ``tags-any``, ``not-tags``, ``not-tags-any``; an unknown or repeated
filter is a 400), ``limit``/``marker`` pages with ``loadbalancers_links``, ``PUT`` that replaces the tag
list and answers 409 while the load balancer is ``PENDING_*``, and the ``faultstring`` error body.
Creating load balancers through the API is not simulated: tests create them (``state.octavia``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from itertools import chain
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from landb_simulator.identity import Token
from landb_simulator.keystone import base_url
from landb_simulator.nova import unauthorized
from landb_simulator.octavia_store import (
    MAX_NAME_LENGTH,
    MAX_TAG_LENGTH,
    TAG_FILTERS,
    LoadBalancerInfo,
    LoadBalancerQuery,
    OctaviaError,
    filterable_fields,
)
from landb_simulator.state import SimulatorState

PREFIX = "/load-balancer"
MAX_PAGE = 1000
"""Octavia's ``[api_settings] pagination_max_limit`` default."""
_PAGING = ("limit", "marker", "sort", "sort_key", "sort_dir", "fields", "page_reverse")
_UPDATABLE = ("name", "description", "admin_state_up", "tags")
_NOT_SIMULATED = ("vip_qos_policy_id", "vip_sg_ids")
_INVALID_FILTER = "One or more arguments are either duplicate or invalid"

# (minor version, date) of every v2 minor version Octavia lists; the last one is CURRENT.
_MINOR_VERSIONS = (
    (0, "2016-12-11"),
    (1, "2018-04-20"),
    (2, "2018-07-31"),
    (3, "2018-12-18"),
    (4, "2018-12-19"),
    (5, "2019-01-21"),
    (6, "2019-01-25"),
    (7, "2018-01-25"),
    (8, "2019-02-12"),
    (9, "2019-03-04"),
    (10, "2019-03-05"),
    (11, "2019-06-24"),
    (12, "2019-09-11"),
    (13, "2019-09-13"),
    (14, "2019-11-10"),
    (15, "2020-03-10"),
    (16, "2020-03-15"),
    (17, "2020-04-29"),
    (18, "2020-04-29"),
    (19, "2020-05-12"),
    (20, "2020-08-02"),
    (21, "2020-09-03"),
    (22, "2020-09-04"),
    (23, "2020-09-07"),
    (24, "2020-10-15"),
    (25, "2021-10-02"),
    (26, "2022-08-29"),
    (27, "2023-05-05"),
    (28, "2023-11-08"),
    (29, "2024-10-15"),
    (30, "2025-02-26"),
)


def octavia_error(status: int, message: str) -> JSONResponse:
    """The body Octavia's API (wsme) sends with every fault."""
    body = {"faultcode": "Server" if status >= 500 else "Client", "faultstring": message, "debuginfo": None}
    return JSONResponse(body, status_code=status)


def version_documents(root: str) -> dict[str, Any]:
    """``GET /``: every v2 minor version, all served at ``/v2``, as Octavia lists them."""
    last = _MINOR_VERSIONS[-1][0]
    return {
        "versions": [
            {
                "id": f"v2.{minor}",
                "status": "CURRENT" if minor == last else "SUPPORTED",
                "updated": f"{date}T00:00:00Z",
                "links": [{"href": f"{root}{PREFIX}/v2", "rel": "self"}],
            }
            for minor, date in _MINOR_VERSIONS
        ]
    }


def render_load_balancer(lb: LoadBalancerInfo) -> dict[str, Any]:
    return {
        "id": lb.id,
        "name": lb.name,
        "description": lb.description,
        "provisioning_status": lb.provisioning_status,
        "operating_status": lb.operating_status,
        "admin_state_up": lb.admin_state_up,
        "project_id": lb.project_id,
        "created_at": lb.created_at,
        "updated_at": lb.updated_at,
        "vip_address": lb.vip_address,
        "vip_port_id": lb.vip_port_id,
        "vip_subnet_id": lb.vip_subnet_id,
        "vip_network_id": lb.vip_network_id,
        "vip_qos_policy_id": None,
        "vip_sg_ids": [],
        "vip_vnic_type": "normal",
        "additional_vips": [],
        "listeners": [],
        "pools": [],
        "provider": lb.provider,
        "flavor_id": lb.flavor_id,
        "availability_zone": lb.availability_zone,
        "tags": list(lb.tags),
    }


def parse_query(items: list[tuple[str, str]]) -> tuple[LoadBalancerQuery, str | None]:
    """The filters of a list request, and the ``project_id`` it names; 400 for an unknown or repeated one.

    Tag filters may repeat and hold comma-separated lists (``tags=a,b&tags=c`` asks for all three).
    """
    known = filterable_fields()
    singles: dict[str, str] = {}
    tags: dict[str, set[str]] = {name: set() for name in TAG_FILTERS}
    for name, value in items:
        if name in _PAGING:
            continue
        if name in TAG_FILTERS:
            tags[name].update(value.split(","))
        elif name in known and name not in singles:
            singles[name] = value
        else:
            raise OctaviaError(400, _INVALID_FILTER)
    project_id = singles.pop("project_id", None)
    admin_state_up = singles.pop("admin_state_up", None)
    query = LoadBalancerQuery(
        equals=singles,
        admin_state_up=None if admin_state_up is None else admin_state_up.lower() in ("true", "1", "yes"),
        tags=frozenset(tags["tags"]),
        tags_any=frozenset(tags["tags-any"]),
        not_tags=frozenset(tags["not-tags"]),
        not_tags_any=frozenset(tags["not-tags-any"]),
    )
    return query, project_id


def _page_limit(raw: str | None) -> int | None:
    """Octavia's limit: at most MAX_PAGE; below 1 (or ``infinite``) means no limit."""
    if raw is None:
        return MAX_PAGE
    if raw == "infinite":
        return None
    try:
        limit = int(raw)
    except ValueError:
        raise OctaviaError(400, f"Supplied pagination limit '{raw}' is not valid.") from None
    return None if limit < 1 else min(limit, MAX_PAGE)


def _sort_key(lb: LoadBalancerInfo) -> tuple[str, str]:
    return lb.created_at, lb.id


def _field_selection(request: Request) -> list[str] | None:
    fields = list(chain.from_iterable(value.split(",") for value in request.query_params.getlist("fields")))
    return fields or None


def _only(body: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    return body if fields is None else {key: value for key, value in body.items() if key in fields}


def validated_update(body: object) -> dict[str, object]:
    """The ``loadbalancer`` member of a PUT body, checked as Octavia's schema checks it (400 otherwise)."""
    if not isinstance(body, dict) or not isinstance(body.get("loadbalancer"), dict):
        raise OctaviaError(400, 'Missing argument: "load_balancer"')
    changes: dict[str, object] = body["loadbalancer"]
    unknown = sorted(set(changes) - set(_UPDATABLE) - set(_NOT_SIMULATED))
    if unknown:
        raise OctaviaError(400, f"Unknown attribute for argument load_balancer: {', '.join(unknown)}")
    not_simulated = sorted(set(changes) & set(_NOT_SIMULATED))
    if not_simulated:
        raise OctaviaError(400, f"Updating {', '.join(not_simulated)} is not simulated.")
    for name in ("name", "description"):
        value = changes.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_NAME_LENGTH):
            raise OctaviaError(
                400, _invalid(name, value, f"a string of at most {MAX_NAME_LENGTH} characters")
            )
    if "admin_state_up" in changes and not isinstance(changes["admin_state_up"], bool):
        raise OctaviaError(400, _invalid("admin_state_up", changes["admin_state_up"], "a boolean"))
    tags = changes.get("tags")
    if tags is not None:
        if not isinstance(tags, list):
            raise OctaviaError(400, _invalid("tags", tags, "a list of strings"))
        for tag in tags:
            if not isinstance(tag, str) or len(tag) > MAX_TAG_LENGTH:
                raise OctaviaError(
                    400, _invalid("tags", tags, f"strings of at most {MAX_TAG_LENGTH} characters")
                )
    return changes


def _invalid(name: str, value: object, expected: str) -> str:
    return f"Invalid input for field/attribute {name}. Value: '{value}'. Value should be {expected}"


Handler = Callable[[Request, Token], Awaitable[Response]]


def token_endpoint(
    state: SimulatorState, handler: Handler, render_error: Callable[[int, str], Response]
) -> Callable[[Request], Awaitable[Response]]:
    """Authenticate as keystonemiddleware does in front of Octavia and Neutron (401 without a live
    token), and render an OctaviaError with the API's own error body."""

    async def wrapped(request: Request) -> Response:
        token = state.identity.validate(request.headers.get("X-Auth-Token"))
        if token is None:
            return unauthorized()
        try:
            return await handler(request, token)
        except OctaviaError as fault:
            return render_error(fault.status, fault.message)

    return wrapped


class OctaviaApi:
    def __init__(self, state: SimulatorState) -> None:
        self.state = state
        self.store = state.octavia

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route(PREFIX, self.versions, methods=["GET"]),
            Route(PREFIX + "/", self.versions, methods=["GET"]),
        ]
        for version in ("v2", "v2.0"):  # Octavia serves both; the CLI appends /v2.0, the SDK discovers /v2
            base = f"{PREFIX}/{version}"
            collection = base + "/lbaas/loadbalancers"
            item = collection + "/{load_balancer_id}"
            routes += [
                Route(base, self.version_name, methods=["GET"]),
                Route(base + "/", self.version_name, methods=["GET"]),
                Route(collection, self._endpoint(self.list_load_balancers), methods=["GET"]),
                Route(item, self._endpoint(self.show_load_balancer), methods=["GET"]),
                Route(item, self._endpoint(self.update_load_balancer), methods=["PUT"]),
                Route(item, self._endpoint(self.delete_load_balancer), methods=["DELETE"]),
            ]
        return routes

    def _endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return token_endpoint(self.state, handler, octavia_error)

    async def versions(self, request: Request) -> Response:
        return JSONResponse(version_documents(base_url(request)))

    async def version_name(self, request: Request) -> Response:
        return JSONResponse("v2")

    async def list_load_balancers(self, request: Request, token: Token) -> Response:
        query, project_id = parse_query(request.query_params.multi_items())
        limit = _page_limit(request.query_params.get("limit"))
        marker = request.query_params.get("marker")
        selected = sorted(self.store.select(token, query, project_id), key=_sort_key)
        if marker is not None:
            ids = [lb.id for lb in selected]
            if marker not in ids:
                raise OctaviaError(400, f"Supplied pagination marker '{marker}' is not valid.")
            selected = selected[ids.index(marker) + 1 :]
        page = selected if limit is None else selected[:limit]
        fields = _field_selection(request)
        return JSONResponse(
            {
                "loadbalancers": [_only(render_load_balancer(lb), fields) for lb in page],
                "loadbalancers_links": self._links(request, page, limit, marker),
            }
        )

    @staticmethod
    def _links(
        request: Request, page: list[LoadBalancerInfo], limit: int | None, marker: str | None
    ) -> list[dict[str, str]]:
        """Octavia's page links: ``next`` whenever the page is full. Like Octavia's, they keep only the
        limit and the sort of the request, not its filters."""
        if not page:
            return []
        path = f"{base_url(request)}{request.url.path}"
        kept = [f"limit={limit}"] + [
            f"{name}={request.query_params[name]}"
            for name in ("sort", "sort_key")
            if name in request.query_params
        ]
        links = []
        if marker:
            links.append(
                {
                    "rel": "previous",
                    "href": f"{path}?{'&'.join([*kept, f'marker={page[0].id}', 'page_reverse=True'])}",
                }
            )
        if limit is None or len(page) >= limit:
            links.append({"rel": "next", "href": f"{path}?{'&'.join([*kept, f'marker={page[-1].id}'])}"})
        return links

    async def show_load_balancer(self, request: Request, token: Token) -> Response:
        lb = self.store.show(token, request.path_params["load_balancer_id"])
        return JSONResponse({"loadbalancer": _only(render_load_balancer(lb), _field_selection(request))})

    async def update_load_balancer(self, request: Request, token: Token) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise OctaviaError(400, "Invalid JSON in the request body") from None
        changes = validated_update(body)
        lb = self.store.update(token, request.path_params["load_balancer_id"], changes)
        return JSONResponse({"loadbalancer": render_load_balancer(lb)})

    async def delete_load_balancer(self, request: Request, token: Token) -> Response:
        self.store.delete(token, request.path_params["load_balancer_id"])
        return Response(status_code=204)
