"""The OpenStack REST API as plain JSON through a service proxy's session, for the calls on an apply's path
(adapters.nova, adapters.octavia): the requests openstacksdk sends, its authentication, endpoint discovery
and microversion kept, without a resource object built per reply or per item. A failed reply goes through
openstacksdk's ``raise_from_response``, so adapters.openstack_errors maps it as before."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

from openstack import exceptions as sdk_exceptions


def json_member(response: Any, key: str) -> dict[str, Any]:
    """The ``key`` object of a successful reply's JSON body (``{"server": {...}}``), for the adapters that
    call the REST API through the session as plain JSON (adapters.nova, adapters.octavia). A body that is not
    that raises openstacksdk's InvalidResponse, which adapters.openstack_errors maps as a retryable
    ``invalid response``."""
    member = _json_body(response).get(key)
    if not isinstance(member, dict):
        raise sdk_exceptions.InvalidResponse(f"no {key!r} object in the reply's body")
    return member


_ACCEPT_JSON = {"Accept": "application/json"}


def json_list(
    get: Callable[..., Any], path: str, key: str, filters: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Every ``key`` object of a listing, page after page, as plain JSON: the requests openstacksdk's
    ``Resource.list`` sends, without a resource built per item. ``get`` is a service proxy's (its
    authentication, endpoint and microversion). A next page is the ``<key>_links`` ``next`` link, its query
    (``limit``, ``marker``) over ``filters``, which Octavia's links leave out; an empty page ends the list,
    and a link naming the marker just asked for is refused as the SDK refuses it (a server's paging bug
    would loop). A 2xx body that is not such a list is an InvalidResponse, as in json_member."""
    found: list[dict[str, Any]] = []
    url: str | None = path
    query: dict[str, Any] = dict(filters)
    while url:
        response = get(url, params=dict(query), headers=_ACCEPT_JSON)
        sdk_exceptions.raise_from_response(response)
        body = _json_body(response)
        page = body.get(key)
        if not isinstance(page, list) or not all(isinstance(item, dict) for item in page):
            raise sdk_exceptions.InvalidResponse(f"no {key!r} list in the reply's body")
        if not page:
            return found
        found += page
        asked = query.pop("marker", None)
        query.pop("limit", None)
        url, paging = _next_page(body.get(f"{key}_links"))
        if "marker" in paging and paging["marker"] == asked:
            raise sdk_exceptions.SDKException("Endless pagination loop detected, aborting")
        query.update(paging)
    return found


def _next_page(links: object) -> tuple[str | None, dict[str, list[str]]]:
    """The ``next`` link's URL without its query, and that query (openstacksdk's ``_get_next_link``)."""
    for link in links if isinstance(links, list) else ():
        if isinstance(link, dict) and link.get("rel") == "next" and "href" in link:
            href = str(link["href"] or "")
            if not href:
                break
            if href.startswith("/v"):  # relative to the versioned endpoint, which the proxy adds
                href = href[href.find("/", 1) :]
            parts = urlsplit(href)
            return urljoin(href, parts.path), parse_qs(parts.query)
    return None, {}


def _json_body(response: Any) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}
