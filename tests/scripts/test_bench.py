"""The benchmark harness runs end to end and reports every scenario (figures are not judged)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.processes import ROOT, service_env

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SCENARIOS = {
    "toolgate: 1 call, concurrency 1",
    "naive: 1 call, concurrency 1",
    "toolgate: 3 parallel calls, concurrency 50",
    "naive: 3 parallel calls, concurrency 50",
    "GET /ping",
    "GET /tools/{tool_id}",
    "GET /tools/ (50 tools)",
    "POST /tools/{tool_id}/invoke (function tool)",
    "POST /tools/{tool_id}/invoke (external tool, local upstream)",
    "MCP tools/call over /mcp (external tool, protocol 2025-06-18)",
    "MCP tools/call over /mcp (external tool, protocol 2026-07-28)",
    "outbound client alone, c=16 (CPU ms per request)",
    "200 ms model, 100 concurrent chats",
    "RSS",
}


def bench_script(name: str, *arguments: str) -> str:
    """Runs scripts/bench/`name` with `arguments` as a user would (the service's environment
    for the scripts that start one) and returns what it printed; it must exit 0."""
    result = subprocess.run(
        [sys.executable, f"scripts/bench/{name}", *arguments],
        cwd=ROOT,
        env=service_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_quick_benchmark_writes_json_and_markdown(tmp_path: Path) -> None:
    stdout = bench_script("bench.py", "--quick", "--out", str(tmp_path))
    [report] = tmp_path.glob("bench-*.json")
    summary = json.loads(report.read_text())["summary"]
    assert SCENARIOS <= set(summary)
    assert summary["toolgate: 1 call, concurrency 1"]["iterations"][0] == 20  # 10 chats x 2
    assert "CPU per model iteration" in stdout
    outbound = summary["outbound client alone, c=16 (CPU ms per request)"]
    for client in ("client", "aiohttp", "httpx"):  # the client in use, and the two before it
        assert outbound[f"{client}_cpu_ms_per_request"][0] > 0
    assert next(tmp_path.glob("bench-*.md")).read_text().startswith("# toolgate benchmark")


def test_the_records_benchmark_reports_each_variant() -> None:
    stdout = bench_script("records.py", "--quick", "--variants", "off", "on")
    assert "record() with journal on:" in stdout
    rows = [line for line in stdout.splitlines() if line.startswith("| on | ")]
    assert len(rows) == 2  # concurrency 1 and 50, each with its difference to `off`


def test_the_tracing_benchmark_reports_each_variant_and_its_spans_arrive(tmp_path: Path) -> None:
    stdout = bench_script("tracing.py", "--quick", "--out", str(tmp_path))
    variants = {"off", "on", "on, 1 in 10 sampled", "on, none sampled"}
    rows = [line.split(" | ")[0].removeprefix("| ") for line in stdout.splitlines()]
    assert all(rows.count(variant) == 2 for variant in variants)  # concurrency 1 and 50
    [spans] = [line for line in stdout.splitlines() if line.startswith("spans received")]
    # `on` exported every chat's five spans (warm-up and both concurrencies: 90 chats at least).
    assert int(spans.split()[6]) >= 90 * 5, spans


def test_the_model_apis_benchmark_reports_each_api(tmp_path: Path) -> None:
    stdout = bench_script("model_apis.py", "--quick", "--out", str(tmp_path))
    for api in ("chat_completions", "responses", "anthropic_messages"):
        for concurrency in (1, 50):
            assert f"CPU per model iteration, {api}, c={concurrency}: " in stdout
    [report] = tmp_path.glob("model-apis-*.json")
    summary = json.loads(report.read_text())["summary"]
    assert summary["responses, concurrency 1"]["iterations"][0] == 20  # 10 chats x 2


@pytest.mark.parametrize(
    "payload",
    [
        b'{"run_id":"r","tool_id":"weather","status":"ok","content":"21","error":null}',
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}',
        b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"isError":false}}\r\n',
    ],
)
def test_the_benchmark_takes_a_tool_call_that_ran(payload: bytes) -> None:
    _bench().tool_call_succeeded(200, payload)


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        (200, b'{"status":"error","error":{"kind":"unreachable","message":"refused"}}'),
        (200, b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}'),
        (200, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}}'),
        (429, b'{"status":"ok"}'),
    ],
)
def test_the_benchmark_stops_at_a_tool_call_that_failed(status: int, payload: bytes) -> None:
    """A row of failed calls (the upstream down) would be measured as if they ran."""
    with pytest.raises(RuntimeError, match="a tool call failed"):
        _bench().tool_call_succeeded(status, payload)


def _bench() -> ModuleType:
    """scripts/bench/bench.py, a script rather than a package module."""
    return _script("bench")


async def test_the_upstream_answers_each_request_of_a_kept_alive_connection() -> None:
    """The benchmark's stand-in REST API: requests in pieces, two in one packet, a body to
    skip; a head that never ends or a length that is no number closes the connection."""
    upstream = _script("upstream")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(upstream.Api, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    answer = upstream.RESPONSE
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        get = b"GET /weather?city=Oslo HTTP/1.1\r\nHost: x\r\n\r\n"
        post = b'POST /w HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{"a":1}'
        writer.write(get[:10])
        await writer.drain()
        writer.write(get[10:] + post[:-3])  # the rest of one, most of the next
        assert await reader.readexactly(len(answer)) == answer
        writer.write(post[-3:] + get + get)
        assert await reader.readexactly(3 * len(answer)) == answer * 3
        writer.close()
        endless = b"G" * (upstream.MAX_HEAD_BYTES + 1)  # closed only once all of it is read
        for broken in (b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", endless):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(broken)
            assert await reader.read() == b""  # closed, nothing answered
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


_SPIN = """
import sys, time
while time.process_time() < 0.2:
    pass
