"""Nova servers and their metadata, on the OpenStack session: the only writer of ``landb-alias*`` keys.

Design choices, each forced by a Nova or external-dns fact (see docs/reference.md):

- Servers are found by batching node names into anchored ``name`` regex filters
  (``^(a|b|c)$``), a handful of calls for a whole cluster instead of listing every server of the
  project (a CERN project may hold thousands). A node's ``providerID`` decides which server is
  its own; names, which are not unique in a project, are only trusted when exactly one server
  carries the node's name.
- Everything read or written is the credential's own project's, whatever its roles: an admin (or global
  reader) token reads any project's server by id, so a server of another project read by id counts as
  not found (a node's providerID pointing there is not followed), and writes only ever go to servers
  read that way or found by the name search, which Nova scopes to the token's project (the adapter never
  asks for ``all_tenants``).
- Metadata is written with one merge POST per server and deleted one key per DELETE. The SDK's
  ``delete_server_metadata`` wipes *all* metadata (LanDB's own keys included) when given no keys,
  so it is never used; one DELETE of ``servers/{id}/metadata/{key}`` is, after the key is checked.
- What an apply and a read call (the name search, a server read by id, the metadata POST and DELETE) is
  the REST API through the compute proxy, as plain JSON: the same requests as openstacksdk's calls, with
  keystoneauth's authentication, endpoint discovery and retries, but no SDK resource built from a reply
  (milliseconds of CPU each). Replies that fail are mapped as the SDK maps them (``raise_from_response``),
  so the errors are the same. Only the quota (``GET /limits``, read every ``limits_ttl``) is read through
  the SDK's resource.
- The connection, retries, error mapping, metrics and readiness are the session's (adapters.openstack):
  every call here is one ``session.call``.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlsplit

import openstack.connection
import openstack.exceptions as sdk_exceptions
import structlog
from openstack.compute.v2.server import Server as _SdkServer

from landb_webhook.adapters.openstack import OpenStackSession, check_own
from landb_webhook.adapters.openstack_errors import NOVA, ForeignResource
from landb_webhook.adapters.openstack_json import json_member
from landb_webhook.backends import Node, Server, UpstreamError

log = structlog.get_logger(__name__)

UNLIMITED_METADATA_ITEMS = 2**31 - 1
"""What max_metadata_items() reports when the project's quota is unlimited (Nova says -1)."""

_NOVA_METADATA_KEY = re.compile(r"[a-zA-Z0-9\-_:. ]{1,255}")
_SERVER_ID = re.compile(r"[A-Za-z0-9\-]{1,64}")
_NAME_FILTER_OVERHEAD = len(quote_plus("^()$"))
_NAME_SEPARATOR_LENGTH = len(quote_plus("|"))


