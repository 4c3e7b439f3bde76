"""One handler per error family, one body shape (RFC 9457 problem details) everywhere."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from pymongo.errors import PyMongoError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import AppError, database_unavailable, field_error, problem_body, status_title

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
    from the OpenAPI document, built on a worker thread the first time (about 0.3 s of CPU that
    would otherwise stall the event loop).
    """
    table: dict[str, tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "allow_table", None
    )
    if table is None:
        table = await asyncio.to_thread(_allow_table, request.app)
        request.app.state.allow_table = table
    path = request.url.path
    if path in table:
        return sorted(table[path][1])
    return sorted(
        {m for pattern, methods in table.values() if pattern.match(path) for m in methods}
    )


async def _handle_database_error(request: Request, exc: Exception) -> Response:
    if database_unavailable(exc):
        logger.warning(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            type(exc).__name__,
        )
        return problem_response(
            503, "The database is not answering; try again shortly.", headers={"Retry-After": "2"}
        )
    logger.error("database error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "An unexpected error occurred.")


async def _handle_unexpected(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "An unexpected error occurred.")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _handle_app_error)
    app.add_exception_handler(RequestValidationError, _handle_validation_error)
    app.add_exception_handler(StarletteHTTPException, _handle_http_exception)
    app.add_exception_handler(PyMongoError, _handle_database_error)
    app.add_exception_handler(Exception, _handle_unexpected)


def _allow_table(app: FastAPI) -> dict[str, tuple[re.Pattern[str], set[str]]]:
    table = {}
    for template, operations in app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\{[^/}]+\\}", "[^/]+", re.escape(template))
        methods = {m.upper() for m in operations}
        if "GET" in methods:
            methods.add("HEAD")  # Starlette answers HEAD wherever GET is routed
        table[template] = (re.compile(f"^{pattern}$"), methods)
    return table
