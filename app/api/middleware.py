"""ASGI middleware that must see the raw request."""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Awaitable, Coroutine, Generator
from types import CoroutineType
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.console import CONSOLE_ASSETS_URL
from app.api.docs import ASSETS_URL
from app.api.leaving import CLIENT_CLOSED_REQUEST, client_left
from app.api.problems import problem_response
from app.kit.crypto import random_hex
from app.observe.logs import request_context
from app.observe.metrics import Metrics

access_logger = logging.getLogger("app.access")


class BodySizeLimitMiddleware:
    """413 when a body exceeds `max_bytes`: at once if declared, else as soon as it streams past.
    408 (and the connection closed) when the body has not all arrived within `timeout_s` of the
    request: a client that sends less than its Content-Length, or never ends a chunked body,
    must not hold a connection forever (uvicorn has no body timeout of its own)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float = 15.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _detail(self) -> str:
        return f"The request body is larger than the limit of {self.max_bytes} bytes."

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, declared in scope["headers"]:
            if name == b"content-length" and (
                not declared.isdigit() or int(declared) > self.max_bytes
            ):
                await problem_response(413, self._detail())(scope, receive, send)
                return
        gate = _BodyGate(self, receive)
        try:
            await self.app(scope, gate.receive, send)
        finally:
            gate.close()  # a body left unread holds no timer past its request


class _BodyGate:
    """One request's `receive` under `BodySizeLimitMiddleware`: the bytes counted, and one timer
    for the whole body, due `timeout_s` after the request, armed by the first read that has to
    wait (a body already in when the app reads it, the usual case, arms none) and dropped once
    the body is in. The timer cancels a read it finds waiting; that read answers 408. A read
    once the deadline has passed is still tried, as `asyncio.timeout` would: a body already
    received is taken, and only a read that has to wait is a 408. Speed: docs/performance.md,
    "Why the code is shaped as it is"."""

    __slots__ = (
        "_cancelled",
        "_expired",
        "_limits",
        "_reading",
        "_receive",
        "_received",
        "_started",
        "_task",
        "_timer",
    )

    def __init__(self, limits: BodySizeLimitMiddleware, receive: Receive) -> None:
        self._limits: BodySizeLimitMiddleware | None = limits
        self._receive = receive
        self._started = asyncio.get_running_loop().time()
        self._received = 0
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False  # the deadline passed while no read waited
        self._task: asyncio.Task[Any] | None = None  # the task of the read in progress
        self._reading = False
        self._cancelled = False  # the timer cancelled the read in progress

    async def receive(self) -> Message:
        limits = self._limits
        if limits is None:  # the body is in: reads only wait for a disconnect, no deadline
            return await self._receive()
        pending = self._receive()
        if self._timer is None and not self._expired and type(pending) is CoroutineType:
            # Its first step run here: a read that does not wait needs no timer.
            try:
                waiting = pending.send(None)
            except StopIteration as done:
                return self._counted(done.value, limits)
            return await self._waited(_resumed(pending, waiting), limits)
        return await self._waited(pending, limits)

    async def _waited(
        self, pending: Awaitable[Message], limits: BodySizeLimitMiddleware
    ) -> Message:
        """A read that may wait, under the body's deadline."""
        if self._timer is None or self._expired:  # due at the deadline, at once if it is past
            self._expired = False
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(self._started + limits.timeout_s, self._expire)
        task = self._task = asyncio.current_task()
        before = task.cancelling() if task is not None else 0
        self._reading, self._cancelled = True, False
        try:
            message = await pending
        except asyncio.CancelledError:
            if self._cancelled and task is not None and task.uncancel() <= before:
                raise self._late(limits.timeout_s) from None  # the timer's cancel alone
            raise
        finally:
            self._reading = False
        return self._counted(message, limits)

    def _counted(self, message: Message, limits: BodySizeLimitMiddleware) -> Message:
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > limits.max_bytes:
                # FastAPI re-raises HTTPException from body parsing; the problem handler
                # answers it like any other error.
                self.close()
                raise HTTPException(413, limits._detail())
            if not message.get("more_body", False):
                self.close()
                self._limits = None
        return message

    def _expire(self) -> None:
        self._timer = None
        if self._limits is None:
            return
        if self._reading and self._task is not None:
            self._cancelled = True
            self._task.cancel()
        else:
            self._expired = True

    def _late(self, timeout_s: float) -> HTTPException:
        self.close()
        return HTTPException(
            408,
            f"The request body did not arrive within {timeout_s:g} s.",
            headers={"Connection": "close"},
        )

    def close(self) -> None:
        """Drop the timer (the body is in, refused, or the request is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


@types.coroutine
def _resumed(coroutine: Coroutine[Any, Any, Message], waiting: Any) -> Generator[Any, Any, Message]:
    """The rest of `coroutine`, whose first step was run by hand and stopped on `waiting`: what
    it waits on goes to the task, and what the task sends or throws (a cancellation) goes back
    to it, as an `await` of it would have done."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as exc:
            try:
                waiting = coroutine.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                waiting = coroutine.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


