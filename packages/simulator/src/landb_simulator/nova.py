"""Nova compute API v2.1 over HTTP, under ``/compute``: servers, their metadata, limits, flavors.

Only what the webhook and the openstack CLI touch, but with Nova's contracts: microversion negotiation,
the non-admin filter rules of ``GET /servers`` (an unanchored regex on ``name``, silently dropped ``uuid``
and ``metadata`` filters), marker pagination with ``servers_links``, and the metadata schema. Projects as
Nova keeps them: a list shows the token's project only, whatever its roles, unless an admin asks with
``all_tenants`` (then every project's, or the one ``project_id`` names); an admin reads and writes any
project's server by id, anyone else gets 404 for another project's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from landb_simulator.identity import Token
from landb_simulator.keystone import base_url
from landb_simulator.manifests import FLAVOR_NAME
from landb_simulator.state import NovaError, ServerInfo, SimulatorState

MIN_VERSION = (2, 1)
MAX_VERSION = (2, 96)
MAX_LIMIT = 1000
FLAVOR_ID = "8ab8d4b9-5e04-4d1e-9a0a-0e9b0c4d5e61"
NETWORK_NAME = "CERN_NETWORK"

Microversion = tuple[int, int]

FAULT_NAMES = {
    400: "badRequest",
    401: "unauthorized",
    403: "forbidden",
    404: "itemNotFound",
    405: "badMethod",
    409: "conflictingRequest",
    413: "overLimit",
    415: "badMediaType",
    429: "overLimit",
    501: "notImplemented",
    503: "serviceUnavailable",
}

_METADATA_KEY = re.compile(r"[a-zA-Z0-9-_:. ]{1,255}")
_MAX_VALUE_LENGTH = 255

# status shown for (vm_state, task_state); Nova's _STATE_MAP, reduced to the states the simulator sets.
_STATUS_BY_VM_STATE = {
    "active": "ACTIVE",
    "building": "BUILD",
    "stopped": "SHUTOFF",
    "resized": "VERIFY_RESIZE",
    "paused": "PAUSED",
    "suspended": "SUSPENDED",
    "rescued": "RESCUE",
    "error": "ERROR",
    "deleted": "DELETED",
    "soft-delete": "SOFT_DELETED",
    "shelved": "SHELVED",
    "shelved_offloaded": "SHELVED_OFFLOADED",
}
_STATUS_BY_TASK_STATE = {
    "rebooting": "REBOOT",
    "reboot_pending": "REBOOT",
    "reboot_started": "REBOOT",
    "rebooting_hard": "HARD_REBOOT",
    "reboot_pending_hard": "HARD_REBOOT",
    "reboot_started_hard": "HARD_REBOOT",
    "rebuilding": "REBUILD",
    "rebuild_block_device_mapping": "REBUILD",
    "rebuild_spawning": "REBUILD",
    "migrating": "MIGRATING",
    "resize_prep": "RESIZE",
    "resize_migrating": "RESIZE",
    "resize_migrated": "RESIZE",
    "resize_finish": "RESIZE",
    "updating_password": "PASSWORD",
}
_POWER_STATE = {"active": 1, "paused": 3, "suspended": 7, "stopped": 4, "shelved": 4, "shelved_offloaded": 4}
KNOWN_STATUSES = frozenset(_STATUS_BY_VM_STATE.values()) | frozenset(_STATUS_BY_TASK_STATE.values())


def server_status(vm_state: str, task_state: str | None) -> str:
    if vm_state in ("active", "stopped") and task_state in _STATUS_BY_TASK_STATE:
        return _STATUS_BY_TASK_STATE[task_state]
    return _STATUS_BY_VM_STATE.get(vm_state, "UNKNOWN")


def nova_error(
    status: int, message: str, kind: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    kind = kind or FAULT_NAMES.get(status, "computeFault")
    return JSONResponse({kind: {"code": status, "message": message}}, status_code=status, headers=headers)


def unauthorized() -> JSONResponse:
    """What keystonemiddleware answers in front of Nova for a missing, unknown or expired token."""
    body = {
        "error": {
            "code": 401,
            "title": "Unauthorized",
            "message": "The request you have made requires authentication.",
        }
    }
    return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": 'Keystone uri="/identity"'})


def _format(version: Microversion) -> str:
    return f"{version[0]}.{version[1]}"


def requested_microversion(request: Request) -> Microversion:
    """The version asked for in OpenStack-API-Version or X-OpenStack-Nova-API-Version (2.1 if none)."""
    wanted: str | None = None
    header = request.headers.get("OpenStack-API-Version")
    if header:
        for part in header.split(","):
            service, _, value = part.strip().partition(" ")
            if service.lower() == "compute":
                wanted = value.strip()
    if wanted is None:
        wanted = request.headers.get("X-OpenStack-Nova-API-Version")
    if not wanted:
        return MIN_VERSION
    if wanted.lower() == "latest":
        return MAX_VERSION
    match = re.fullmatch(r"(\d+)\.(\d+)", wanted)
    if match is None:
        raise NovaError(
            400,
            "badRequest",
            f"API Version String {wanted} is of invalid format. Must be of format MajorNum.MinorNum.",
        )
    version = (int(match[1]), int(match[2]))
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise NovaError(
            406,
            "computeFault",
            f"Version {wanted} is not supported by the API. "
            f"Minimum is {_format(MIN_VERSION)} and maximum is {_format(MAX_VERSION)}.",
        )
    return version


def _version_document(root: str, *, current: bool) -> dict[str, Any]:
    if current:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": _format(MAX_VERSION),
            "min_version": _format(MIN_VERSION),
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"{root}/compute/v2.1/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}
            ],
        }
    return {
        "id": "v2.0",
        "status": "SUPPORTED",
        "version": "",
        "min_version": "",
        "updated": "2011-01-21T11:33:21Z",
        "links": [{"rel": "self", "href": f"{root}/compute/v2/"}],
    }


def _flavor(root: str, version: Microversion) -> dict[str, Any]:
    if version >= (2, 47):
        return {
            "vcpus": 4,
            "ram": 7680,
            "disk": 40,
            "ephemeral": 0,
            "swap": 0,
            "original_name": FLAVOR_NAME,
            "extra_specs": {},
        }
    return {"id": FLAVOR_ID, "links": [{"rel": "bookmark", "href": f"{root}/compute/flavors/{FLAVOR_ID}"}]}


def _flavor_resource(root: str) -> dict[str, Any]:
    return {
        "id": FLAVOR_ID,
        "name": FLAVOR_NAME,
        "vcpus": 4,
        "ram": 7680,
        "disk": 40,
        "swap": 0,
        "OS-FLV-EXT-DATA:ephemeral": 0,
        "OS-FLV-DISABLED:disabled": False,
        "os-flavor-access:is_public": True,
        "rxtx_factor": 1.0,
        "description": None,
        "links": [{"rel": "self", "href": f"{root}/compute/v2.1/flavors/{FLAVOR_ID}"}],
    }


def _server_links(root: str, server_id: str) -> list[dict[str, str]]:
    return [
        {"rel": "self", "href": f"{root}/compute/v2.1/servers/{server_id}"},
        {"rel": "bookmark", "href": f"{root}/compute/servers/{server_id}"},
    ]


def render_server(server: ServerInfo, root: str, version: Microversion) -> dict[str, Any]:
    addresses: dict[str, list[dict[str, Any]]] = {}
    if server.ip:
        mac = "fa:16:3e:" + ":".join(server.id.replace("-", "")[i : i + 2] for i in (0, 2, 4))
        addresses[NETWORK_NAME] = [
            {
                "version": 6 if ":" in server.ip else 4,
                "addr": server.ip,
                "OS-EXT-IPS:type": "fixed",
                "OS-EXT-IPS-MAC:mac_addr": mac,
            }
        ]
    body: dict[str, Any] = {
        "id": server.id,
        "name": server.name,
        "status": server_status(server.vm_state, server.task_state),
        "tenant_id": server.project_id,
        "user_id": server.user_id,
        "metadata": dict(server.metadata),
        "hostId": server.host_id,
        "image": {
            "id": server.image_id,
            "links": [{"rel": "bookmark", "href": f"{root}/compute/images/{server.image_id}"}],
        },
        "flavor": _flavor(root, version),
        "created": server.created,
        "updated": server.updated,
        "addresses": addresses,
        "accessIPv4": "",
        "accessIPv6": "",
        "links": _server_links(root, server.id),
        "OS-DCF:diskConfig": "MANUAL",
        "progress": 0,
        "OS-EXT-AZ:availability_zone": "cern-geneva-a",
        "config_drive": "",
        "key_name": None,
        "OS-SRV-USG:launched_at": server.created.replace("Z", ".000000"),
        "OS-SRV-USG:terminated_at": None,
        "OS-EXT-STS:task_state": server.task_state,
        "OS-EXT-STS:vm_state": server.vm_state,
        "OS-EXT-STS:power_state": _POWER_STATE.get(server.vm_state, 0),
        "os-extended-volumes:volumes_attached": [],
        "security_groups": [{"name": "default"}],
    }
    if version >= (2, 9):
        body["locked"] = server.locked
    if version >= (2, 19):
        body["description"] = None
    if version >= (2, 26):
        body["tags"] = []
    if version >= (2, 63):
        body["trusted_image_certificates"] = None
    if version >= (2, 71):
        body["server_groups"] = []
    if version >= (2, 73):
        body["locked_reason"] = server.locked_reason
    if version >= (2, 96):
        body["pinned_availability_zone"] = None
    return body


def _parse_limit(raw: str | None) -> int:
    if raw is None:
        return MAX_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise NovaError(400, "badRequest", "limit param must be an integer") from None
    if limit < 0:
        raise NovaError(400, "badRequest", "limit param must be positive")
    return min(limit, MAX_LIMIT)


def select_servers(
    servers: list[ServerInfo], query: Mapping[str, str], caller: Token, version: Microversion
) -> tuple[list[ServerInfo], int]:
    """Filter, sort and page as ``GET /servers`` does for this caller; returns (page, effective limit)."""
    project = _project_listed(query, caller)
    # Nova's default order: newest first (created_at desc)
    selected = [s for s in reversed(servers) if project is None or s.project_id == project]
    name = query.get("name")
    if name is not None:
        try:
            # MySQL REGEXP: unanchored, and case-insensitive with CERN's default collation.
            pattern = re.compile(name, re.IGNORECASE)
        except re.error as exc:
            raise NovaError(
                400, "badRequest", f"Invalid regular expression in filter 'name': {exc}"
            ) from None
        selected = [server for server in selected if pattern.search(server.name)]
    ip = query.get("ip")
    if ip is not None:
        try:
            ip_pattern = re.compile(ip)
        except re.error as exc:
            raise NovaError(400, "badRequest", f"Invalid regular expression in filter 'ip': {exc}") from None
        selected = [server for server in selected if server.ip and ip_pattern.match(server.ip)]
    status = query.get("status")
    if status is not None:
        wanted = status.upper()
        if wanted not in KNOWN_STATUSES:
            if version >= (2, 38):
                raise NovaError(400, "badRequest", f"Invalid status value: {status}")
            return [], _parse_limit(query.get("limit"))
        selected = [s for s in selected if server_status(s.vm_state, s.task_state) == wanted]
    if caller.is_admin() and "uuid" in query:
        # uuid (and metadata) are admin-only filters: for anyone else Nova drops them without a word.
        selected = [server for server in selected if server.id == query["uuid"]]
    limit = _parse_limit(query.get("limit"))
    marker = query.get("marker")
    if marker is not None:
        if all(server.id != marker for server in servers):
            raise NovaError(400, "badRequest", f"marker [{marker}] not found")
        ids = [server.id for server in selected]
        selected = selected[ids.index(marker) + 1 :] if marker in ids else []
    return selected[:limit], limit


_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")


def _project_listed(query: Mapping[str, str], caller: Token) -> str | None:
    """Whose servers a list shows (None: every project's). Without ``all_tenants`` (or with a false one):
    the caller's project, admin or not, ``project_id`` and ``tenant_id`` ignored (Nova, lp:#1185290); with
    it, an admin sees every project's, or the one ``project_id`` (else ``tenant_id``) names; anyone else is
    refused."""
    raw = query.get("all_tenants")
    if raw is None or raw.lower() in _FALSE:
        return caller.project_id
    if raw.lower() not in (*_TRUE, ""):
        raise NovaError(400, "badRequest", f"Invalid input for all_tenants: Unrecognized value '{raw}'")
    if not caller.is_admin():
        raise NovaError(
            403,
            "forbidden",
            "Policy doesn't allow os_compute_api:servers:detail:get_all_tenants to be performed.",
        )
    return query.get("project_id") or query.get("tenant_id")


def _validate_metadata(metadata: object, field: str) -> dict[str, str]:
    if not isinstance(metadata, dict):
        raise NovaError(
            400,
            "badRequest",
            f"Invalid input for field/attribute {field}. Value: {metadata}. "
            f"{metadata!r} is not of type 'object'",
        )
    for key, value in metadata.items():
        if not _METADATA_KEY.fullmatch(key):
            raise NovaError(
                400,
                "badRequest",
                f"Invalid input for field/attribute {field}. Value: {metadata}. "
                f"Additional properties are not allowed ({key!r} was unexpected)",
            )
        if not isinstance(value, str):
            raise NovaError(
                400,
                "badRequest",
                f"Invalid input for field/attribute {key}. Value: {value}. {value!r} is not of type 'string'",
            )
        if len(value) > _MAX_VALUE_LENGTH:
            raise NovaError(
                400,
                "badRequest",
                f"Invalid input for field/attribute {key}. Value: {value}. {value!r} is too long",
            )
    return metadata


def _locked_reason(lock: object) -> str | None:
    """The ``lock`` member from microversion 2.73: null, or an object holding only ``locked_reason``."""
    if lock is None:
        return None
    if not isinstance(lock, dict):
        raise NovaError(
            400,
            "badRequest",
            f"Invalid input for field/attribute lock. Value: {lock}. "
            f"{lock!r} is not of type 'object', 'null'",
        )
    extra = set(lock) - {"locked_reason"}
    if extra:
        raise NovaError(
            400,
            "badRequest",
            f"Additional properties are not allowed ({', '.join(map(repr, sorted(extra)))} were unexpected)",
        )
    reason = lock.get("locked_reason")
    if reason is None:
        return None
    if not isinstance(reason, str) or not 1 <= len(reason) <= _MAX_VALUE_LENGTH:
        raise NovaError(
            400,
            "badRequest",
            f"Invalid input for field/attribute locked_reason. Value: {reason}. "
            "It must be a string of 1 to 255 characters",
        )
    return reason


def _body_member(body: object, member: str) -> object:
    if not isinstance(body, dict) or member not in body:
        raise NovaError(
            400,
            "badRequest",
            f"Invalid input for field/attribute {member}. Value: None. '{member}' is a required property",
        )
    extra = set(body) - {member}
    if extra:
        raise NovaError(
            400,
            "badRequest",
            f"Additional properties are not allowed ({', '.join(map(repr, sorted(extra)))} were unexpected)",
        )
    return body[member]


class _Call:
    """One authenticated Nova request: who calls, at which microversion."""

    def __init__(self, request: Request, token: Token, version: Microversion) -> None:
        self.request = request
        self.token = token
        self.version = version
        self.root = base_url(request)

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    async def json(self) -> object:
        try:
            return json.loads(await self.request.body())
        except ValueError:
            raise NovaError(400, "badRequest", "Malformed request body") from None


Handler = Callable[[_Call], Awaitable[Response]]


class NovaApi:
    def __init__(self, state: SimulatorState) -> None:
        self.state = state

    def routes(self) -> list[BaseRoute]:
        prefix = "/compute/v2.1"
        server = prefix + "/servers/{server_id}"
        item = server + "/metadata/{key:path}"
        endpoint = self._endpoint
        return [
            Route("/compute", self.root_versions, methods=["GET"]),
            Route("/compute/", self.root_versions, methods=["GET"]),
            Route(prefix, self.version, methods=["GET"]),
            Route(prefix + "/", self.version, methods=["GET"]),
            Route(prefix + "/servers", endpoint(self.list_servers), methods=["GET"]),
            Route(prefix + "/servers/detail", endpoint(self.list_servers_detail), methods=["GET"]),
            Route(server, endpoint(self.show_server), methods=["GET"]),
            Route(server + "/action", endpoint(self.server_action), methods=["POST"]),
            Route(server + "/metadata", endpoint(self.list_metadata), methods=["GET"]),
            Route(server + "/metadata", endpoint(self.merge_metadata), methods=["POST"]),
            Route(server + "/metadata", endpoint(self.replace_metadata), methods=["PUT"]),
            Route(item, endpoint(self.show_metadata_item), methods=["GET"]),
            Route(item, endpoint(self.set_metadata_item), methods=["PUT"]),
            Route(item, endpoint(self.delete_metadata_item), methods=["DELETE"]),
            Route(prefix + "/limits", endpoint(self.limits), methods=["GET"]),
            Route(prefix + "/flavors", endpoint(self.flavors), methods=["GET"]),
            Route(prefix + "/flavors/detail", endpoint(self.flavors), methods=["GET"]),
            Route(prefix + "/flavors/{flavor_id}", endpoint(self.show_flavor), methods=["GET"]),
        ]

    def _endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """Authenticate, negotiate the microversion, and turn NovaError into Nova's error body."""

        async def wrapped(request: Request) -> Response:
            token = self.state.identity.validate(request.headers.get("X-Auth-Token"))
            if token is None:
                return unauthorized()
            try:
                version = requested_microversion(request)
            except NovaError as fault:
                return nova_error(fault.status, fault.message, fault.kind)
            headers = {
                "OpenStack-API-Version": f"compute {_format(version)}",
                "X-OpenStack-Nova-API-Version": _format(version),
                "Vary": "OpenStack-API-Version, X-OpenStack-Nova-API-Version",
            }
            try:
                if not token.can_read():
                    raise NovaError(
                        403, "forbidden", "Policy doesn't allow os_compute_api:servers:index to be performed."
                    )
                response = await handler(_Call(request, token, version))
            except NovaError as fault:
                return nova_error(fault.status, fault.message, fault.kind, headers)
            response.headers.update(headers)
            return response

        return wrapped

    def _server(self, call: _Call) -> ServerInfo:
        return self.state.visible_server(call.token, call.param("server_id"))

    async def root_versions(self, request: Request) -> Response:
        root = base_url(request)
        versions = [_version_document(root, current=False), _version_document(root, current=True)]
        return JSONResponse({"versions": versions})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": _version_document(base_url(request), current=True)})

    async def list_servers(self, call: _Call) -> Response:
        return self._server_page(call, detail=False)

    async def list_servers_detail(self, call: _Call) -> Response:
        return self._server_page(call, detail=True)

    def _server_page(self, call: _Call, *, detail: bool) -> Response:
        query = dict(call.request.query_params)
        page, limit = select_servers(self.state.servers(), query, call.token, call.version)
        if detail:
            items = [render_server(server, call.root, call.version) for server in page]
        else:
            items = [{"id": s.id, "name": s.name, "links": _server_links(call.root, s.id)} for s in page]
        body: dict[str, Any] = {"servers": items}
        if page and len(page) == limit:
            # Nova links to a next page whenever this one is full, even if nothing follows.
            query.update(limit=str(limit), marker=page[-1].id)
            path = "servers/detail" if detail else "servers"
            body["servers_links"] = [
                {"rel": "next", "href": f"{call.root}/compute/v2.1/{path}?{urlencode(query)}"}
            ]
        return JSONResponse(body)

    async def show_server(self, call: _Call) -> Response:
        server = self._server(call)
        return JSONResponse({"server": render_server(server, call.root, call.version)})

    async def server_action(self, call: _Call) -> Response:
        """``POST /servers/{id}/action``: the lock and unlock actions (202, no body), as Nova runs them."""
        body = await call.json()
        if not isinstance(body, dict) or len(body) != 1:
            raise NovaError(400, "badRequest", "There is no such action: None")
        ((action, argument),) = body.items()
        server_id = call.param("server_id")
        if action == "lock":
            reason = _locked_reason(argument) if call.version >= (2, 73) else None
            self.state.lock_server(call.token, server_id, reason)
        elif action == "unlock":
            self.state.unlock_server(call.token, server_id)
        else:
            raise NovaError(400, "badRequest", f"There is no such action: {action}")
        return Response(status_code=202)

    async def list_metadata(self, call: _Call) -> Response:
        return JSONResponse({"metadata": self._server(call).metadata})

    async def show_metadata_item(self, call: _Call) -> Response:
        key = call.param("key")
        metadata = self._server(call).metadata
        if key not in metadata:
            raise NovaError(404, "itemNotFound", "Metadata item was not found")
        return JSONResponse({"meta": {key: metadata[key]}})

    async def merge_metadata(self, call: _Call) -> Response:
        items = _validate_metadata(_body_member(await call.json(), "metadata"), "metadata")
        result = self.state.apply_metadata_write(call.token, call.param("server_id"), "POST", items)
        return JSONResponse({"metadata": result})

    async def replace_metadata(self, call: _Call) -> Response:
        items = _validate_metadata(_body_member(await call.json(), "metadata"), "metadata")
        result = self.state.apply_metadata_write(call.token, call.param("server_id"), "PUT", items)
        return JSONResponse({"metadata": result})

    async def set_metadata_item(self, call: _Call) -> Response:
        key = call.param("key")
        meta = _validate_metadata(_body_member(await call.json(), "meta"), "meta")
        if len(meta) > 1:
            raise NovaError(400, "badRequest", "Request body contains too many items")
        if key not in meta:
            raise NovaError(400, "badRequest", "Request body and URI mismatch")
        self.state.apply_metadata_write(call.token, call.param("server_id"), "PUT_KEY", meta, key)
        return JSONResponse({"meta": meta})

    async def delete_metadata_item(self, call: _Call) -> Response:
        self.state.apply_metadata_write(call.token, call.param("server_id"), "DELETE", {}, call.param("key"))
        return Response(status_code=204)

    async def limits(self, call: _Call) -> Response:
        servers = sum(server.project_id == call.token.project_id for server in self.state.servers())
        absolute: dict[str, int] = {
            "maxServerMeta": self.state.max_server_meta,
            "maxImageMeta": 128,
            "maxTotalInstances": 100,
            "maxTotalCores": 400,
            "maxTotalRAMSize": 768000,
            "maxTotalKeypairs": 100,
            "maxServerGroups": 10,
            "maxServerGroupMembers": 10,
            "totalInstancesUsed": servers,
            "totalCoresUsed": 4 * servers,
            "totalRAMUsed": 7680 * servers,
            "totalServerGroupsUsed": 0,
        }
        if call.version < (2, 57):
            absolute.update(maxPersonality=5, maxPersonalitySize=10240)
        if call.version < (2, 36):
            absolute.update(maxSecurityGroups=10, maxSecurityGroupRules=20, maxTotalFloatingIps=10)
            absolute.update(totalSecurityGroupsUsed=0, totalFloatingIpsUsed=0)
        return JSONResponse({"limits": {"rate": [], "absolute": absolute}})

    async def flavors(self, call: _Call) -> Response:
        flavor = _flavor_resource(call.root)
        if not call.request.url.path.endswith("/detail"):
            flavor = {key: flavor[key] for key in ("id", "name", "links")}
        return JSONResponse({"flavors": [flavor]})

    async def show_flavor(self, call: _Call) -> Response:
        flavor_id = call.param("flavor_id")
        if flavor_id not in (FLAVOR_ID, FLAVOR_NAME):
            raise NovaError(404, "itemNotFound", f"Flavor {flavor_id} could not be found.")
        return JSONResponse({"flavor": _flavor_resource(call.root)})
