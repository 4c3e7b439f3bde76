"""A route class whose JSON bodies are parsed by orjson: faster, and it rejects NaN/Infinity."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute


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