print(time.process_time(), flush=True)
sys.stdin.read()
"""


def test_a_process_cpu_time_is_read_to_the_nanosecond_from_outside() -> None:
    """`Process.cpu_s` reads the clock the process itself reads with `time.process_time` (the
    naive loop's): never behind it, and not in 10 ms ticks."""
    bench = _bench()
    process = object.__new__(bench.Process)  # only the child's pid matters here
    process.popen = subprocess.Popen(
        [sys.executable, "-c", _SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.popen.stdout is not None
        own = float(process.popen.stdout.readline())
        assert process.cpu_s() >= own >= 0.2
    finally:
        process.popen.kill()
        process.popen.wait()


def _chat(model: str, *, tool_result: bool = False) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Roll a die."}]
    if tool_result:
        messages += [{"role": "assistant", "content": None}, {"role": "tool", "content": "4"}]
    tools = [{"type": "function", "function": {"name": "roll_dice"}}]
    body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


async def _answer(reader: asyncio.StreamReader) -> dict[str, Any]:
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return json.loads(await reader.readexactly(length))  # type: ignore[no-any-return]


async def test_the_benchmark_model_answers_as_the_fake_model_does() -> None:
    """scripts/bench/model.py: the fake model's answers (`FakeModelApp`, the calls the model
    name asks for), request after request on one connection, a body in pieces; a chunked body
    closes the connection."""
    model = _script("model")
    app = model.FakeModelApp(tool="roll_dice", arguments='{"d": 6}', calls=1, latency_s=0.0)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: model.Model(app), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        first = _chat("fake-calls-3")
        writer.write(first[:30])
        await writer.drain()
        writer.write(first[30:] + _chat("fake-calls-1", tool_result=True))
        called = (await _answer(reader))["choices"][0]
        assert called["finish_reason"] == "tool_calls"
        assert [c["function"]["name"] for c in called["message"]["tool_calls"]] == ["roll_dice"] * 3
        answered = (await _answer(reader))["choices"][0]
        assert answered == {
            "index": 0,
            "message": {"role": "assistant", "content": "Tool results: 4"},
            "finish_reason": "stop",
        }
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert await reader.read() == b""  # closed, nothing answered
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\n{x}")
        assert await reader.read() == b""  # a body that is not JSON: closed, nothing answered
        writer.close()
        assert app.served == 2
    finally:
        server.close()
        await server.wait_closed()


async def test_the_benchmark_driver_sends_and_checks_each_request() -> None:
    """`Driver.drive` against the stand-in REST API: every request answered over kept-alive
    connections (reused by the next drive), each answer given to `check`; an answer that is
    an error stops it."""
    bench, upstream = _bench(), _script("upstream")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(upstream.Api, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    driver = bench.Driver()
    seen: list[tuple[int, bytes]] = []
    try:
        url = f"http://127.0.0.1:{port}/weather?city=Oslo"
        latencies, wall = await driver.drive(
            "POST", url, count=25, concurrency=4, body={"a": 1}, check=lambda *a: seen.append(a)
        )
        assert len(latencies) == 25 and wall > 0
        assert seen == [(200, upstream.ANSWER)] * 25
        assert sum(map(len, driver._idle.values())) == 4  # kept for the next drive
        await driver.drive("GET", url, count=5, concurrency=4)
        assert sum(map(len, driver._idle.values())) == 4

        def refuse(status: int, answer: bytes) -> None:
            raise RuntimeError("a tool call failed")

        with pytest.raises(RuntimeError, match="a tool call failed"):
            await driver.drive("GET", url, count=3, concurrency=1, check=refuse)
    finally:
        driver.close()
        server.close()
        await server.wait_closed()


async def test_the_benchmark_driver_sends_again_on_a_connection_the_server_closed() -> None:
    """The service closes kept-alive connections it finds idle (while the driver's loop was
    busy elsewhere, unaware): a request meeting one is sent again on a new connection, once."""
    bench, upstream = _bench(), _script("upstream")
    loop = asyncio.get_running_loop()
    made: list[Any] = []

    def api() -> Any:
        made.append(upstream.Api())
        return made[-1]

    server = await loop.create_server(api, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/weather"
    driver = bench.Driver()
    try:
        await driver.drive("GET", url, count=4, concurrency=2)
        for protocol in made:  # closed by the server; the driver has not run since
            protocol.transport.close()
        latencies, _ = await driver.drive("GET", url, count=4, concurrency=2)
        assert len(latencies) == 4
        assert len(made) == 4  # two new connections, one per worker
    finally:
        driver.close()
        server.close()
        await server.wait_closed()


def test_the_benchmark_puts_the_service_on_a_core_of_its_own() -> None:
    """`core_split`: the last CPU for the service (and the naive loop), the rest for the load;
    nothing to split on one CPU."""
    bench = _bench()
    cpus = sorted(os.sched_getaffinity(0))
    split = bench.core_split()
    if len(cpus) < 2:
        assert split is None
    else:
        assert split == ({cpus[-1]}, set(cpus[:-1]))


def _script(name: str) -> ModuleType:
    """A script of scripts/bench/, loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
