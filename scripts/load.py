"""Load and soak: mixed CRUD and chat traffic at a fixed rate for a bounded time.

Starts the fake model (`python -m app fake-model`) and the service (`python -m app serve`,
in-memory store unless MONGODB_URL is set) on 127.0.0.1, creates tenants, then sends requests
open-loop at --rate per second for --duration seconds: reads, tool create/update/delete,
secret writes, whole and streamed chats that call a function tool. It reports each operation's
count, unexpected errors, p50 and p99 latency, and the service's RSS over time with its slope.

    python scripts/load.py --duration 600 --rate 40        # the 10-minute soak
    python scripts/load.py --duration 20 --rate 20         # a smoke run
    # several workers on a MongoDB-wire server (SecantusDB, started here), closed-loop chats:
    python scripts/load.py --secantus --workers 4 --chat-concurrency 128 --duration 10
    # the same while other clients keep the database busy (trust issue, item 11):
    python scripts/load.py --secantus --workers 4 --chat-concurrency 128 --duration 30 \
        --db-writers 1

Exit status 1 when any request failed unexpectedly or memory grew past --max-growth-mb.
Rate limits are off for the run (it measures the service, not the limiter).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))
from bench import ROOT, Process, free_port

WEIGHTS = {
    "get_tool": 30,
    "list_tools": 15,
    # As many deletes as creates: the stored data stays level, so memory growth means a leak.
    "create_tool": 9,
    "update_tool": 8,
    "delete_tool": 9,
    "put_secret": 5,
    "chat": 19,
    "chat_stream": 5,
}


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    dropped: int = 0  # not sent: too many in flight (the service fell behind)

    def record(self, op: str, seconds: float, error: str | None) -> None:
        self.latencies.setdefault(op, []).append(seconds)
        if error is not None:
            self.errors.setdefault(op, []).append(error)


@dataclass
class Tenant:
    id: str
    headers: dict[str, str]
    own_tools: list[str] = field(default_factory=list)


def external_tool(tool_id: str, description: str = "load test") -> dict[str, Any]:
    return {
        "tool_id": tool_id,
        "type": "external",
        "function": {
            "name": tool_id.replace("-", "_"),
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "url": "https://api.example.com/weather",
            "method": "GET",
            "headers": {"Authorization": "Bearer {secret:weather_key}"},
        },
        "context_parameters": [{"name": "user_id"}],
    }


class Driver:
    def __init__(self, client: httpx.AsyncClient, tenants: list[Tenant], stats: Stats) -> None:
        self.client, self.tenants, self.stats = client, tenants, stats
        self.ids = itertools.count()

    async def run(self, op: str) -> None:
        tenant = random.choice(self.tenants)
        started = time.perf_counter()
        error = None
        try:
            error = await getattr(self, op)(tenant)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        self.stats.record(op, time.perf_counter() - started, error)

    async def _expect(self, response: httpx.Response, *ok: int) -> str | None:
        if response.status_code in ok:
            return None
        request = response.request
        return f"{request.method} {request.url.path}: {response.status_code} {response.text[:200]}"

    async def get_tool(self, tenant: Tenant) -> str | None:
        tool_id = random.choice(["rolldice", "calculator", "current-time", *tenant.own_tools[-5:]])
        # One of this run's tools may be deleted while the read is on its way: 404 is the
        # right answer then. Judged before the request (a delete after it pops the id).
        allowed = (200, 404) if tool_id in tenant.own_tools else (200,)
        response = await self.client.get(f"/tools/{tool_id}", headers=tenant.headers)
        return await self._expect(response, *allowed)

    async def list_tools(self, tenant: Tenant) -> str | None:
        response = await self.client.get("/tools/?limit=50", headers=tenant.headers)
        return await self._expect(response, 200)

    async def create_tool(self, tenant: Tenant) -> str | None:
        if len(tenant.own_tools) >= 200:  # stay far below MAX_TOOLS_PER_TENANT
            return await self.delete_tool(tenant)
        tool_id = f"load-{next(self.ids)}"
        response = await self.client.post(
            "/tools/create", json=external_tool(tool_id), headers=tenant.headers
        )
        if response.status_code == 201:
            tenant.own_tools.append(tool_id)
        return await self._expect(response, 201)

    async def update_tool(self, tenant: Tenant) -> str | None:
        if not tenant.own_tools:
            return await self.create_tool(tenant)
        tool_id = random.choice(tenant.own_tools)
        body = external_tool(tool_id, description=f"updated {time.time()}")
        del body["tool_id"]
        response = await self.client.put(f"/tools/{tool_id}", json=body, headers=tenant.headers)
        return await self._expect(response, 200, 404)  # deleted meanwhile by a delete below

    async def delete_tool(self, tenant: Tenant) -> str | None:
        if not tenant.own_tools:
            return await self.create_tool(tenant)
        tool_id = tenant.own_tools.pop(random.randrange(len(tenant.own_tools)))
        response = await self.client.delete(f"/tools/{tool_id}", headers=tenant.headers)
        return await self._expect(response, 204)

    async def put_secret(self, tenant: Tenant) -> str | None:
        response = await self.client.put(
            f"/secrets/key-{random.randrange(20)}",
            json={"value": secrets.token_urlsafe(24)},
            headers=tenant.headers,
        )
        return await self._expect(response, 200, 201)

    def _chat_body(self, stream: bool) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": "roll a die"}],
            "tool_ids": ["rolldice"],
            "context_arguments": {"user_id": secrets.token_hex(8)},
            "stream": stream,
        }

    async def chat(self, tenant: Tenant) -> str | None:
        response = await self.client.post(
            "/chat", json=self._chat_body(False), headers=tenant.headers
        )
        if response.status_code == 200 and response.json()["tool_calls"][0]["status"] != "ok":
            return f"tool call failed: {response.json()['tool_calls'][0]}"
        return await self._expect(response, 200)

    async def chat_stream(self, tenant: Tenant) -> str | None:
        async with self.client.stream(
            "POST", "/chat", json=self._chat_body(True), headers=tenant.headers
        ) as response:
            text = (await response.aread()).decode()
        if response.status_code != 200 or "event: done" not in text:
            return f"stream: {response.status_code} {text[-200:]}"
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return 0.0
    xs, ys = [t / 60 for t, _ in samples], [m for _, m in samples]
    return statistics.linear_regression(xs, ys).slope


def start_secantus(storage: Path) -> tuple[Process, str]:
    """A SecantusDB server (a dev dependency) on a free port: a real MongoDB-wire database."""
    port = free_port()
    server = Process(
        [
            str(Path(sys.executable).with_name("secantusd-py")),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--storage-path",
            str(storage),
            "--standalone",
        ],
        port,
    )
    return server, f"mongodb://127.0.0.1:{port}/?directConnection=true"


# --db-writers: other clients keeping the database busy (as run records of thousands of chats
# per second do on a large machine), each writing batches of 500 documents back to back.
DB_WRITER = """
import asyncio, sys
from pymongo import AsyncMongoClient