REQUEST_ID_HEADER = b"x-request-id"
_MAX_REQUEST_ID = 128
_ID_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


# Served without a route template: FastAPI's own schema route, `/mcp` (an ASGI app), and the
# docs assets' mount.
_FIXED_PATHS = frozenset({"/openapi.json", "/mcp"})


class RequestContextMiddleware:
    """Outermost: gives every response `X-Request-ID` (the caller's, when it is a sane token,
    else a new one), sets the log context (request id; authentication adds the tenant), and
    when the response ends writes one access-log line and counts it in the metrics."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, access_log: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER, b"")
        if not (0 < len(given) <= _MAX_REQUEST_ID and _ID_CHARS.issuperset(given)):
            # 32 random hex digits, as uuid4().hex without its fixed bits (`uuid.UUID` is pure
            # Python, and every request without an id pays for its id).
            given = random_hex(32).encode()
        request_id = given.decode()
        scope.setdefault("state", {})["request_id"] = request_id
        context = {"request_id": request_id}
        token = request_context.set(context)
        status = 0  # none yet: if the app ends without answering, 500 (or 499, see below)

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
                message["headers"] = [*headers, (REQUEST_ID_HEADER, given)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if not status:  # the server answers 500, unless the client left and was let go
                status = CLIENT_CLOSED_REQUEST if client_left(scope) else 500
            self._done(scope, status, time.perf_counter() - started)
            request_context.reset(token)

    def _done(self, scope: Scope, status: int, duration_s: float) -> None:
        # The template, never the path: paths hold ids, and labels must stay few. Anything
        # unrouted is "unmatched".
        route = scope.get("route")
        template = getattr(route, "path_format", None)
        if template is None:
            path = scope["path"]
            if path in _FIXED_PATHS:
                template = path
            elif path.startswith(f"{ASSETS_URL}/"):
                template = ASSETS_URL
            elif path.startswith(f"{CONSOLE_ASSETS_URL}/"):
                template = CONSOLE_ASSETS_URL
            else:
                template = "unmatched"
        method = scope["method"]
        self.metrics.request_done(method, template, status, duration_s)
        # `/mcp`: the JSON-RPC method it carried (a bounded label, set by the endpoint).
        served = template in ("/mcp", "/mcp/{tenant_id}")
        rpc = scope.get("state", {}).get("mcp_method") if served else None
        if rpc is not None:
            self.metrics.mcp_request_done(rpc, status)
        if self.access_log and access_logger.isEnabledFor(logging.INFO):
            extra = {
                "method": method,
                "route": template,
                "status": status,
                "duration_ms": round(duration_s * 1000, 3),
            }
            if rpc is not None:
                extra["mcp_method"] = rpc
            access_logger.info("%s %s %d", method, template, status, extra=extra)
