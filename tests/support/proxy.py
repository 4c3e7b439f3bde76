"""A reverse proxy in front of the service, over real HTTP: it rewrites Host to the upstream's
(as many load balancers and ingress controllers do) and says what the client asked for in
X-Forwarded-Host and X-Forwarded-Proto."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.servers import ThreadedServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def host_rewriting_proxy(upstream: str) -> ThreadedServer:
    async def forward(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = urlsplit(upstream).netloc
        headers["X-Forwarded-Host"] = request.headers["host"]
        headers["X-Forwarded-Proto"] = request.url.scheme
        target = (
            upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        )
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.request(
                request.method, target, headers=headers, content=await request.body()
            )
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        kept.pop("content-encoding", None)  # httpx decoded the body
        return Response(answer.content, status_code=answer.status_code, headers=kept)

    methods = ["GET", "POST", "PUT", "DELETE", "OPTIONS"]
    app = Starlette(routes=[Route("/{path:path}", forward, methods=methods)])
    return ThreadedServer(app).start()
