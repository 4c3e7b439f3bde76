"""Graceful shutdown of a real `python -m app serve` process on 127.0.0.1: on SIGTERM it stops
accepting, lets the chat in flight finish with 200, then closes and flushes its run record."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
import threading
import uuid
from typing import Any

import httpx
import orjson
import pytest
from pymongo import AsyncMongoClient

from app.exit_deadline import EXIT_CODE, SHUTDOWN_S
from tests.support import fake_model as script
from tests.support.apps import ADMIN, ADMIN_KEY, KEY_SECRET
from tests.support.fake_model import FakeModel
from tests.support.loop_watchdog import BOUND_S
from tests.support.processes import ROOT, loop_stalls, service_env, start_app, wait_serving
from tests.support.secantus import SecantusServer, free_port
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def start_service(port: int, **env: str) -> subprocess.Popen[str]:
    process = start_app("serve", "--port", str(port), **env)
    wait_serving(process, f"http://127.0.0.1:{port}/healthz")
    return process


async def test_sigterm_lets_the_chat_in_flight_finish(
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    secantus_server: SecantusServer,
) -> None:
    answer = script.text("finished after the signal")
    released = threading.Event()  # the model answers once the test has seen the refusal
    fake.reset(lambda request: dataclasses.replace(answer(request), released=released))
    port, database = free_port(), f"test_{uuid.uuid4().hex[:12]}"
    process = start_service(
        port,
        OPENAI_BASE_URL=f"{fake_model_server[1].url}/v1",
        OPENAI_API_KEY="sk-test",
        MONGODB_URL=secantus_server.url,
        MONGODB_DATABASE=database,
        ADMIN_API_KEY=ADMIN_KEY,
        API_KEY_SECRET=KEY_SECRET,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            key = (await client.post("/tenants", json={"tenant_id": "acme"}, headers=ADMIN)).json()
            headers = {"Authorization": f"Bearer {key['api_key']}"}
            chat = asyncio.create_task(
                client.post(
                    "/chat",
                    json={"messages": [{"role": "user", "content": "hi"}], "tool_ids": []},
                    headers=headers,
                )
            )
            await within(lambda: bool(fake.requests), 10)  # the chat waits on the model
            assert await asyncio.to_thread(loop_stalls, base, BOUND_S) is None
            process.send_signal(signal.SIGTERM)

            async def refusing() -> bool:
                try:
                    async with httpx.AsyncClient(timeout=2) as fresh:
                        await fresh.get(f"{base}/healthz")
                except httpx.ConnectError:
                    return True
                return False

            # No longer accepting: a new connection is refused while the chat still runs.
            await within(refusing, 10)
            assert not chat.done()
            released.set()
            response = await chat
        assert response.status_code == 200, response.text
        assert response.json()["message"]["content"] == "finished after the signal"
        output, _ = process.communicate(timeout=30)
        # uvicorn re-raises the signal once shut down, so the exit status says "SIGTERM".
        assert process.returncode in (0, -signal.SIGTERM), output
    finally:
        released.set()  # a failed test leaves no reply held
        if process.poll() is None:
            process.kill()
            process.communicate()
    # The run record was written before the process exited.
    run_id = response.json()["run_id"]
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus_server.url)
    try:
        runs = client[database]["runs"]
        stored = await runs.find_one({"_id": run_id, "tenant_id": "acme"})
        assert stored is not None and stored["stop_reason"] == "completed"
        await client.drop_database(database)
    finally:
        await client.close()
    # Its log is JSON lines, shutdown included.
    lines = [orjson.loads(line) for line in output.splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert "Shutting down" in messages and "Application shutdown complete." in messages, output
    # The chat's access line came after the signal and before the shutdown completed.
    chat_line = next(i for i, line in enumerate(lines) if line.get("route") == "/chat")
    assert (
        messages.index("Shutting down")
        < chat_line
        < messages.index("Application shutdown complete.")
    )
    assert any(line.get("route") == "/chat" and line.get("status") == 200 for line in lines), output


def test_sigterm_ends_the_process_in_time_when_the_driver_is_wedged(
    secantus_server: SecantusServer,
) -> None:
    """Closing a wedged driver's client never returns (its topology lock is held for good):
    the process used to outlive its grace period (SIGTERM did not stop it). The shutdown's
    deadline ends it: exit code 70 and an ERROR line saying why, SHUTDOWN_S after the
    shutdown started."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tests.support.wedging_app:app", "--port", str(port)],
        cwd=ROOT,
        env=service_env(
            MONGODB_URL=secantus_server.url,
            MONGODB_DATABASE=f"test_{uuid.uuid4().hex[:12]}",
            ADMIN_API_KEY=ADMIN_KEY,
            API_KEY_SECRET=KEY_SECRET,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_serving(process, f"http://127.0.0.1:{port}/healthz")
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=SHUTDOWN_S + 25)  # the bound, and then some for a busy host
        output = process.stdout.read() if process.stdout else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == EXIT_CODE, output[-2000:]
    assert "shutdown did not finish within 5 s" in output
