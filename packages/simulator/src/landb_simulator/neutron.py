"""A minimal Neutron v2.0, under ``/network``: floating IPs, read-only, so a floating IP can be traced to the
VIP port of a load balancer (``floatingips?floating_ip_address=X`` gives its ``port_id``).

As Neutron does: the caller's project only (every project for an admin), exact-match filters where a
repeated filter means any of its values, ``fields`` to trim the reply, and a 400 for a filter Neutron does
not know.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from landb_simulator.identity import Token
from landb_simulator.keystone import base_url
from landb_simulator.octavia import token_endpoint
from landb_simulator.octavia_store import FloatingIpInfo, OctaviaError
from landb_simulator.state import SimulatorState

PREFIX = "/network"
_FILTERS = (
    "id",
    "floating_ip_address",
    "port_id",
    "fixed_ip_address",
    "project_id",
    "tenant_id",
    "status",
    "floating_network_id",
    "router_id",
    "description",
)
_TYPES = {400: "HTTPBadRequest", 403: "HTTPForbidden", 404: "HTTPNotFound"}


def neutron_error(status: int, message: str) -> JSONResponse:
    body = {"NeutronError": {"type": _TYPES.get(status, "HTTPError"), "message": message, "detail": ""}}
    return JSONResponse(body, status_code=status)


def render_floating_ip(fip: FloatingIpInfo) -> dict[str, Any]:
    return {
        "id": fip.id,
        "floating_ip_address": fip.floating_ip_address,
        "floating_network_id": fip.floating_network_id,
        "router_id": None,
        "port_id": fip.port_id,
        "fixed_ip_address": fip.fixed_ip_address,
        "status": fip.status,
        "project_id": fip.project_id,
        "tenant_id": fip.project_id,
        "description": "",
        "dns_domain": "",
        "dns_name": "",
        "port_details": None,
        "qos_policy_id": None,
        "tags": [],
        "revision_number": 0,
    }


def _trimmed(body: dict[str, Any], request: Request) -> dict[str, Any]:
    fields = request.query_params.getlist("fields")
    return {key: value for key, value in body.items() if key in fields} if fields else body


class NeutronApi:
    def __init__(self, state: SimulatorState) -> None:
        self.state = state

    def routes(self) -> list[BaseRoute]:
        return [
            Route(PREFIX, self.versions, methods=["GET"]),
            Route(PREFIX + "/", self.versions, methods=["GET"]),
            Route(PREFIX + "/v2.0/floatingips", self._endpoint(self.list_floating_ips), methods=["GET"]),
            Route(
                PREFIX + "/v2.0/floatingips/{floating_ip_id}",
                self._endpoint(self.show_floating_ip),
                methods=["GET"],
            ),
        ]

    def _endpoint(
        self, handler: Callable[[Request, Token], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        return token_endpoint(self.state, handler, neutron_error)

    async def versions(self, request: Request) -> Response:
        link = [{"rel": "self", "href": f"{base_url(request)}{PREFIX}/v2.0/"}]
        return JSONResponse({"versions": [{"id": "v2.0", "status": "CURRENT", "links": link}]})

    def _select(self, token: Token, wanted: dict[str, set[str]]) -> list[FloatingIpInfo]:
        return [
            fip
            for fip in self.state.octavia.visible_floating_ips(token)
            if all(str(render_floating_ip(fip)[key]) in values for key, values in wanted.items())
        ]

    async def list_floating_ips(self, request: Request, token: Token) -> Response:
        wanted: dict[str, set[str]] = {}
        for name, value in request.query_params.multi_items():
            if name == "fields":
                continue
            if name not in _FILTERS:
                raise OctaviaError(400, f"[{name}] is invalid attribute for filtering")
            wanted.setdefault(name, set()).add(value)
        selected = self._select(token, wanted)
        return JSONResponse({"floatingips": [_trimmed(render_floating_ip(fip), request) for fip in selected]})

    async def show_floating_ip(self, request: Request, token: Token) -> Response:
        fip_id = request.path_params["floating_ip_id"]
        found = self._select(token, {"id": {fip_id}})
        if not found:
            raise OctaviaError(404, f"Floating IP {fip_id} could not be found.")
        return JSONResponse({"floatingip": _trimmed(render_floating_ip(found[0]), request)})
