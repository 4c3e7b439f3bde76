"""The body limit's deadline on the event loop's clock moved by hand (the deadline is never
waited for): one timer per body, armed by the first read that has to wait (none for a body
already in), dropped when the body is in. Each test
waits on what the code does (a read starting, a task ending), bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import HTTPException
from starlette.types import Message, Receive, Scope, Send

from app.api.middleware import BodySizeLimitMiddleware
from tests.support.clock import LoopClock

TIMEOUT_S = 15.0
BOUND_S = 5.0  # what any wait below may take, in real seconds, before the test fails
SCOPE: Scope = {"type": "http", "method": "POST", "path": "/x", "headers": []}


@pytest.fixture
async def clock(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LoopClock]:
    loop = asyncio.get_running_loop()  # the test's own loop (function scope)
    ticking = LoopClock()
    monkeypatch.setattr(loop, "time", ticking)
    yield ticking


class Body:
    """A client's body: the pieces given so far, then silence (a read waits; `waiting` says
    one does)."""

    def __init__(self, *pieces: bytes, ends: bool = False) -> None:
        self.pieces = list(pieces)
        self.ends = ends
        self.reads = 0
        self.waiting = asyncio.Event()

    async def receive(self) -> Message:
        self.reads += 1
        if self.pieces:
            more = len(self.pieces) > 1 or not self.ends
            return {"type": "http.request", "body": self.pieces.pop(0), "more_body": more}
        self.waiting.set()
        await asyncio.Event().wait()  # the rest never comes
        raise AssertionError("unreachable")


def reader(into: list[Any]) -> Any:
    """An app that reads the whole body, keeping what each read gave."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            into.append(message)
            if not message.get("more_body", False):
                return

    return app


