"""Keystone v3 over HTTP: version discovery, token issue and validation, under ``/identity``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from landb_simulator.identity import (
    DOMAIN_ID,
    DOMAIN_NAME,
    PROJECT_ID,
    PROJECT_NAME,
    REGION,
    AuthError,
    Token,
)
from landb_simulator.state import SimulatorState

_MEDIA_TYPE = "application/vnd.openstack.identity-v3+json"
_ROLE_IDS = {
    "admin": "1a5d8b4b1f0b4b4c9d0d7b1d2e3f4a01",
    "member": "9fe2ff9ee4384b1894a90878d3e92bab",
    "reader": "5b3fbb1b7ab24c59a0d4bdf1e6f27a32",
}


def base_url(request: Request) -> str:
    """Scheme and authority the client used, so every link it gets back points where it already talks."""
    return f"{request.url.scheme}://{request.url.netloc}"


def keystone_error(status: int, message: str) -> JSONResponse:
    titles = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
    body = {"error": {"code": status, "title": titles.get(status, "Error"), "message": message}}
    headers = {"WWW-Authenticate": 'Keystone uri="/identity"'} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _version_document(root: str) -> dict[str, Any]:
    return {
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": f"{root}/identity/v3/"}],
        "media-types": [{"base": "application/json", "type": _MEDIA_TYPE}],
    }


def service_catalog(root: str, without: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Every simulated service's endpoints, but the service types ``without`` names."""

    def service(kind: str, name: str, url: str) -> dict[str, Any]:
        return {
            "id": f"{kind}-service",
            "type": kind,
            "name": name,
            "endpoints": [
                {
                    "id": f"{kind}-{interface}",
                    "interface": interface,
                    "region": REGION,
                    "region_id": REGION,
                    "url": url,
                }
                for interface in ("public", "internal", "admin")
            ],
        }

    services = [
        service("identity", "keystone", f"{root}/identity/v3"),
        service("compute", "nova", f"{root}/compute/v2.1"),
        service("image", "glance", f"{root}/image"),
        service("load-balancer", "octavia", f"{root}/load-balancer"),
        service("network", "neutron", f"{root}/network"),
    ]
    return [entry for entry in services if entry["type"] not in set(without)]


def token_body(
    token: Token, root: str, *, with_catalog: bool = True, without: Iterable[str] = ()
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "methods": list(token.methods),
        "user": {
            "id": token.user.id,
            "name": token.user.name,
            "domain": {"id": DOMAIN_ID, "name": DOMAIN_NAME},
            "password_expires_at": None,
        },
        "audit_ids": [token.audit_id],
        "issued_at": _iso(token.issued_at),
        "expires_at": _iso(token.expires_at),
        "project": {"id": PROJECT_ID, "name": PROJECT_NAME, "domain": {"id": DOMAIN_ID, "name": DOMAIN_NAME}},
        "is_domain": False,
        "roles": [{"id": _ROLE_IDS[role], "name": role} for role in sorted(token.roles)],
    }
    if with_catalog:
        body["catalog"] = service_catalog(root, without)
    if token.application_credential is not None:
        credential = token.application_credential
        body["application_credential"] = {"id": credential.id, "name": credential.name, "restricted": True}
    if token.trust is not None:
        trust = token.trust
        body["OS-TRUST:trust"] = {
            "id": trust.id,
            "impersonation": False,
            "trustor_user": {"id": trust.trustor_user_id},
            "trustee_user": {"id": trust.trustee_user_id},
        }
    return {"token": body}


def routes(state: SimulatorState) -> list[BaseRoute]:
    identity = state.identity

    async def versions(request: Request) -> Response:
        document = _version_document(base_url(request))
        return JSONResponse({"versions": {"values": [document]}}, status_code=300)

    async def version(request: Request) -> Response:
        return JSONResponse({"version": _version_document(base_url(request))})

    async def issue_token(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return keystone_error(400, "Malformed request body")
        try:
            token = identity.authenticate(body)
        except AuthError as refused:
            return keystone_error(refused.status, refused.message)
        nocatalog = "nocatalog" in request.query_params
        return JSONResponse(
            token_body(
                token, base_url(request), with_catalog=not nocatalog, without=identity.catalog_without
            ),
            status_code=201,
            headers={"X-Subject-Token": token.value},
        )

    async def check_token(request: Request) -> Response:
        if identity.validate(request.headers.get("X-Auth-Token")) is None:
            return keystone_error(401, "The request you have made requires authentication.")
        subject = identity.validate(request.headers.get("X-Subject-Token"))
        if subject is None:
            return keystone_error(404, "Could not find token.")
        if request.method == "HEAD":
            return Response(status_code=200, headers={"X-Subject-Token": subject.value})
        if request.method == "DELETE":
            identity.revoke(subject.value)
            return Response(status_code=204)
        nocatalog = "nocatalog" in request.query_params
        return JSONResponse(
            token_body(
                subject, base_url(request), with_catalog=not nocatalog, without=identity.catalog_without
            ),
            headers={"X-Subject-Token": subject.value},
        )

    async def catalog(request: Request) -> Response:
        if identity.validate(request.headers.get("X-Auth-Token")) is None:
            return keystone_error(401, "The request you have made requires authentication.")
        catalog = service_catalog(base_url(request), identity.catalog_without)
        return JSONResponse({"catalog": catalog, "links": {}})

    return [
        Route("/identity", versions, methods=["GET"]),
        Route("/identity/", versions, methods=["GET"]),
        Route("/identity/v3", version, methods=["GET"]),
        Route("/identity/v3/", version, methods=["GET"]),
        Route("/identity/v3/auth/tokens", issue_token, methods=["POST"]),
        Route("/identity/v3/auth/tokens", check_token, methods=["GET", "HEAD", "DELETE"]),
        Route("/identity/v3/auth/catalog", catalog, methods=["GET"]),
    ]
