"""A real HTTP API for external tools to call: echo, status codes, slow and large answers."""

from __future__ import annotations

import asyncio
import gzip

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

RECEIVED: list[dict[str, object]] = []


async def echo(request: Request) -> JSONResponse:
    body = await request.body()
    RECEIVED.append(
        {
            "query": list(request.query_params.multi_items()),
            "body": body,
            "headers": dict(request.headers),
        }
    )
    return JSONResponse(
        {
            "method": request.method,
            "query": [[k, v] for k, v in request.query_params.multi_items()],
            "json": (await request.json()) if body else None,
            "content_type": request.headers.get("content-type"),
            "authorization": request.headers.get("authorization"),
        }
    )


async def fail(request: Request) -> Response:
    code = int(request.path_params["code"])
    return PlainTextResponse(f"upstream says no ({code})" + " detail" * 200, status_code=code)


async def slow(request: Request) -> Response:
    await asyncio.sleep(float(request.query_params.get("seconds", "5")))
    return PlainTextResponse("finally")


async def big(request: Request) -> Response:
    return PlainTextResponse("x" * int(request.query_params.get("size", "2000000")))


async def bomb(request: Request) -> Response:
    payload = gzip.compress(b"\0" * 50_000_000)  # 50 MB of zeros, about 50 KB on the wire
    return Response(payload, headers={"content-encoding": "gzip", "content-type": "text/plain"})


async def redirect(request: Request) -> Response:
    return RedirectResponse("http://169.254.169.254/latest/meta-data/", status_code=302)


upstream_app = Starlette(
    routes=[
        Route("/echo", echo, methods=["GET", "POST", "PUT", "DELETE"]),
        Route("/status/{code:int}", fail, methods=["GET", "POST"]),
        Route("/slow", slow, methods=["GET"]),
        Route("/big", big, methods=["GET"]),
        Route("/bomb", bomb, methods=["GET"]),
        Route("/redirect", redirect, methods=["GET"]),
    ]
)
