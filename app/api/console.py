"""/console: the web console, static files served by the service itself (docs/console.md).

The console is a client of the public API and nothing else: no route here reads or writes
tenant data. Its page and assets carry a strict Content-Security-Policy (scripts and styles
from this origin only, no inline script, requests to this origin only, no frames), so data a
tenant, an upstream or a model wrote can never run as script, even if a bug rendered it as
markup; the scripts themselves only ever set text.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

CONSOLE = Path(__file__).resolve().parents[1] / "console"
CONSOLE_URL = "/console"
CONSOLE_ASSETS_URL = "/console/assets"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_ROOT_MARK = "{{root}}"


class _ConsoleAssets(StaticFiles):
    """The console's scripts and styles: checked again on every load (they change with the
    service, and there is no build step to version their names), under the same policy."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update({**SECURITY_HEADERS, "Cache-Control": "no-cache"})
        return response


def install_console(app: FastAPI) -> None:
    """The page at /console (and /console/), its assets under /console/assets."""
    page = (CONSOLE / "index.html").read_text()
    app.mount(CONSOLE_ASSETS_URL, _ConsoleAssets(directory=CONSOLE / "assets"), name="console")

    async def console_page(request: Request) -> Response:
        # The root path comes from the operator's proxy settings, never from the request's data.
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return Response(
            page.replace(_ROOT_MARK, html.escape(root, quote=True)),
            media_type="text/html; charset=utf-8",
            headers={**SECURITY_HEADERS, "Cache-Control": "no-store"},
        )

    for path in (CONSOLE_URL, f"{CONSOLE_URL}/"):  # HEAD too: link checkers and monitors ask
        app.add_api_route(path, console_page, methods=["GET", "HEAD"], include_in_schema=False)
