"""The body limit's deadline, on the event loop's clock moved by hand (no real waiting): one
timer per body, armed at the first read, dropped when the body is in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import HTTPException
from starlette.types import Message, Receive, Scope, Send

from app.api.middleware import BodySizeLimitMiddleware

TIMEOUT_S = 15.0
SCOPE: Scope = {"type": "http", "method": "POST", "path": "/x", "headers": []}


class Clock:
    """The running loop's `time()`, moved by `advance` (asyncio's own loop reads its timers'
    due times through it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
async def clock(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Clock]:
    loop = asyncio.get_running_loop()  # the test's own loop (function scope)
    ticking = Clock(loop)
    monkeypatch.setattr(loop, "time", ticking)
    yield ticking


class Body:
    """A client's body: the pieces given so far, then silence (a read waits)."""

    def __init__(self, *pieces: bytes, ends: bool = False) -> None:
        self.pieces = list(pieces)
        self.ends = ends
        self.reads = 0

    async def receive(self) -> Message:
        self.reads += 1
        if self.pieces:
            more = len(self.pieces) > 1 or not self.ends
            return {"type": "http.request", "body": self.pieces.pop(0), "more_body": more}
        await asyncio.Event().wait()  # the rest never comes
        raise AssertionError("unreachable")


def reader(into: list[Any]) -> Any:
    """An app that reads the whole body, keeping what each read gave or raised."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            into.append(message)
            if not message.get("more_body", False):
                return

    return app


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_read_waiting_past_the_deadline_is_a_408(clock: Clock) -> None:
    got: list[Any] = []
    gate = BodySizeLimitMiddleware(reader(got), max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, Body(b"{").receive, _no_send))
    await _settle()
    clock.advance(TIMEOUT_S - 0.5)
    await _settle()
    assert not task.done()  # not yet
    clock.advance(1.0)
    await _settle()  # the loop runs its due timer on its next turn
    assert task.done()
    with pytest.raises(HTTPException) as raised:
        await task
    assert raised.value.status_code == 408
    assert raised.value.detail == f"The request body did not arrive within {TIMEOUT_S:g} s."
    assert raised.value.headers == {"Connection": "close"}
    assert got == [{"type": "http.request", "body": b"{", "more_body": True}]


async def test_a_whole_body_arms_no_deadline_that_outlives_it(clock: Clock) -> None:
    got: list[Any] = []
    gate = BodySizeLimitMiddleware(reader(got), max_bytes=100, timeout_s=TIMEOUT_S)
    await gate(SCOPE, Body(b'{"a":', b"1}", ends=True).receive, _no_send)
    assert [m["body"] for m in got] == [b'{"a":', b"1}"]
    loop = asyncio.get_running_loop()
    assert not [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()]


async def test_a_read_after_the_body_waits_without_a_deadline(clock: Clock) -> None:
    """After the body, `receive` only waits for the client to leave: never a 408."""
    reads: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reads.append(await receive())
        reads.append(await receive())  # waits for a disconnect

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, Body(b"{}", ends=True).receive, _no_send))
    await _settle()
    clock.advance(TIMEOUT_S * 10)
    await _settle()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outside_cancel_stays_a_cancel(clock: Clock) -> None:
    """The server stopping cancels a read; that is not the client's lateness."""
    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, Body(b"{").receive, _no_send))
    await _settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_and_the_deadline_together_stay_a_cancel(clock: Clock) -> None:
    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, Body(b"{").receive, _no_send))
    await _settle()
    clock.advance(TIMEOUT_S + 1)
    task.cancel()  # before the loop runs the due timer
    await _settle()
    assert task.done()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_deadline_passing_between_two_reads_is_a_408_at_a_read_that_waits(
    clock: Clock,
) -> None:
    """The app is busy (not reading) when the deadline passes: nothing is interrupted; its next
    read is tried, and since the rest of the body is not there, it is the 408."""
    busy = asyncio.Event()
    seen: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(await receive())
        await busy.wait()  # work between reads, past the deadline: not interrupted
        seen.append("worked")
        await receive()

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    body = Body(b"{")
    task = asyncio.ensure_future(gate(SCOPE, body.receive, _no_send))
    await _settle()
    clock.advance(TIMEOUT_S + 1)
    await _settle()
    assert not task.done()
    busy.set()
    await _settle()
    assert task.done()
    with pytest.raises(HTTPException) as raised:
        await task
    assert raised.value.status_code == 408
    assert seen[-1] == "worked"
    assert body.reads == 2


@pytest.mark.parametrize("late_first", [True, False])
async def test_a_body_already_received_is_taken_after_the_deadline(
    clock: Clock, late_first: bool
) -> None:
    """As under `asyncio.timeout`, a read past the deadline that needs no wait returns its
    message: the app took its time (a slow key check) before reading a body that had arrived
    long before, or between two pieces already there. Only a read that has to wait is late."""
    got: list[Any] = []
    pause = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if late_first:
            clock.advance(TIMEOUT_S * 2)  # the app took its time before its first read
        got.append(await receive())
        if not late_first:
            clock.advance(TIMEOUT_S * 2)
            await pause.wait()  # the due timer runs while the app is not reading
        got.append(await receive())

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    body = Body(b'{"a":', b"1}", ends=True)
    task = asyncio.ensure_future(gate(SCOPE, body.receive, _no_send))
    await _settle()
    pause.set()
    await _settle()
    assert task.done()
    await task
    assert [m["body"] for m in got] == [b'{"a":', b"1}"]
    loop = asyncio.get_running_loop()
    assert not [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()]


async def test_an_outside_cancel_in_the_timers_turn_stays_a_cancel(clock: Clock) -> None:
    """A cancel from outside (the server stopping) that lands in the same turn of the loop as
    the deadline, just before it, is still a cancel, not a 408."""
    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, Body(b"{").receive, _no_send))
    await _settle()
    loop = asyncio.get_running_loop()
    loop.call_at(clock.now + TIMEOUT_S - 0.5, task.cancel)  # due just before the deadline
    clock.advance(TIMEOUT_S + 1)  # both due in the same turn, the outside cancel first
    await _settle()
    assert task.done()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_body_left_unread_holds_no_timer_past_its_request(clock: Clock) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the first piece, then the app answers without the rest

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    await gate(SCOPE, Body(b"{").receive, _no_send)
    loop = asyncio.get_running_loop()
    assert not [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()]


@pytest.mark.parametrize(
    ("pieces", "declared"),
    [((b"x" * 60, b"x" * 60), None), ((b"x" * 101,), None), ((b"",), b"101"), ((b"",), b"1e3")],
)
async def test_a_body_past_the_limit_is_a_413(
    clock: Clock, pieces: tuple[bytes, ...], declared: bytes | None
) -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(b"content-length", declared)] if declared is not None else []
    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    scope = {**SCOPE, "headers": headers}
    if declared is not None:  # refused before anything is read
        await gate(scope, Body(*pieces, ends=True).receive, send)
        assert sent[0]["status"] == 413
        return
    with pytest.raises(HTTPException) as raised:
        await gate(scope, Body(*pieces, ends=True).receive, send)
    assert raised.value.status_code == 413
    loop = asyncio.get_running_loop()
    assert not [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()]


async def _no_send(message: Message) -> None:
    raise AssertionError(f"nothing is sent here: {message}")
