"""Local stand-ins for the search services web_search speaks to, answering in their real
formats: SearXNG's JSON API (`GET /search?q=...&format=json`), Tavily (`POST /search` with a
bearer key) and Brave (`GET /res/v1/web/search` with `X-Subscription-Token`). Mounted under
/searxng, /tavily and /brave; every request is kept in RECEIVED."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

RECEIVED: list[dict[str, Any]] = []
KEY = "search-key-3f9a"
HITS = [
    ("Release notes", "https://example.org/notes", "Version 2 is out."),
    ("Changelog", "https://example.org/changelog", "Every change."),
    ("Blog", "https://example.org/blog", "News."),
]


def _kept(request: Request, body: Any = None) -> None:
    RECEIVED.append(
        {
            "path": request.url.path,
            "query": dict(request.query_params),
            "headers": dict(request.headers),
            "json": body,
        }
    )


async def searxng(request: Request) -> Response:
    _kept(request)
    if request.query_params.get("format") != "json":
        return PlainTextResponse("Forbidden", status_code=403)  # as an instance without json
    query = request.query_params.get("q", "")
    if query == "break":
        return PlainTextResponse("<html>oops</html>", media_type="text/html")
    if query == "fail":
        return PlainTextResponse("internal", status_code=500)
    results = [
        {"url": url, "title": title, "content": snippet, "engine": "duckduckgo", "score": 1.0}
        for title, url, snippet in HITS
    ]
    return JSONResponse(
        {"query": query, "number_of_results": len(results), "results": results, "answers": []}
    )


async def tavily(request: Request) -> Response:
    body = await request.json()
    _kept(request, body)
    if request.headers.get("authorization") != f"Bearer {KEY}":
        return JSONResponse({"detail": {"error": "Unauthorized"}}, status_code=401)
    results = [
        {"title": title, "url": url, "content": snippet, "score": 0.9, "raw_content": None}
        for title, url, snippet in HITS[: body.get("max_results", 5)]
    ]
    return JSONResponse({"query": body["query"], "results": results, "response_time": 0.5})


async def brave(request: Request) -> Response:
    _kept(request)
    if request.headers.get("x-subscription-token") != KEY:
        return JSONResponse({"type": "ErrorResponse"}, status_code=422)
    count = int(request.query_params.get("count", "20"))
    results = [
        {"title": title, "url": url, "description": snippet, "type": "search_result"}
        for title, url, snippet in HITS[:count]
    ]
    return JSONResponse(
        {
            "type": "search",
            "query": {"original": request.query_params["q"]},
            "web": {"type": "search", "results": results},
        }
    )


search_services = Starlette(
    routes=[
        Mount("/searxng", routes=[Route("/search", searxng, methods=["GET"])]),
        Mount("/tavily", routes=[Route("/search", tavily, methods=["POST"])]),
        Mount("/brave", routes=[Route("/res/v1/web/search", brave, methods=["GET"])]),
    ]
)