class OpenStackServerStore:
    """backends.ServerStore backed by Nova, on an OpenStack session; safe to share between threads."""

    def __init__(self, session: OpenStackSession) -> None:
        """``session``: the connection, retries and metrics every call goes through (shared with
        adapters.octavia); its options bound the name searches and the quota's cache."""
        self.session = session
        self._max_name_filter_length = session.options.max_name_filter_length
        self._limits_ttl = session.options.limits_ttl
        self._max_metadata_items: tuple[int, float] | None = None

    # -- the session's, for whoever holds the store ---------------------------------------------------

    def unavailable(self) -> str | None:
        """The session's readiness (OpenStackSession.unavailable)."""
        return self.session.unavailable()

    def connection(self) -> openstack.connection.Connection:
        """The session's connection (OpenStackSession.connection)."""
        return self.session.connection()

    def close(self) -> None:
        """Close the session (and with it adapters.octavia's, which shares it)."""
        self.session.close()

    # -- backends.ServerStore -----------------------------------------------------------------------

    def servers_for(self, nodes: Sequence[Node]) -> Mapping[str, Server]:
        """Each node's server: the one whose id is the node's providerID, else the only one named like it."""
        by_id: dict[str, Server] = {}
        by_name: dict[str, list[Server]] = defaultdict(list)
        for names in self._name_batches(sorted({node.name for node in nodes if node.name})):
            pattern = _name_pattern(names)
            for server in self.session.call(
                "search servers by name",
                functools.partial(_find_by_name, pattern=pattern),
                api="list_servers",
            ):
                if server.id not in by_id:
                    by_id[server.id] = server
                    by_name[server.name].append(server)

        found: dict[str, Server] = {}
        for node in nodes:
            own = self._server_of(node, by_id, by_name)
            if own is not None:
                found[node.name] = own
        return found

    def server(self, server_id: str) -> Server | None:
        """One GET of the server; None on Nova's 404 (it was deleted), and for a server of another project
        than the credential's (which an admin's token can read)."""
        _check_server_id(server_id)
        try:
            return self.session.call(
                f"read server {server_id}",
                functools.partial(_find_by_id, server_id=server_id),
                api="get_server",
            )
        except UpstreamError as error:
            if not isinstance(error.__cause__, ForeignResource):
                raise
            log.warning(
                "server of another project ignored: neither read nor written",
                server_id=server_id,
                project_id=error.__cause__.project_id,
                hint="the OpenStack credential has rights beyond its project (admin or reader of all); "
                "the webhook only touches its own project's servers",
            )
            return None

    def set_metadata(self, server_id: str, items: Mapping[str, str]) -> None:
        """One POST that merges ``items`` into the server's metadata; an empty ``items`` sends nothing."""
        _check_server_id(server_id)
        if not items:
            return
        body = {"metadata": dict(items)}

        def post(conn: openstack.connection.Connection) -> None:
            sdk_exceptions.raise_from_response(conn.compute.post(_metadata_path(server_id), json=body))

        self.session.call(f"set metadata on server {server_id}", post, api="set_metadata")

    def delete_metadata(self, server_id: str, key: str) -> None:
        """Exactly one DELETE of ``key``; a key (or server) that is already gone counts as deleted."""
        _check_server_id(server_id)
        if not _NOVA_METADATA_KEY.fullmatch(key) or key.strip() in ("", ".", ".."):
            # The key becomes a URL path segment: "" or ".." would address the server itself.
            raise ValueError(f"refusing to delete metadata key {key!r}: not a single Nova metadata key")

        def delete(conn: openstack.connection.Connection) -> None:
            try:
                sdk_exceptions.raise_from_response(conn.compute.delete(_metadata_path(server_id, key)))
            except sdk_exceptions.NotFoundException:
                log.debug("metadata key already gone", server_id=server_id, key=key)

        self.session.call(f"delete metadata key {key!r} of server {server_id}", delete, api="delete_metadata")

    def max_metadata_items(self) -> int:
        """``absolute.maxServerMeta`` from ``GET /limits``, cached for ``limits_ttl`` seconds."""
        cached = self._max_metadata_items
        if cached is not None and time.monotonic() - cached[1] < self._limits_ttl:
            return cached[0]
        limits = self.session.call("read limits", lambda conn: conn.compute.get_limits(), api="get_limits")
        value = getattr(limits.absolute, "server_meta", None)
        if value is None:
            raise UpstreamError(NOVA, "GET /limits has no absolute.maxServerMeta", retryable=False)
        items = UNLIMITED_METADATA_ITEMS if int(value) < 0 else int(value)
        self._max_metadata_items = (items, time.monotonic())
        return items

    # -- internals -------------------------------------------------------------------------------

    def _server_of(
        self, node: Node, by_id: Mapping[str, Server], by_name: Mapping[str, Sequence[Server]]
    ) -> Server | None:
        if node.server_id is not None:
            server_id = node.server_id
            server: Server | None = by_id.get(server_id)
            if server is None:
                # Renamed servers are not found by the name search; ask for the id itself.
                server = self.server(server_id)
            if server is None:
                log.warning("server of node not found", node=node.name, server_id=node.server_id)
            return server
        candidates = by_name.get(node.name, ())
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            log.warning("no server named like node", node=node.name)
        else:
            log.warning(
                "several servers named like node and no providerID to choose; node skipped",
                node=node.name,
                server_ids=sorted(server.id for server in candidates),
            )
        return None

    def _name_batches(self, names: Sequence[str]) -> Iterator[list[str]]:
        """Group sorted names so that each ``_name_pattern``, URL-encoded, fits the length budget.

        The pattern's length is ``overhead + sum(name lengths) - (n - 1) * prefix length + separators``
        (escaping and URL-encoding go character by character), so it is known as each name is added.
        """
        batch: list[str] = []
        names_length = 0
        for name in names:
            encoded = _encoded_length(name)
            prefix = os.path.commonprefix([batch[0], name]) if batch else name  # noqa: RUF071 (by character)
            prefix_length = _encoded_length(prefix)
            length = (
                _NAME_FILTER_OVERHEAD
                + names_length
                + encoded
                + len(batch) * (_NAME_SEPARATOR_LENGTH - prefix_length)
            )
            if batch and length > self._max_name_filter_length:
                yield batch
                batch, names_length = [], 0
            batch.append(name)
            names_length += encoded
        if batch:
            yield batch


