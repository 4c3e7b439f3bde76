"""A route class whose JSON bodies are parsed by orjson: faster, and it rejects NaN/Infinity."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import Receive

M = TypeVar("M", bound=BaseModel)


async def parsed_body(request: Request, model: type[M]) -> M:
    """The JSON body as `model`, for hot routes that skip FastAPI's body machinery; errors are
    the same 400 (bad JSON) and 422 (schema) problems."""
    return validated_body(json_body(await whole_body(request.receive)), model)


async def whole_body(receive: Receive) -> bytes:
    """The request's body, read once, as `Request.body()` reads it but without its async
    generator; a client gone before its end is `ClientDisconnect`. Speed: docs/performance.md,
    "Why the code is shaped as it is"."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def json_body(raw: bytes) -> Any:
    """The body parsed (orjson: NaN and Infinity refused); bad JSON is the `json_invalid` error
    FastAPI's own routes raise, which the handler answers with a 400."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([{**error, "input": {}, "ctx": {"error": exc.msg}}]) from None


def validated_body(data: Any, model: type[M]) -> M:
    """The parsed body as `model`; a mismatch is FastAPI's 422, located under `body`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        ) from None


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            # orjson.JSONDecodeError subclasses json.JSONDecodeError: FastAPI reports it as
            # json_invalid, which our handler turns into a 400.
            self._json = orjson.loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        if not ((self.methods or set()) & {"POST", "PUT", "PATCH"}):  # no body to parse
            return handler

        async def strict_json_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_json_handler
