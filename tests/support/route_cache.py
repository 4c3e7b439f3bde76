"""Route building, once per process instead of once per app (a pytest plugin, registered in
tests/conftest.py).

FastAPI 0.16x builds the effective form of every included route (its dependant, its fields,
one pydantic TypeAdapter per parameter) for each app that includes the router. The suite
starts a fresh app for almost every test, and that build was about 70% of an app's start
(measured with cProfile: 2.3 s of 3.2 s per app under load). The service builds it once per
process; here it is built once per route too: an app after the first reuses what the first
built for the same route included the same plain way (no prefix, tags, dependencies,
responses or callbacks, as app/main.py includes every router).

What an app would not share: the dependency-overrides provider (the app). The suite uses no
dependency overrides; an include that is not plain is built as FastAPI builds it.

The OpenAPI document likewise: the service builds it in its lifespan (0.3-0.6 s of CPU), and
here an app whose documented routes and metadata are those of an earlier app gets a copy of
what that one built (the service then applies its settings' limits to its copy)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi import applications, routing

_BUILT: dict[tuple[Any, ...], tuple[Any, Any]] = {}  # key -> (route kept alive, context)
_DOCUMENTS: dict[tuple[Any, ...], tuple[list[Any], bytes]] = {}  # key -> (routes kept, document)


def _plain(context: Any) -> bool:
    return not (
        context.prefix
        or context.tags
        or context.dependencies
        or context.responses
        or context.callbacks
        or context.deprecated
        or not context.include_in_schema
    )


def pytest_configure(config: pytest.Config) -> None:
    _cache_openapi_documents()
    effective = getattr(routing, "_EffectiveRouteContext", None)
    build = getattr(effective, "from_api_route", None)
    if build is None:  # FastAPI no longer builds routes per inclusion: nothing to cache
        return

    def from_api_route(cls: Any, *, original_route: Any, include_context: Any) -> Any:
        if not _plain(include_context):
            return build(original_route=original_route, include_context=include_context)
        key = (
            id(original_route),
            include_context.max_body_size,
            id(include_context.included_router),
        )
        if key not in _BUILT:
            built = build(original_route=original_route, include_context=include_context)
            _BUILT[key] = (original_route, built)
        return _BUILT[key][1]

    effective.from_api_route = classmethod(from_api_route)


def _cache_openapi_documents() -> None:
    build = applications.get_openapi

    def get_openapi(*, routes: Any, **metadata: Any) -> dict[str, Any]:
        documented = [
            (context.original_route, context.path, sorted(context.methods or ()))
            for context in routing.iter_route_contexts(routes)
            # FastAPI documents API routes only (a plain Route, like each app's /mcp, is not)
            if isinstance(context.original_route, routing.APIRoute)
            and context.original_route.include_in_schema
        ]
        key = (
            orjson.dumps(metadata, default=repr),
            *((id(route), path, *methods) for route, path, methods in documented),
        )
        if key not in _DOCUMENTS:
            _DOCUMENTS[key] = (documented, orjson.dumps(build(routes=routes, **metadata)))
        return orjson.loads(_DOCUMENTS[key][1])  # type: ignore[no-any-return]

    applications.get_openapi = get_openapi