async def main(url, writers):
    client = AsyncMongoClient(url)
    docs = client.load_pressure.docs
    async def write():
        while True:
            await docs.insert_many([{"n": n, "pad": "p" * 200} for n in range(500)])
            await docs.find_one({"n": 3})
    await asyncio.gather(*(write() for _ in range(writers)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    database: Process | None = None
    mongodb_url = os.environ.get("MONGODB_URL", "")
    if args.secantus:
        database, mongodb_url = start_secantus(Path(args.out) / "secantus")
    args.mongodb_url = mongodb_url
    if args.db_writers and not mongodb_url:
        sys.exit("--db-writers needs a database: --secantus or MONGODB_URL")
    try:
        return await _soak(args, mongodb_url)
    finally:
        if database is not None:
            database.stop()


async def _soak(args: argparse.Namespace, mongodb_url: str) -> dict[str, Any]:
    model_port, service_port = free_port(), free_port()
    model = Process(
        [sys.executable, "-m", "app", "fake-model", "--port", str(model_port)],
        model_port,
    )
    admin = secrets.token_urlsafe(32)
    log_path = Path(args.out) / "service.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {
        "APP_ENV": "production",
        "ADMIN_API_KEY": admin,
        "API_KEY_SECRET": secrets.token_urlsafe(32),
        "SECRETS_KEY": base64.b64encode(os.urandom(32)).decode(),
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
        "OPENAI_API_KEY": "load",
        "MONGODB_URL": mongodb_url,
        "MONGODB_DATABASE": f"load_{secrets.token_hex(4)}",  # a fresh database every run
        "RATE_LIMIT_CHAT_PER_MINUTE": "0",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
        "MAX_CONCURRENT_CHATS_PER_TENANT": "0",
    }
    try:
        with log_path.open("w") as log:
            service = Process(
                [
                    sys.executable,
                    "-m",
                    "app",
                    "serve",
                    "--port",
                    str(service_port),
                    "--workers",
                    str(args.workers),
                ],
                service_port,
                env,
                stderr=log,
            )
            try:
                return await _drive(args, f"http://127.0.0.1:{service_port}", admin, service)
            finally:
                service.stop()
    finally:
        model.stop()  # also when the service failed to start


async def _drive(
    args: argparse.Namespace, base: str, admin: str, service: Process
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.max_in_flight, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        tenants = []
        for index in range(args.tenants):
            created = await client.post(
                "/tenants",
                json={"tenant_id": f"load{index}"},
                headers={"Authorization": f"Bearer {admin}"},
            )
            created.raise_for_status()
            headers = {"Authorization": f"Bearer {created.json()['api_key']}"}
            tenant = Tenant(f"load{index}", headers)
            await client.put("/secrets/weather_key", json={"value": "k" * 32}, headers=headers)
            tenants.append(tenant)
        stats = Stats()
        driver = Driver(client, tenants, stats)
        if args.chat_concurrency:
            pressure = _database_pressure(args)
            try:
                return await _closed_loop_chats(args, driver, stats, service)
            finally:
                if pressure is not None:
                    pressure.kill()
                    pressure.wait()
        ops, weights = list(WEIGHTS), list(WEIGHTS.values())
        in_flight: set[asyncio.Task[None]] = set()
        rss: list[tuple[float, float]] = []
        started = time.monotonic()
        next_sample = started
        interval = 1 / args.rate
        for tick in itertools.count():
            due = started + tick * interval
            now = time.monotonic()
            if now - started >= args.duration:
                break
            if now >= next_sample:
                rss.append((now - started, service.rss_mb()))
                next_sample += args.sample_s
                print(
                    f"{now - started:7.0f} s  rss {rss[-1][1]:6.1f} MB  in flight {len(in_flight)}",
                    flush=True,
                )
            if due > now:
                await asyncio.sleep(due - now)
            if len(in_flight) >= args.max_in_flight:
                stats.dropped += 1
                continue
            task = asyncio.create_task(driver.run(random.choices(ops, weights)[0]))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        await asyncio.gather(*in_flight)
        rss.append((time.monotonic() - started, service.rss_mb()))
    warm = [s for s in rss if s[0] >= min(60.0, args.duration / 4)]
    total = sum(len(v) for v in stats.latencies.values())
    return {
        "duration_s": args.duration,
        "rate_per_s": args.rate,
        "tenants": args.tenants,
        "requests": total,
        "unexpected_errors": sum(len(v) for v in stats.errors.values()),
        "dropped": stats.dropped,
        "operations": {
            op: {
                "count": len(values),
                "errors": len(stats.errors.get(op, [])),
                "p50_ms": round(percentile(values, 0.50) * 1000, 2),
                "p99_ms": round(percentile(values, 0.99) * 1000, 2),
            }
            for op, values in sorted(stats.latencies.items())
        },
        "error_samples": {op: errors[:3] for op, errors in stats.errors.items()},
        "rss_mb": {
            "samples": [(round(t), round(m, 1)) for t, m in rss],
            "after_warmup": round(warm[0][1], 1) if warm else None,
            "end": round(rss[-1][1], 1),
            "max": round(max(m for _, m in rss), 1),
            "slope_mb_per_min_after_warmup": round(slope_mb_per_min(warm), 3),
        },
    }


def _database_pressure(args: argparse.Namespace) -> subprocess.Popen[bytes] | None:
    if not args.db_writers:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", DB_WRITER, args.mongodb_url, str(args.db_writers)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _closed_loop_chats(
    args: argparse.Namespace, driver: Driver, stats: Stats, service: Process
) -> dict[str, Any]:
    """--chat-concurrency N: N clients each sending chats back to back for --duration."""
    deadline = time.monotonic() + args.duration

    async def client() -> None:
        while time.monotonic() < deadline:
            await driver.run("chat")

    await asyncio.gather(*(client() for _ in range(args.chat_concurrency)))
    values = stats.latencies.get("chat", [])
    return {
        "duration_s": args.duration,
        "workers": args.workers,
        "chat_concurrency": args.chat_concurrency,
        "requests": len(values),
        "chats_per_s": round(len(values) / args.duration, 1),
        "unexpected_errors": sum(len(v) for v in stats.errors.values()),
        "dropped": 0,
        "operations": {
            "chat": {
                "count": len(values),
                "errors": len(stats.errors.get("chat", [])),
                "p50_ms": round(percentile(values, 0.50) * 1000, 2),
                "p99_ms": round(percentile(values, 0.99) * 1000, 2),
            }
        },
        "error_samples": {op: errors[:5] for op, errors in stats.errors.items()},
        "rss_mb": {"samples": [], "end": round(service.rss_mb(), 1), "max": None},
    }


def markdown(report: dict[str, Any]) -> str:
    if "chat_concurrency" in report:
        chat = report["operations"]["chat"]
        return (
            f"Chats: {report['chat_concurrency']} clients for {report['duration_s']} s on "
            f"{report['workers']} worker(s): {report['requests']} chats "
            f"({report['chats_per_s']}/s), {report['unexpected_errors']} unexpected errors, "
            f"p50 {chat['p50_ms']} ms, p99 {chat['p99_ms']} ms.\n"
            + "".join(f"- {op}: {samples}\n" for op, samples in report["error_samples"].items())
        )
    lines = [
        f"Load: {report['duration_s']} s at {report['rate_per_s']}/s over {report['tenants']} "
        f"tenants: {report['requests']} requests, {report['unexpected_errors']} unexpected "
        f"errors, {report['dropped']} not sent (too many in flight).",
        "",
        "| operation | count | errors | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for op, row in report["operations"].items():
        lines.append(
            f"| {op} | {row['count']} | {row['errors']} | {row['p50_ms']} | {row['p99_ms']} |"
        )
    memory = report["rss_mb"]
    lines += [
        "",
        f"RSS: {memory['after_warmup']} MB after warm-up, {memory['end']} MB at the end, "
        f"max {memory['max']} MB; slope after warm-up {memory['slope_mb_per_min_after_warmup']} "
        "MB/min.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--rate", type=float, default=40, help="requests per second")
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--max-in-flight", type=int, default=200)
    parser.add_argument("--sample-s", type=float, default=10)
    parser.add_argument("--max-growth-mb", type=float, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=1, help="service worker processes")
    parser.add_argument(
        "--secantus", action="store_true", help="start a SecantusDB server as the database"
    )
    parser.add_argument(
        "--chat-concurrency",
        type=int,
        default=0,
        help="instead of the mixed open-loop traffic: this many clients sending chats back to back",
    )
    parser.add_argument(
        "--db-writers",
        type=int,
        default=0,
        help="with --chat-concurrency: this many other clients keep the database busy",
    )
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "load"))
    args = parser.parse_args()
    random.seed(args.seed)
    report = asyncio.run(soak(args))
    out = Path(args.out)
    (out / "load.json").write_text(json.dumps(report, indent=2))
    summary = markdown(report)
    (out / "load.md").write_text(summary + "\n")
    print(summary)
    memory = report["rss_mb"]
    grew = (memory["end"] - (memory.get("after_warmup") or memory["end"])) > args.max_growth_mb
    sys.exit(1 if report["unexpected_errors"] or grew else 0)


if __name__ == "__main__":
    main()