async def _within(awaitable: Any) -> Any:
    """`awaitable`'s result (or exception) once it is done, failing the test if that takes
    more than BOUND_S; it is never cancelled from here (a cancel would be mistaken for the
    timer's)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    assert done, f"not done within {BOUND_S:g} s"
    return task.result()


def _timers() -> list[float]:
    """When the body deadlines pending on the loop are due (asyncio's own loop, as pytest runs
    these; the bounds of `_within` are not among them)."""
    loop = asyncio.get_running_loop()
    return [
        h.when()
        for h in getattr(loop, "_scheduled", [])
        if not h.cancelled() and getattr(h._callback, "__name__", "") == "_expire"
    ]


async def test_a_read_waiting_past_the_deadline_is_a_408(clock: LoopClock) -> None:
    got: list[Any] = []
    gate = BodySizeLimitMiddleware(reader(got), max_bytes=100, timeout_s=TIMEOUT_S)
    body = Body(b"{")
    started = clock()
    task = asyncio.ensure_future(gate(SCOPE, body.receive, _no_send))
    await _within(body.waiting.wait())
    [due] = _timers()  # one timer, due at the deadline
    assert started <= due - TIMEOUT_S <= clock()
    clock.advance(TIMEOUT_S)
    with pytest.raises(HTTPException) as raised:
        await _within(task)
    assert raised.value.status_code == 408
    assert raised.value.detail == f"The request body did not arrive within {TIMEOUT_S:g} s."
    assert raised.value.headers == {"Connection": "close"}
    assert got == [{"type": "http.request", "body": b"{", "more_body": True}]


async def test_a_whole_body_arms_no_deadline_that_outlives_it(clock: LoopClock) -> None:
    got: list[Any] = []
    gate = BodySizeLimitMiddleware(reader(got), max_bytes=100, timeout_s=TIMEOUT_S)
    await gate(SCOPE, Body(b'{"a":', b"1}", ends=True).receive, _no_send)
    assert [m["body"] for m in got] == [b'{"a":', b"1}"]
    assert _timers() == []


async def test_a_read_that_waits_gets_what_arrives_under_the_deadline(clock: LoopClock) -> None:
    """The first read, nothing there yet: its wait is timed (the task sends it what arrives),
    and the timer goes once the body is in."""
    arrived = asyncio.get_running_loop().create_future()
    reading = asyncio.Event()
    reads = 0

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        reading.set()
        return await arrived  # type: ignore[no-any-return]

    got: list[Any] = []
    gate = BodySizeLimitMiddleware(reader(got), max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, receive, _no_send))
    await _within(reading.wait())
    assert len(_timers()) == 1  # its wait is timed
    clock.advance(TIMEOUT_S - 1)
    arrived.set_result({"type": "http.request", "body": b"{}", "more_body": False})
    await _within(task)
    assert got == [{"type": "http.request", "body": b"{}", "more_body": False}]
    assert reads == 1 and _timers() == []


async def test_a_receive_that_is_no_coroutine_is_timed_too(clock: LoopClock) -> None:
    """ASGI asks for an awaitable: a `receive` handing out futures is awaited as it is."""
    loop = asyncio.get_running_loop()
    reading = asyncio.Event()

    def receive() -> asyncio.Future[Message]:
        reading.set()
        return loop.create_future()  # never done

    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, receive, _no_send))  # type: ignore[arg-type]
    await _within(reading.wait())
    assert len(_timers()) == 1
    clock.advance(TIMEOUT_S)
    with pytest.raises(HTTPException) as raised:
        await _within(task)
    assert raised.value.status_code == 408


async def test_a_read_after_the_body_waits_without_a_deadline(clock: LoopClock) -> None:
    """After the body, `receive` only waits for the client to leave: never a 408."""
    waiting = asyncio.Event()

    async def receive() -> Message:
        if not waiting.is_set():
            waiting.set()
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await asyncio.Event().wait()  # a disconnect that never comes
        raise AssertionError("unreachable")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await receive()

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, receive, _no_send))
    await _within(waiting.wait())
    assert _timers() == []  # nothing left to interrupt the second read
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await _within(task)


@pytest.mark.parametrize("past_the_deadline", [False, True])
async def test_an_outside_cancel_stays_a_cancel(clock: LoopClock, past_the_deadline: bool) -> None:
    """The server stopping cancels a read; that is not the client's lateness, even when the
    deadline has passed by the time the loop runs the cancel."""
    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    body = Body(b"{")
    task = asyncio.ensure_future(gate(SCOPE, body.receive, _no_send))
    await _within(body.waiting.wait())
    if past_the_deadline:
        clock.advance(TIMEOUT_S + 1)  # the timer is due, not yet run
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await _within(task)


async def test_an_outside_cancel_in_the_timers_turn_stays_a_cancel(clock: LoopClock) -> None:
    """A cancel from outside that the loop runs in the same turn as the deadline, just before
    it, is still a cancel, not a 408."""
    gate = BodySizeLimitMiddleware(reader([]), max_bytes=100, timeout_s=TIMEOUT_S)
    body = Body(b"{")
    task = asyncio.ensure_future(gate(SCOPE, body.receive, _no_send))
    await _within(body.waiting.wait())
    [due] = _timers()
    asyncio.get_running_loop().call_at(due - 0.5, task.cancel)  # due just before the deadline
    clock.advance(TIMEOUT_S + 1)  # both due in the same turn, the outside cancel first
    with pytest.raises(asyncio.CancelledError):
        await _within(task)


async def test_the_deadline_passing_between_two_reads_is_a_408_at_a_read_that_waits(
    clock: LoopClock,
) -> None:
    """The app is busy (not reading) when the deadline passes: nothing is interrupted; its next
    read is tried, and since the rest of the body is not there, it is the 408."""
    busy, reached = asyncio.Event(), asyncio.Event()
    seen: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(await receive())
        reached.set()
        await busy.wait()  # work between reads, past the deadline: not interrupted
        seen.append("worked")
        await receive()

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    body = Body(b"{")
    task = asyncio.ensure_future(gate(SCOPE, body.receive, _no_send))
    await _within(reached.wait())
    assert _timers() == []  # the first piece was there: its read armed no timer
    clock.advance(TIMEOUT_S + 1)
    busy.set()
    with pytest.raises(HTTPException) as raised:
        await _within(task)
    assert raised.value.status_code == 408
    assert seen[-1] == "worked"
    assert body.reads == 2  # the late read was tried


@pytest.mark.parametrize("late_first", [True, False])
async def test_a_body_already_received_is_taken_after_the_deadline(
    clock: LoopClock, late_first: bool
) -> None:
    """As under `asyncio.timeout`, a read past the deadline that needs no wait returns its
    message: the app took its time (a slow key check) before reading a body that had arrived
    long before, or between two pieces already there. Only a read that has to wait is late."""
    got: list[Any] = []
    pause, reached = asyncio.Event(), asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if late_first:
            clock.advance(TIMEOUT_S * 2)  # the app took its time before its first read
        got.append(await receive())
        if not late_first:
            reached.set()
            await pause.wait()  # the deadline's timer runs while the app is not reading
        got.append(await receive())

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    task = asyncio.ensure_future(gate(SCOPE, Body(b'{"a":', b"1}", ends=True).receive, _no_send))
    if not late_first:
        await _within(reached.wait())
        assert _timers() == []  # nothing has waited: no timer
        clock.advance(TIMEOUT_S * 2)
        pause.set()
    await _within(task)
    assert [m["body"] for m in got] == [b'{"a":', b"1}"]
    assert _timers() == []


async def test_a_body_left_unread_holds_no_timer_past_its_request(clock: LoopClock) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the first piece, then the app answers without the rest

    gate = BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=TIMEOUT_S)
    await gate(SCOPE, Body(b"{").receive, _no_send)
    assert _timers() == []


@pytest.mark.parametrize(
    ("pieces", "declared"),
    [((b"x" * 60, b"x" * 60), None), ((b"x" * 101,), None), ((b"",), b"101"), ((b"",), b"1e3")],
)
async def test_a_body_past_the_limit_is_a_413(
    clock: LoopClock, pieces: tuple[bytes, ...], declared: bytes | None
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
    assert _timers() == []


async def _no_send(message: Message) -> None:
    raise AssertionError(f"nothing is sent here: {message}")
