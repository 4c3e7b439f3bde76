"""One handler per error family, one body shape (RFC 9457 problem details) everywhere."""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import (
    AppError,
    DatabaseError,
    DatabaseUnavailable,
    field_error,
    problem_body,
    status_title,
)

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem_response(
    status: int,
    detail: str,
    *,
    title: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = problem_body(status, detail, title=title, errors=errors)
    return Response(
        orjson.dumps(body), status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE
    )


def json_path(parts: tuple[int | str, ...] | list[int | str]) -> str:
    """`("function", "parameters", "required", 1)` -> `$.function.parameters.required[1]`."""
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _location(loc: tuple[int | str, ...]) -> str:
    # Body problems are JSON paths into the body; query, path and header problems name their source.
    if loc and loc[0] == "body":
        return json_path(loc[1:])
    return ".".join(str(part) for part in loc)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        field_error(_location(tuple(error.get("loc", ()))), str(error.get("msg", "invalid value")))
        for error in exc.errors()
    ]


async def _handle_app_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, AppError)
    return problem_response(
        exc.status_code, exc.message, title=exc.title, errors=exc.errors, headers=exc.headers
    )


async def _handle_validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if any(error.get("type") == "json_invalid" for error in exc.errors()):
        first = exc.errors()[0]
        reason = (first.get("ctx") or {}).get("error", "invalid JSON")
        return problem_response(400, f"The request body is not valid JSON: {reason}.")
    return problem_response(
        422, "The request does not match the expected schema.", errors=_validation_errors(exc)
    )


async def _handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else status_title(exc.status_code)
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(await allowed_methods(request))
    return problem_response(exc.status_code, detail, headers=headers or None)


async def allowed_methods(request: Request) -> list[str]:
    """The methods of the request's path, across routes (FastAPI names one route's only).

    A literal path (`/tools/ids`) is its own resource and wins over templates it also matches
    (`/tools/{tool_id}`); such ids are reserved, so no tool hides behind it. The table comes
    from the app's routes, made the first time (not from the OpenAPI document: building that
    held the GIL for 0.3-0.4 s even on a worker thread, a stall of every request).
    """
    table: dict[str, tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "allow_table", None
    )
    if table is None:
        table = request.app.state.allow_table = _allow_table(request.app)
    path = request.url.path
    if path in table:
        return sorted(table[path][1])
    return sorted(
        {m for pattern, methods in table.values() if pattern.match(path) for m in methods}
    )


async def _handle_database_error(request: Request, exc: Exception) -> Response:
    """503 with Retry-After when the database is away (logged as a warning), else a logged,
    generic 500: what the driver said stays in the log."""
    assert isinstance(exc, DatabaseError)
    if isinstance(exc, DatabaseUnavailable):
        logger.warning(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            type(exc.__cause__ or exc).__name__,
        )
        return await _handle_app_error(request, exc)
    logger.error("database error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "An unexpected error occurred.")


async def _handle_unexpected(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "An unexpected error occurred.")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _handle_app_error)
    app.add_exception_handler(DatabaseError, _handle_database_error)
    app.add_exception_handler(RequestValidationError, _handle_validation_error)
    app.add_exception_handler(StarletteHTTPException, _handle_http_exception)
    app.add_exception_handler(Exception, _handle_unexpected)


def _allow_table(app: FastAPI) -> dict[str, tuple[re.Pattern[str], set[str]]]:
    table: dict[str, tuple[re.Pattern[str], set[str]]] = {}
    for route in iter_route_contexts(app.routes):  # FastAPI's view of included routers
        if not route.methods or route.path is None:  # mounts (/mcp, the console)
            continue
        pattern = re.sub(r"\\{[^/}]+\\}", "[^/]+", re.escape(route.path))
        _, methods = table.setdefault(route.path, (re.compile(f"^{pattern}$"), set()))
        methods.update(route.methods)
        if "GET" in methods:
            methods.add("HEAD")  # Starlette answers HEAD wherever GET is routed
    return table
