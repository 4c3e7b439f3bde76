"""The benchmark: toolgate's /chat against a naive AsyncOpenAI loop, in one run, on 127.0.0.1.

Starts its own fake model and the service (in-memory store, one worker, production settings,
access log off), interleaves service and baseline runs over several rounds, and prints medians
with min-max. Writes JSON and Markdown to bench-results/. Ratios are the headline.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import urlsplit

import aiohttp
import uvloop

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
INVOKE = "POST /tools/{tool_id}/invoke (function tool)"
MCP_CALL = "MCP tools/call over /mcp (function tool, protocol 2025-06-18)"
MCP_CALL_MODERN = "MCP tools/call over /mcp (function tool, protocol 2026-07-28)"
INVOKE_REST = "POST /tools/{tool_id}/invoke (external tool, local upstream)"
MCP_REST = "MCP tools/call over /mcp (external tool, protocol 2025-06-18)"
MCP_REST_MODERN = "MCP tools/call over /mcp (external tool, protocol 2026-07-28)"
INVOKE_MCP = "POST /tools/{tool_id}/invoke (MCP server's tool, streamable HTTP, local upstream)"
OUTBOUND = "outbound client alone, c=16 (CPU ms per request)"
# Slices of a few hundred requests: small enough that a drift of the machine's speed falls on
# every route alike, large enough to average a slice's own ups and downs.
SLICE = 500
SETTLE_S = 0.02
# The rows whose answers must show the tool ran (`tool_call_succeeded`).
TOOL_CALLS = frozenset(
    {INVOKE, INVOKE_REST, INVOKE_MCP, MCP_CALL, MCP_CALL_MODERN, MCP_REST, MCP_REST_MODERN}
)
# A route measured by `Bench.endpoints`: method, path, headers, JSON body.
Request = tuple[str, str, dict[str, str] | None, dict[str, Any] | None]
REST_TOOL = {
    "tool_id": "weather",
    "type": "external",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "url": "",  # the local upstream's, set in setup
        "method": "GET",
        "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def mcp_call(
    version: str, key: str, name: str = "roll_dice", arguments: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """A `tools/call` (of the seeded dice roller by default) as an MCP client sends it over
    streamable HTTP: stateless, one POST; 2026-07-28 carries its envelope in `_meta` and two
    headers."""
    params: dict[str, Any] = {"name": name, "arguments": arguments or {"d": 6}}
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": version,
    }
    if version >= "2026":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        }
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": name})
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, headers


def tool_call_succeeded(status: int, payload: bytes) -> None:
    """Raise unless `payload` is a tool call that ran: an invoke's `"status":"ok"`, an MCP
    result's `"isError":false`. A failed call answers 200 too (an upstream that is down is the
    tool's error, not the request's), and a row of failures would measure the wrong thing. A
    search of the bytes, not a parse: the client's CPU competes with the service's."""
    if status != 200 or (b'"status":"ok"' not in payload and b'"isError":false' not in payload):
        raise RuntimeError(f"a tool call failed: {status} {payload[:300]!r}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def core_split() -> tuple[set[int], set[int]] | None:
    """(the service's CPU, everyone else's) when there are two or more: the service (and the
    naive loop, the system it is compared with) on a core of its own, the load (this driver,
    the fake model, the upstream) on the rest, as a service's clients are other machines.
    Without it the scheduler placed the service beside its driver or not, run by run: /ping's
    CPU per request moved by up to a third between two processes of the same code measured
    together, and every ratio to it with it."""
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[-1]}, set(cpus[:-1])) if len(cpus) > 1 else None


class Process:
    """A server process on 127.0.0.1 whose CPU time and RSS we read from /proc."""

    def __init__(
        self,
        args: list[str],
        port: int,
        env: dict[str, str] | None = None,
        stderr: IO[str] | int = subprocess.PIPE,
        cpus: set[int] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.port = port
        self.popen = subprocess.Popen(
            args,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        # Placed from here, not in the child before its exec (`preexec_fn` is unsafe in a
        # process with threads, as this driver is); its measured work starts much later.
        if cpus is not None:
            os.sched_setaffinity(self.popen.pid, cpus)
        deadline = time.monotonic() + 120  # a loaded, shared machine starts slowly
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if self.popen.poll() is not None or time.monotonic() > deadline:
                    if self.popen.poll() is None:  # its stderr ends only once it has exited
                        self.popen.kill()
                        self.popen.wait()
                    error = self.popen.stderr.read() if self.popen.stderr else "see its log"
                    raise RuntimeError(f"{args} did not start: {error!r}") from None
                time.sleep(0.05)

    def cpu_s(self) -> float:
        """The process's CPU time (all its threads, user and system), to the nanosecond: the
        clock `time.process_time` reads in the naive loop, read here from outside through the
        process's CPU clock id (Linux's `MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`, what
        `clock_getcpuclockid` returns). /proc's utime and stime count 10 ms ticks: a slice of
        500 `/ping`s at 0.13 ms is 65 ms of CPU, read to within a tick or two."""
        try:
            return time.clock_gettime(((~self.popen.pid) << 3) | 2)
        except OSError:  # not Linux: the ticks
            fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.popen.terminate()
        self.popen.wait(15)


class _Connection(asyncio.Protocol):
    """One kept-alive connection of the driver: one request at a time, its answer framed by
    Content-Length (every route measured answers so)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False
        self.idle_since = 0.0  # when it went back to the pool

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        found = _LENGTH.search(self.buffer, 0, end)
        if found is None:
            waiter, self.waiter = self.waiter, None
            waiter.set_exception(RuntimeError(f"an answer without Content-Length: {data!r}"))
            return
        total = end + 4 + int(found[1])
        if len(self.buffer) >= total:
            answer = (int(self.buffer[9:12]), self.buffer[end + 4 : total])
            self.buffer = self.buffer[total:]
            waiter, self.waiter = self.waiter, None
            waiter.set_result(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            answered = bool(self.buffer)  # part of an answer came: never sent again
            error = ConnectionError("the server closed the connection")
            self.waiter.set_exception(error if answered else _Dropped(error))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)
