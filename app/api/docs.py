"""/docs (Swagger UI) and /redoc (ReDoc), with their scripts served by the service itself.

FastAPI's default pages load them from a CDN and stay blank without internet; the assets come
from the fastapi-offline package (kept current with Swagger UI and ReDoc releases), never from
files copied into this repository. The pages make no request to any other host: no fonts, no
validator badge, and ReDoc's sidebar logo (which it loads from its CDN) is replaced by an empty
image as the script is served.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Scope

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs/assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
_REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_EMPTY_SVG = b"data:image/svg+xml,%3Csvg xmlns=%27http://www.w3.org/2000/svg%27/%3E"


class _CachedStaticFiles(StaticFiles):
    """The assets change only with the package: browsers may keep them for a day."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.setdefault("Cache-Control", "public, max-age=86400")
        return response


def install_openapi(app: FastAPI, *, openapi_url: str) -> None:
    """The OpenAPI document at `openapi_url`: built by the lifespan before the first request
    (app/main.py), on a worker thread if an app serves it without that, then from FastAPI's
    cache."""
    building = asyncio.Lock()

    @app.get(openapi_url, include_in_schema=False)
    async def openapi_document(request: Request) -> JSONResponse:
        async with building:
            built = app.openapi_schema
            schema: dict[str, Any] = built if built else await asyncio.to_thread(app.openapi)
        root_path = request.scope.get("root_path", "").rstrip("/")
        if root_path and app.root_path_in_servers:  # as FastAPI's own route does
            if root_path not in {server.get("url") for server in schema.get("servers", [])}:
                schema = {**schema, "servers": [{"url": root_path}, *schema.get("servers", [])]}
        return JSONResponse(schema)


def install_docs(app: FastAPI, *, openapi_url: str) -> None:
    redoc_js = (ASSETS / "redoc.standalone.js").read_bytes().replace(_REDOC_LOGO, _EMPTY_SVG)

    @app.get(f"{ASSETS_URL}/redoc.standalone.js", include_in_schema=False)
    async def redoc_script() -> Response:
        return Response(
            redoc_js,
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    app.mount(ASSETS_URL, _CachedStaticFiles(directory=ASSETS), name="docs-assets")
    parameters = {**(app.swagger_ui_parameters or {}), "validatorUrl": None}

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=parameters,
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