def _metadata_path(server_id: str, key: str | None = None) -> str:
    """The Nova metadata API's path, as the SDK's server resource builds it: the compute proxy's own
    request, not the resource, because building a server resource costs a millisecond of CPU per write
    and it only ever carried the id. (Not ``compute.set_server_metadata(server, **metadata)`` either: a
    metadata key named "server" would collide with that method's first parameter.)"""
    path = f"servers/{server_id}/metadata"
    return path if key is None else f"{path}/{key}"


def _find_by_name(conn: openstack.connection.Connection, pattern: str) -> list[Server]:
    return list_servers(conn, {"name": pattern})


def list_servers(conn: openstack.connection.Connection, filters: Mapping[str, str]) -> list[Server]:
    """Every page of ``GET /servers/detail?<filters>``, read as raw JSON: building an SDK resource
    per server costs milliseconds of CPU each, most of a large cluster's Records."""
    found: list[Server] = []
    params = dict(filters)
    while True:
        response = conn.compute.get("/servers/detail", params=params)
        sdk_exceptions.raise_from_response(response)
        body = response.json()
        found += [_server_value_of(item) for item in body.get("servers") or ()]
        marker = _next_marker(body.get("servers_links") or ())
        if marker is None or not body.get("servers"):
            return found
        params = {**filters, "marker": marker}


def _next_marker(links: Sequence[Mapping[str, Any]]) -> str | None:
    for link in links:
        if link.get("rel") == "next":
            values = parse_qs(urlsplit(str(link.get("href", ""))).query).get("marker")
            if values:
                return values[0]
    return None


def _server_value_of(item: Mapping[str, Any]) -> Server:
    metadata = item.get("metadata") or {}
    return Server(
        id=str(item["id"]),
        name=str(item.get("name", "")),
        metadata={str(key): str(value) for key, value in metadata.items()},
    )


def _name_pattern(names: Sequence[str]) -> str:
    """``^prefix(rest|rest|...)$``: a cluster's node names share a long prefix (``<cluster>-<id>-node-``),
    written once, so one search holds several times more names than ``^(name|name|...)$`` would."""
    prefix = os.path.commonprefix(list(names)) if len(names) > 1 else ""  # noqa: RUF071 (by character)
    rest = "|".join(_escape_name(name[len(prefix) :]) for name in names)
    return f"^{_escape_name(prefix)}({rest})$"


def _encoded_length(text: str) -> int:
    return len(quote_plus(_escape_name(text)))


def _escape_name(name: str) -> str:
    """``re.escape`` minus the hyphen (a literal outside brackets): node names are full of them, and
    each escaped one costs three more characters of the URL-encoded filter, so fewer names per call."""
    return re.escape(name).replace("\\-", "-")


def _find_by_id(conn: openstack.connection.Connection, server_id: str) -> Server | None:
    """``GET /servers/{id}`` through the compute proxy, read as plain JSON (id, name, project, metadata): no
    server resource built per reply (adapters.openstack_json). The request is the SDK's, with the
    microversion its server resource negotiates (the compute version document read once per connection),
    so the requests counted do not change."""
    response = conn.compute.get(
        f"servers/{server_id}", microversion=_SdkServer._get_microversion(conn.compute)
    )
    try:
        sdk_exceptions.raise_from_response(response)
    except sdk_exceptions.NotFoundException:
        return None
    item = json_member(response, "server")
    check_own(conn, "server", server_id, item.get("tenant_id"))
    return _server_value_of(item)


def _check_server_id(server_id: str) -> None:
    if not _SERVER_ID.fullmatch(server_id):
        raise ValueError(f"{server_id!r} is not a Nova server id")
