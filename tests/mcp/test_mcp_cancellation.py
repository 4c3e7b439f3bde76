"""`/mcp` `tools/call` stops when its client gives up: a dropped connection or
`notifications/cancelled` cancels the tool, and the run is recorded `cancelled`. Over a real port:
a disconnect is only a disconnect on a real connection."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.mcp.test_mcp_gateway import Served, served
from tests.support import functions
from tests.support.apps import create_tenant
from tests.support.waiting import within

__all__ = ["served"]  # the fixture, reused
SLOW_CALL = {"name": "sleep_async", "arguments": {"seconds": 30}}


def _call(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": SLOW_CALL}


async def _runs(served: Served, headers: dict[str, str]) -> list[dict[str, Any]]:
    listed = await served.http.get("/runs", headers=headers)
    assert listed.status_code == 200, listed.text
    return list(listed.json()["items"])


async def _running(served: Served) -> bool:
    return bool(served.app.state.services.limits.active_runs == 1)


@pytest.fixture(autouse=True)
def _clear() -> None:
    functions.CANCELLED.clear()


async def test_a_client_that_disconnects_cancels_its_call(served: Served) -> None:
    tenant = await create_tenant(served.http, "acme")
    async with httpx.AsyncClient(base_url=served.url, headers=tenant.headers) as client:
        call = asyncio.create_task(client.post("/mcp", json=_call(1)))
        await within(lambda: _running(served), 10)
        call.cancel()  # the client gives up: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await call

    async def cancelled() -> bool:
        runs = await _runs(served, tenant.headers)
        return functions.CANCELLED == ["sleep_async"] and [r["stop_reason"] for r in runs] == [
            "cancelled"
        ]

    await within(cancelled, 10)
    [run] = await _runs(served, tenant.headers)
    assert run["kind"] == "mcp" and run["tool_calls"][0]["name"] == "sleep_async"
    assert served.app.state.services.limits.active_runs == 0


async def test_notifications_cancelled_stops_the_request_of_the_same_credential(
    served: Served,
) -> None:
    acme = await create_tenant(served.http, "acme")
    globex = await create_tenant(served.http, "globex")
    notice = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}}
    call = asyncio.create_task(served.http.post("/mcp", json=_call(41), headers=acme.headers))
    await within(lambda: _running(served), 10)
    # another tenant's notice with the same id reaches nothing
    other = await served.http.post("/mcp", json=notice, headers=globex.headers)
    assert other.status_code == 202
    assert not call.done() and functions.CANCELLED == []
    sent = await served.http.post("/mcp", json=notice, headers=acme.headers)
    assert sent.status_code == 202
    answer = await asyncio.wait_for(call, 10)
    assert answer.json()["error"] == {"code": -32800, "message": "Request cancelled"}
    assert functions.CANCELLED == ["sleep_async"]

    async def recorded() -> bool:
        runs = await _runs(served, acme.headers)
        return [r["stop_reason"] for r in runs] == ["cancelled"]

    await within(recorded, 10)


async def test_a_2026_07_28_client_that_asked_for_progress_and_disconnects_cancels_its_call(
    served: Served,
) -> None:
    """The same on the modern fast path's SSE answer (a progress token was sent)."""
    tenant = await create_tenant(served.http, "acme")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "progressToken": "p-1",
    }
    body = {**_call(2), "params": {**SLOW_CALL, "_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "sleep_async",
    }
    async with httpx.AsyncClient(base_url=served.url, headers=tenant.headers) as client:
        quick = {**body, "params": {**body["params"], "arguments": {"seconds": 0}}}
        answered = await client.post("/mcp", json=quick, headers=headers)  # the SSE answer
        assert answered.headers["content-type"].startswith("text/event-stream"), answered.text
        assert '"resultType":"complete"' in answered.text
        call = asyncio.create_task(client.post("/mcp", json=body, headers=headers))
        await within(lambda: _running(served), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    async def cancelled() -> bool:
        runs = await _runs(served, tenant.headers)
        return functions.CANCELLED == ["sleep_async"] and "cancelled" in [
            r["stop_reason"] for r in runs
        ]

    await within(cancelled, 10)
    assert served.app.state.services.limits.active_runs == 0


async def test_a_call_cancelled_from_outside_is_not_taken_for_its_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer runs in the request's own task: a cancellation that is not the client's (the
    server shutting down) propagates, whichever of the client's own came before; the client's
    leaving, or its `notifications/cancelled`, end the call and nothing more."""
    from app.api.mcp_endpoint import CALLER, McpGateway
    from app.deps import TenantContext

    gateway = McpGateway()
    started = asyncio.Event()

    async def hangs(scope: Any, message: Any, send: Any) -> bool:
        started.set()
        await asyncio.Event().wait()  # never set: only a cancellation ends it
        return True

    monkeypatch.setattr(gateway, "_answer", hangs)
    scope = {"type": "http", CALLER: TenantContext("acme", services=None)}  # type: ignore[arg-type]
    leave = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def answer(request_id: int) -> bool:
        return await gateway._answered_unless_gone(scope, _call(request_id), receive, send)

    task = asyncio.create_task(answer(1))
    await started.wait()
    task.cancel()  # from outside
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gateway._running == {} and sent == []

    started.clear()
    task = asyncio.create_task(answer(2))
    await started.wait()
    leave.set()  # the client goes
    assert await task is True and sent == []  # nobody to answer
    leave.clear()

    started.clear()
    task = asyncio.create_task(answer(3))
    await started.wait()
    cancel = {"method": "notifications/cancelled", "params": {"requestId": 3}}
    assert gateway._cancel(scope, cancel)
    assert await task is True
    assert b"Request cancelled" in sent[-1]["body"] and not task.cancelled()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_only_a_call_still_running_gets_a_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call answered at once starts no task to watch its connection (most calls: a task per
    call was 3% of one); one still running after `WATCH_AFTER_S` does, and it is gone after."""
    from app.api import mcp_endpoint
    from app.deps import TenantContext

    gateway = mcp_endpoint.McpGateway()
    watchers: list[asyncio.Task[Any]] = []
    started: list[int] = []  # watchers made, run or not (a task cancelled unrun counts)
    watching, release = asyncio.Event(), asyncio.Event()

    async def watching_forever() -> None:
        watchers.append(asyncio.current_task())  # type: ignore[arg-type]
        watching.set()
        await asyncio.Event().wait()  # the client never leaves

    def watch(receive: Any, call: Any) -> Any:
        started.append(1)
        return watching_forever()

    async def quick(scope: Any, message: Any, send: Any) -> bool:
        return True

    async def slow(scope: Any, message: Any, send: Any) -> bool:
        await release.wait()
        return True

    async def receive() -> dict[str, Any]:
        raise AssertionError("only a watcher reads")

    def pending_watch_timers() -> list[Any]:
        loop = asyncio.get_running_loop()
        return [
            h
            for h in getattr(loop, "_scheduled", [])
            if not h.cancelled() and getattr(h._callback, "__name__", "") == "watch"
        ]

    monkeypatch.setattr(mcp_endpoint, "_stop_when_gone", watch)
    scope = {"type": "http", mcp_endpoint.CALLER: TenantContext("acme", services=None)}  # type: ignore[arg-type]
    monkeypatch.setattr(gateway, "_answer", quick)
    assert await gateway._answered_unless_gone(scope, _call(1), receive, _refuse)
    assert pending_watch_timers() == [] and started == []  # none made, none left to start

    monkeypatch.setattr(mcp_endpoint, "WATCH_AFTER_S", 0)  # "still running" from the next turn
    monkeypatch.setattr(gateway, "_answer", slow)
    before = asyncio.all_tasks()
    task = asyncio.create_task(gateway._answered_unless_gone(scope, _call(2), receive, _refuse))
    await asyncio.wait_for(watching.wait(), 5)
    [watcher] = watchers
    release.set()
    assert await asyncio.wait_for(task, 5) is True
    done, _ = await asyncio.wait({watcher}, timeout=5)
    assert done and watcher.cancelled()  # the watcher ended with its call
    assert asyncio.all_tasks() == before
    assert gateway._running == {}


async def _refuse(message: Any) -> None:
    raise AssertionError(f"nothing is sent here: {message}")


def _mcp_statuses(metrics: str) -> dict[str, float]:
    prefix = 'toolgate_http_requests_total{method="POST",route="/mcp",status="'
    return {
        line[len(prefix) : len(prefix) + 3]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith(prefix)
    }


@pytest.mark.parametrize("progress", [False, True], ids=["json", "sse-progress"])
async def test_a_client_that_gives_up_is_not_a_server_error(served: Served, progress: bool) -> None:
    """Issue 43: an MCP client that gave up was logged and counted as a 500. It is a 499 (the
    client closed the request), whichever way the call was being answered."""
    tenant = await create_tenant(served.http, "acme")
    call = _call(1)
    headers = {**tenant.headers, "Accept": "application/json, text/event-stream"}
    if progress:  # answered on an SSE stream of progress notifications
        call["params"] = {**SLOW_CALL, "_meta": {"progressToken": "p-1"}}
    async with httpx.AsyncClient(base_url=served.url, headers=headers) as client:
        task = asyncio.create_task(client.post("/mcp", json=call))
        await within(lambda: _running(served), 10)
        task.cancel()  # the client gives up: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await task
    await within(lambda: functions.CANCELLED == ["sleep_async"], 10)

    async def counted() -> bool:
        metrics = (await served.http.get("/metrics")).text
        return "499" in _mcp_statuses(metrics)

    await within(counted, 10)
    statuses = _mcp_statuses((await served.http.get("/metrics")).text)
    assert "500" not in statuses and statuses["499"] == 1, statuses