IDLE_S = 10.0  # a kept-alive connection idle longer is dropped (the service keeps them 30 s)
DRIVE_TIMEOUT_S = 300.0  # a drive that takes longer has met a service that stopped answering


class _Dropped(ConnectionError):
    """The server closed a connection before any of its answer: a kept-alive connection it had
    just closed; the request is sent again on a new one."""


class Driver:
    """The benchmark's HTTP client: kept-alive connections on asyncio's protocol layer, requests
    written whole once and answers read by their Content-Length. An aiohttp session cost about
    0.15 ms of CPU a request here, more than the service's `/ping`: sharing two cores, it, not
    the service, set the pace of the cheap routes, and a service waiting for its next request
    spends more CPU on each (a wake-up per request instead of several requests per wake-up)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connection(self, host: str, port: int, *, fresh: bool = False) -> _Connection:
        idle = self._idle.get((host, port), [])
        recent = time.monotonic() - IDLE_S
        while idle and not fresh:
            connection = idle.pop()
            if not connection.closed and connection.idle_since > recent:
                return connection
            connection.close()
        _, made = await asyncio.get_running_loop().create_connection(_Connection, host, port)
        return made

    def _release(self, host: str, port: int, connection: _Connection) -> None:
        if not connection.closed and connection.waiter is None and not connection.buffer:
            connection.idle_since = time.monotonic()
            self._idle.setdefault((host, port), []).append(connection)
        else:  # closed, or left mid-answer: never reused
            connection.close()

    async def drive(
        self,
        method: str,
        url: str,
        *,
        count: int,
        concurrency: int,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        check: Callable[[int, bytes], None] | None = None,
    ) -> tuple[list[float], float]:
        """Send `count` requests with `concurrency` connections; per-request latencies and
        wall time."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        payload = json.dumps(body).encode() if body is not None else b""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
        latencies: list[float] = []
        todo = iter(range(count))

        async def worker() -> None:
            connection = await self._connection(host, port)
            try:
                for _ in todo:
                    started = time.perf_counter()
                    try:
                        status, answer = await connection.exchange(request)
                    except _Dropped:  # a kept-alive connection the service had just closed
                        connection.close()
                        connection = await self._connection(host, port, fresh=True)
                        status, answer = await connection.exchange(request)
                    if check:
                        check(status, answer)
                    elif status >= 400:
                        raise RuntimeError(f"{method} {url}: {status} {answer[:200]!r}")
                    latencies.append(time.perf_counter() - started)
            finally:
                self._release(host, port, connection)

        wall = time.perf_counter()
        async with asyncio.timeout(DRIVE_TIMEOUT_S):
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - wall

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(
        self,
        args: argparse.Namespace,
        service_env: dict[str, str] | None = None,
        tree: Path = ROOT,
    ) -> None:
        self.args = args
        self.results: dict[str, list[dict[str, float]]] = {}
        self.service_env = service_env or {}  # settings on top of the benchmark's own
        self.tree = tree  # the source tree the service runs (scripts/bench/compare.py: another)
        split = core_split() if getattr(args, "pin", False) else None
        self.service_cpus, self.load_cpus = split if split is not None else (None, None)

    def record(self, name: str, **figures: float) -> None:
        self.results.setdefault(name, []).append(figures)

    def _service_log(self) -> IO[str]:
        """The service's own log, kept next to the results (a pipe nobody reads would fill)."""
        # Scripts that reuse this harness without an --out of their own log beside its default.
        out = Path(getattr(self.args, "out", None) or ROOT / "bench-results")
        out.mkdir(parents=True, exist_ok=True)
        return (out / "service.log").open("a")

    def _start_service(self, env: dict[str, str]) -> Process:
        return Process(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app.asgi:app",
                "--port",
                str(self.service_port),
                "--no-access-log",
                "--loop",
                "uvloop",
                "--http",  # the protocol and proxy setting `python -m app serve` runs with
                "app.http.server:GuardedHttpProtocol",
                "--no-proxy-headers",
                "--log-level",
                "warning",
                "--timeout-keep-alive",
                "30",
            ],
            self.service_port,
            {**env, "PYTHONPATH": str(self.tree)},
            stderr=self._service_log(),
            cpus=self.service_cpus,
            cwd=self.tree,
        )

    async def setup(self) -> None:
        if self.load_cpus is not None:
            os.sched_setaffinity(0, self.load_cpus)  # this driver
        self.model_port, self.service_port = free_port(), free_port()
        self.upstream_port = free_port()
        self.fake = Process(  # the fake model's answers, on a lean server (model.py)
            [sys.executable, str(HERE / "model.py"), "--port", str(self.model_port)],
            self.model_port,
            {"PYTHONPATH": str(ROOT)},
            cpus=self.load_cpus,
        )
        self.upstream = Process(
            [sys.executable, str(HERE / "upstream.py"), "--port", str(self.upstream_port)],
            self.upstream_port,
            cpus=self.load_cpus,
        )
        self.mcp_port = free_port()
        self.mcp_upstream = Process(  # an MCP server's tool (INVOKE_MCP)
            [sys.executable, str(HERE / "mcp_upstream.py"), "--port", str(self.mcp_port)],
            self.mcp_port,
            stderr=subprocess.DEVNULL,  # a pipe nobody reads would fill and stop it
            cpus=self.load_cpus,
        )
        admin = secrets.token_urlsafe(32)
        env = {
            "APP_ENV": "production",
            "ADMIN_API_KEY": admin,
            "API_KEY_SECRET": secrets.token_urlsafe(32),
            "SECRETS_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
            "RATE_LIMIT_CHAT_PER_MINUTE": "0",  # the benchmark measures CPU, not the limits
            "RATE_LIMIT_WRITES_PER_MINUTE": "0",
            "MAX_CONCURRENT_CHATS_PER_TENANT": "0",
            "LOG_LEVEL": "WARNING",
            "OPENAI_BASE_URL": f"http://127.0.0.1:{self.model_port}/v1",
            "OPENAI_API_KEY": "bench",
            "MONGODB_URL": "",
            "OUTBOUND_ALLOW": f"127.0.0.1:{self.upstream_port},127.0.0.1:{self.mcp_port}",
            # The routes run at concurrency 10: a session pooled for each (the default keeps 8
            # a tenant, and each call past them would open and close a session of its own).
            "MCP_POOL_PER_TENANT": "16",
            **self.service_env,
        }
        try:
            self.service = self._start_service(env)
        except Exception:
            self.fake.stop()  # never leave the fake model behind when the service fails
            self.upstream.stop()
            self.mcp_upstream.stop()
            raise
        self.base = f"http://127.0.0.1:{self.service_port}"
        # Idle connections are dropped by the driver before the service's keep-alive (75 s) ends.
        connector = aiohttp.TCPConnector(limit=200, keepalive_timeout=10)
        self.session = aiohttp.ClientSession(connector=connector)  # the setup's requests
        self.driver = Driver()  # the measured ones
        admin_h = {"Authorization": f"Bearer {admin}"}
        self.key_value = await self._tenant("bench", admin_h)
        self.key = {"Authorization": f"Bearer {self.key_value}"}
        self.list_key = {"Authorization": f"Bearer {await self._tenant('bench-list', admin_h)}"}
        rest = json.loads(json.dumps(REST_TOOL))
        rest["function"]["url"] = f"http://127.0.0.1:{self.upstream_port}/weather"
        async with self.session.post(
            f"{self.base}/tools/create", json=rest, headers=self.key
        ) as response:
            assert response.status == 201, await response.text()
        server = {
            "name": "up",
            "type": "streamable-http",
            "url": f"http://127.0.0.1:{self.mcp_port}/mcp",
        }
        async with self.session.post(
            f"{self.base}/mcp-servers", json=server, headers=self.key
        ) as response:
            assert response.status == 201, await response.text()
        for index in range(50 - 3):  # 3 seeded function tools + 47 external tools = 50
            tool = {
                "tool_id": f"ext-{index:02d}",
                "type": "external",
                "tags": ["bench"],
                "function": {
                    "name": f"ext_{index:02d}",
                    "description": "An API.",
                    "url": "https://api.example.com/x",
                    "method": "GET",
                    "parameters": {"properties": {"q": {"type": "string"}}, "required": ["q"]},
                },
            }
            async with self.session.post(
                f"{self.base}/tools/create", json=tool, headers=self.list_key
            ) as response:
                assert response.status == 201, await response.text()

    async def _tenant(self, tenant_id: str, admin: dict[str, str]) -> str:
        async with self.session.post(
            f"{self.base}/tenants", json={"tenant_id": tenant_id}, headers=admin
        ) as response:
            return str((await response.json())["api_key"])

    def _chat_body(self, model: str) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": "Roll a six-sided die."}],
            "model": model,
            "context_arguments": {"user_id": "u-1"},
        }

    async def model_round_trip_ms(self, concurrency: int) -> float:
        """The model's own time for one call at this concurrency, seen from this driver."""
        body = {"model": "fake", "messages": [{"role": "user", "content": "x"}]}
        latencies, _ = await self.driver.drive(
            "POST",
            f"http://127.0.0.1:{self.model_port}/v1/chat/completions",
            count=self.args.round_trips * concurrency,
            concurrency=concurrency,
            body=body,
        )
        return 1000 * statistics.median(latencies)

    async def service_chats(self, model: str, count: int, concurrency: int) -> dict[str, float]:
        iterations = 0

        def check(status: int, payload: bytes) -> None:
            nonlocal iterations
            if status != 200:
                raise RuntimeError(f"/chat {status}: {payload[:300]!r}")
            iterations += json.loads(payload)["iterations"]

        cpu = self.service.cpu_s()
        latencies, wall = await self.driver.drive(
            "POST",
            f"{self.base}/chat",
            count=count,
            concurrency=concurrency,
            body=self._chat_body(model),
            headers=self.key,
            check=check,
        )
        cpu = self.service.cpu_s() - cpu
        return {
            "cpu_ms_per_iteration": 1000 * cpu / iterations,
            "chats_per_s": count / wall,
            "p50_ms": 1000 * percentile(latencies, 0.5),
            "p99_ms": 1000 * percentile(latencies, 0.99),
            "iterations": iterations,
        }

    def naive_chats(self, model: str, count: int, concurrency: int) -> dict[str, float]:
        out = subprocess.run(
            [
                sys.executable,
                str(HERE / "naive.py"),
                "--base-url",
                f"http://127.0.0.1:{self.model_port}/v1",
                "--model",
                model,
                "--chats",
                str(count),
                "--concurrency",
                str(concurrency),
                # The system compared with the service: on the service's CPU.
                "--cpus",
                ",".join(map(str, sorted(self.service_cpus or ()))),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        data = json.loads(out.stdout)
        return {
            "cpu_ms_per_iteration": 1000 * data["cpu_s"] / data["model_calls"],
            "chats_per_s": count / data["wall_s"],
            "p50_ms": 1000 * percentile(data["latencies"], 0.5),
            "p99_ms": 1000 * percentile(data["latencies"], 0.99),
        }

    async def endpoints(self, cases: dict[str, Request]) -> dict[str, dict[str, float]]:
        """Each route's requests/s and CPU per request (the upstream's apart), the routes
        interleaved in slices of `--slice` requests: a machine whose speed drifts (other work
        on it) drifts under all of them alike, so each route's ratio to `/ping` compares like
        with like. Each slice's CPU is read once the service has settled after its answers,
        outside its wall time."""
        count = self.args.requests
        size = max(1, min(getattr(self.args, "slice", SLICE), count))
        totals = {name: {"wall": 0.0, "cpu": 0.0, "upstream": 0.0, "sent": 0} for name in cases}
        while any(total["sent"] < count for total in totals.values()):
            for name, (method, path, headers, body) in cases.items():
                total = totals[name]
                batch = min(size, count - int(total["sent"]))
                if batch <= 0:
                    continue
                cpu, upstream_cpu = self.service.cpu_s(), self.upstreams_cpu_s()
                _, wall = await self.driver.drive(
                    method,
                    f"{self.base}{path}",
                    count=batch,
                    concurrency=10,
                    headers=headers,
                    body=body,
                    check=tool_call_succeeded if name in TOOL_CALLS else None,
                )
                # Work left after the answers (run records) counts for this slice.
                await asyncio.sleep(SETTLE_S)
                total["cpu"] += self.service.cpu_s() - cpu
                total["upstream"] += self.upstreams_cpu_s() - upstream_cpu
                total["wall"] += wall
                total["sent"] += batch
        return {
            name: {
                "requests_per_s": count / total["wall"],
                "cpu_ms_per_request": 1000 * total["cpu"] / count,
                "upstream_cpu_ms_per_request": 1000 * total["upstream"] / count,
            }
            for name, total in totals.items()
        }

    async def run(self) -> None:
        args = self.args
        await self.memory()  # first: counts chats from the service's start
        if not args.quick:
            self.naive_chats("fake-calls-1", 50, 1)  # warm-up: the fake model's first answers
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr)
            for model, label in (("fake-calls-1", "1 call"), ("fake-calls-3", "3 parallel calls")):
                for concurrency, count in ((1, args.chats_c1), (50, args.chats_c50)):
                    name = f"{label}, concurrency {concurrency}"
                    figures = await self.service_chats(model, count, concurrency)
                    if model == "fake-calls-1":  # two model calls per chat
                        own = 2 * await self.model_round_trip_ms(concurrency)
                        figures.update(
                            model_ms_per_chat=own,
                            added_p50_ms=figures["p50_ms"] - own,
                            added_p99_ms=figures["p99_ms"] - own,
                        )
                    self.record(f"toolgate: {name}", **figures)
                    self.record(f"naive: {name}", **self.naive_chats(model, count, concurrency))
            for name, figures in (await self.endpoints(self.endpoint_cases())).items():
                self.record(name, **figures)
            self.record(OUTBOUND, **self.outbound_alone())
        await self.slow_model()

    def upstreams_cpu_s(self) -> float:
        """The local upstreams' CPU (the REST API's and the MCP server's)."""
        return self.upstream.cpu_s() + self.mcp_upstream.cpu_s()

    def endpoint_cases(self) -> dict[str, Request]:
        """`/ping`, reads, and one tool call through each entry point: a function tool, and an
        external tool (a GET to the local upstream)."""
        invoke = {"arguments": {"d": 6}, "context_arguments": {"user_id": "u-1"}}
        weather = {"arguments": {"city": "Oslo"}}
        cases: dict[str, Request] = {
            "GET /ping": ("GET", "/ping", None, None),
            "GET /tools/{tool_id}": ("GET", "/tools/rolldice", self.list_key, None),
            "GET /tools/ (50 tools)": ("GET", "/tools/?limit=50", self.list_key, None),
            INVOKE: ("POST", "/tools/rolldice/invoke", self.key, invoke),
            INVOKE_REST: ("POST", "/tools/weather/invoke", self.key, weather),
            INVOKE_MCP: ("POST", "/tools/up__weather/invoke", self.key, weather),
        }
        for name, rest, version in (
            (MCP_CALL, None, "2025-06-18"),
            (MCP_CALL_MODERN, None, "2026-07-28"),
            (MCP_REST, "weather", "2025-06-18"),
            (MCP_REST_MODERN, "weather", "2026-07-28"),
        ):
            if rest is None:
                body, headers = mcp_call(version, self.key_value)
            else:
                body, headers = mcp_call(version, self.key_value, rest, {"city": "Oslo"})
            cases[name] = ("POST", "/mcp", headers, body)
        return cases

    def outbound_alone(self) -> dict[str, float]:
        out = subprocess.run(
            [
                sys.executable,
                str(HERE / "outbound.py"),
                "--url",
                f"http://127.0.0.1:{self.upstream_port}/weather",
                "--requests",
                str(self.args.requests),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        return dict(json.loads(out.stdout))

    async def slow_model(self) -> None:
        """100 concurrent chats whose model calls take 200 ms each: throughput vs the ideal."""
        figures = await self.service_chats("fake-calls-1-ms-200", self.args.slow_chats, 100)
        ideal = 100 / (2 * 0.2)
        self.record(
            "200 ms model, 100 concurrent chats",
            chats_per_s=figures["chats_per_s"],
            ideal_chats_per_s=ideal,
            ratio_to_ideal=figures["chats_per_s"] / ideal,
        )

    async def memory(self) -> None:
        """RSS after the service's first 1k chats and after 10k: it must not grow."""
        await self.service_chats("fake-calls-1", 1000, 50)
        rss_1k = self.service.rss_mb()
        await self.service_chats("fake-calls-1", self.args.memory_chats - 1000, 50)
        rss_10k = self.service.rss_mb()
        self.record(
            "RSS", rss_mb_after_1k=rss_1k, rss_mb_after_10k=rss_10k, growth_ratio=rss_10k / rss_1k
        )

    async def close(self) -> None:
        await self.session.close()
        self.driver.close()
        self.service.stop()
        self.fake.stop()
        self.upstream.stop()
        self.mcp_upstream.stop()


def summarize(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, list[float]]]:
    """name -> figure -> [median, min, max]."""
    return {
        name: {
            key: [
                statistics.median(r[key] for r in runs),
                min(r[key] for r in runs),
                max(r[key] for r in runs),
            ]
            for key in runs[0]
        }
        for name, runs in results.items()
    }


def headline(summary: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = []
    for label in ("1 call", "3 parallel calls"):
        for concurrency in (1, 50):
            ours = summary[f"toolgate: {label}, concurrency {concurrency}"]
            naive = summary[f"naive: {label}, concurrency {concurrency}"]
            ratio = ours["cpu_ms_per_iteration"][0] / naive["cpu_ms_per_iteration"][0]
            lines.append(
                f"CPU per model iteration, {label}, c={concurrency}: "
                f"{ours['cpu_ms_per_iteration'][0]:.3f} ms vs naive "
                f"{naive['cpu_ms_per_iteration'][0]:.3f} ms = {ratio:.2f}x"
            )
    ping = summary["GET /ping"]["requests_per_s"][0]
    for name in (
        "GET /tools/{tool_id}",
        "GET /tools/ (50 tools)",
        INVOKE,
        MCP_CALL,
        MCP_CALL_MODERN,
        INVOKE_REST,
        INVOKE_MCP,
        MCP_REST,
        MCP_REST_MODERN,
    ):
        cpu = summary[name]["cpu_ms_per_request"][0]
        ratio = cpu / summary["GET /ping"]["cpu_ms_per_request"][0]
        lines.append(
            f"{name}: {summary[name]['requests_per_s'][0] / ping:.2f}x of /ping requests/s, "
            f"{cpu:.3f} ms CPU per request ({ratio:.2f}x /ping's), upstream's own "
            f"{summary[name]['upstream_cpu_ms_per_request'][0]:.3f} ms"
        )
    outbound = summary[OUTBOUND]
    lines.append(
        f"Outbound client alone, c=16: toolgate's {outbound['client_cpu_ms_per_request'][0]:.3f} "
        f"ms, aiohttp {outbound['aiohttp_cpu_ms_per_request'][0]:.3f} ms, "
        f"httpx {outbound['httpx_cpu_ms_per_request'][0]:.3f} ms CPU per request"
    )
    c1 = summary["toolgate: 1 call, concurrency 1"]
    lines.append(
        f"Added latency per chat at c=1: p50 {c1['added_p50_ms'][0]:.2f} ms, "
        f"p99 {c1['added_p99_ms'][0]:.2f} ms (chat p50 {c1['p50_ms'][0]:.2f} ms, p99 "
        f"{c1['p99_ms'][0]:.2f} ms, minus the model's own {c1['model_ms_per_chat'][0]:.2f} ms "
        "for its two calls)"
    )
    c50 = summary["toolgate: 1 call, concurrency 50"]
    lines.append(
        f"Added latency per chat at c=50: p50 {c50['added_p50_ms'][0]:.2f} ms, "
        f"p99 {c50['added_p99_ms'][0]:.2f} ms (model's own {c50['model_ms_per_chat'][0]:.2f} ms)"
    )
    slow = summary["200 ms model, 100 concurrent chats"]
    lines.append(f"200 ms model, 100 concurrent: {slow['ratio_to_ideal'][0]:.3f} of ideal")
    rss = summary["RSS"]
    lines.append(
        f"RSS {rss['rss_mb_after_1k'][0]:.1f} MB after 1k chats, "
        f"{rss['rss_mb_after_10k'][0]:.1f} MB after 10k ({rss['growth_ratio'][0]:.3f}x)"
    )
    return lines


def markdown(summary: dict[str, dict[str, list[float]]], lines: list[str]) -> str:
    rows = ["| scenario | figure | median | min | max |", "| --- | --- | --- | --- | --- |"]
    for name, figures in summary.items():
        for key, (median, low, high) in figures.items():
            rows.append(f"| {name} | {key} | {median:.3f} | {low:.3f} | {high:.3f} |")
    return "\n".join(["# toolgate benchmark", "", *[f"- {line}" for line in lines], "", *rows, ""])


async def measure(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    bench = Bench(args)
    await bench.setup()
    try:
        await bench.run()
    finally:
        await bench.close()
    return bench.results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chats-c1", type=int, default=300)
    parser.add_argument("--chats-c50", type=int, default=1500)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--slow-chats", type=int, default=1000)
    parser.add_argument("--memory-chats", type=int, default=10_000)
    parser.add_argument(
        "--round-trips",
        type=int,
        default=300,
        help="calls to the fake model alone, per unit of concurrency (its own latency)",
    )
    parser.add_argument(
        "--slice",
        type=int,
        default=SLICE,
        help="requests of one route before the next route's, in the interleaved route rows",
    )
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the service and the naive loop on one CPU, the load on the others (core_split)",
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.chats_c1, args.chats_c50, args.requests = 1, 10, 60, 100
        args.slow_chats, args.memory_chats, args.round_trips = 100, 1100, 20
    results = uvloop.run(measure(args))
    summary = summarize(results)
    lines = headline(summary)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"bench-{stamp}.json").write_text(
        json.dumps({"summary": summary, "runs": results}, indent=1)
    )
    (out / f"bench-{stamp}.md").write_text(markdown(summary, lines))
    print(markdown(summary, lines))
    print(f"written: {out}/bench-{stamp}.md and .json")


if __name__ == "__main__":
    main()
