"""A one-image Glance v2, under ``/image``: just enough for ``openstack server list`` to name the image."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from landb_simulator.keystone import base_url
from landb_simulator.nova import unauthorized
from landb_simulator.state import IMAGE_ID, IMAGE_NAME, SimulatorState


def _image(root: str) -> dict[str, Any]:
    return {
        "id": IMAGE_ID,
        "name": IMAGE_NAME,
        "status": "active",
        "visibility": "public",
        "protected": False,
        "os_hidden": False,
        "container_format": "bare",
        "disk_format": "qcow2",
        "min_disk": 0,
        "min_ram": 0,
        "size": 1_073_741_824,
        "tags": [],
        "owner": None,
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:00Z",
        "self": f"/v2/images/{IMAGE_ID}",
        "file": f"/v2/images/{IMAGE_ID}/file",
        "schema": "/v2/schemas/image",
    }


def _wanted_ids(id_filter: str | None) -> set[str] | None:
    if id_filter is None:
        return None
    return set(id_filter.removeprefix("in:").split(","))


def routes(state: SimulatorState) -> list[BaseRoute]:
    async def versions(request: Request) -> Response:
        link = [{"rel": "self", "href": f"{base_url(request)}/image/v2/"}]
        return JSONResponse(
            {"versions": [{"id": "v2.16", "status": "CURRENT", "links": link}]}, status_code=300
        )

    async def list_images(request: Request) -> Response:
        if state.identity.validate(request.headers.get("X-Auth-Token")) is None:
            return unauthorized()
        wanted = _wanted_ids(request.query_params.get("id"))
        images = [_image(base_url(request))] if wanted is None or IMAGE_ID in wanted else []
        return JSONResponse({"images": images, "first": "/v2/images", "schema": "/v2/schemas/images"})

    async def show_image(request: Request) -> Response:
        if state.identity.validate(request.headers.get("X-Auth-Token")) is None:
            return unauthorized()
        if request.path_params["image_id"] != IMAGE_ID:
            return Response("404 Not Found\n\nNo image found.", status_code=404, media_type="text/plain")
        return JSONResponse(_image(base_url(request)))

    return [
        Route("/image", versions, methods=["GET"]),
        Route("/image/", versions, methods=["GET"]),
        Route("/image/versions", versions, methods=["GET"]),
        Route("/image/v2/images", list_images, methods=["GET"]),
        Route("/image/v2/images/{image_id}", show_image, methods=["GET"]),
    ]
