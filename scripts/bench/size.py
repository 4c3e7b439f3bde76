"""The size axis: what a call costs as a tenant's catalog grows (issue 49), in one run.

    python scripts/bench/size.py [--sizes 10,100,1000,10000] [--rounds 3] [--requests 300]

Starts SecantusDB (a MongoDB-wire server: a large catalog is written in one insert, as the
embedded store cannot do quickly), the benchmark's fake model and the service (production
settings, access log off, rate limits off, TOOL_SEARCH_THRESHOLD=5 so that even the 10-tool
tenant's chats search). Each tenant holds real-API tools (scripts/bench/search_corpus.py) in
its `default` category beside the seeded function tools. Rows, each figure the service's CPU
(its process clock), the sizes interleaved in slices within each round:

- invoke: `POST /tools/rolldice/invoke` (c=10), CPU ms per call;
- chat with search: the model searches ("roll dice"), the search reveals `roll_dice`, the
  model calls it, then answers (three model calls), CPU ms per chat;
- chat with `tool_ids`: `["rolldice"]`, CPU ms per chat;
- MCP `tools/list`, first page: CPU ms per request;
- in use at 10 calls/s: invokes paced at 10 a second for `--paced-s`, CPU ms per second;
- a small tenant beside a big one: the 10-tool tenant's invokes per second alone, then while
  the largest tenant is in use (search chats at 10 a second);
- defaults: the invoke and `tool_ids` chat rows on a second service started with the
  deployment's defaults (access log on, limits on, run journal on), smallest and largest sizes.

Ratios are within one run (largest over smallest); the machine's noise moves every size alike.
The database's own CPU is not the service's and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from pymongo import AsyncMongoClient

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench import ROOT, Driver, Process, free_port, tool_call_succeeded  # noqa: E402
from load import start_secantus  # noqa: E402
from search_corpus import corpus  # noqa: E402

INVOKE = {"arguments": {"d": 6}, "context_arguments": {"user_id": "u-1"}}
SEARCH_CHAT = {
    "messages": [{"role": "user", "content": "Roll a die."}],
    "context_arguments": {"user_id": "u-1"},
}
IDS_CHAT = {**SEARCH_CHAT, "tool_ids": ["rolldice"]}
SETTLE_S = 5.0  # past TOOL_CACHE_TTL_S and two polls of the change stamps
# Runs per row and tenant: the defaults' rows stay under their 60 a minute.
DEFAULT_CHATS = 25
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


class SizeBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sizes = [int(n) for n in args.sizes.split(",")]
        self.results: dict[str, list[float]] = {}
        self.driver = Driver()

    def record(self, name: str, value: float) -> None:
        self.results.setdefault(name, []).append(value)

    def _env(self, defaults: bool) -> dict[str, str]:
        env = {
            "APP_ENV": "production",
            "ADMIN_API_KEY": self.admin,
            "API_KEY_SECRET": self.key_secret,
            "SECRETS_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
            "OPENAI_BASE_URL": f"http://127.0.0.1:{self.model_port}/v1",
            "OPENAI_API_KEY": "bench",
            "MONGODB_URL": self.mongodb_url,
            "MONGODB_DATABASE": self.database,
            "TOOL_SEARCH_THRESHOLD": "5",
            # SecantusDB reads a 10,000-tool collection in seconds (a mongod in milliseconds).
            "MONGODB_TIMEOUT_MS": "30000",
            "LOG_LEVEL": "WARNING",
            "RUN_JOURNAL_DIR": str(Path(self.args.out) / f"journal-{secrets.token_hex(3)}"),
        }
        if not defaults:
            env.update(
                ACCESS_LOG="false",
                RATE_LIMIT_CHAT_PER_MINUTE="0",
                RATE_LIMIT_WRITES_PER_MINUTE="0",
                MAX_CONCURRENT_CHATS_PER_TENANT="0",
                RUN_JOURNAL="off",
                LIMITS="local",
            )
        return env

    def _service(self, defaults: bool) -> Process:
        port = free_port()
        log = (Path(self.args.out) / f"size-service{'-defaults' if defaults else ''}.log").open("a")
        command = [sys.executable, "-m", "app", "serve", "--port", str(port)]
        return Process(command, port, self._env(defaults), stderr=log)

    async def setup(self) -> None:
        out = Path(self.args.out)
        self.db, self.mongodb_url = start_secantus(out / f"secantus-size-{secrets.token_hex(3)}")
        self.database = f"size_{secrets.token_hex(4)}"
        self.model_port = free_port()
        self.model = Process(
            [sys.executable, str(HERE / "model.py"), "--port", str(self.model_port)],
            self.model_port,
            {"PYTHONPATH": str(ROOT)},
        )
        self.admin, self.key_secret = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.service = self._service(defaults=False)
        self.base = f"http://127.0.0.1:{self.service.port}"
        docs = list(corpus(max(self.sizes)))
        self.keys: dict[int, dict[str, str]] = {}
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(self.mongodb_url)
        async with aiohttp.ClientSession() as session:
            for size in self.sizes:
                tenant = f"size{size}"
                async with session.post(
                    f"{self.base}/tenants",
                    json={"tenant_id": tenant},
                    headers={"Authorization": f"Bearer {self.admin}"},
                ) as created:
                    assert created.status == 201, await created.text()
                    self.keys[size] = {
                        "Authorization": f"Bearer {(await created.json())['api_key']}"
                    }
                async with session.get(f"{self.base}/tools/ids", headers=self.keys[size]) as seeded:
                    count = len(await seeded.json())
                stored = [_stored(doc) for doc in docs[: max(0, size - count - 1)]]
                if stored:
                    await client[self.database][f"tenant.{tenant}.tools"].insert_many(stored)
                # Written behind the service's back: its snapshot is read again once stale.
                async with session.post(
                    f"{self.base}/tools/create", json=_marker(tenant), headers=self.keys[size]
                ) as marked:
                    assert marked.status == 201, await marked.text()
        await client.close()

    async def cpu_ms(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any,
        *,
        count: int | None = None,
        concurrency: int = 10,
    ) -> float:
        count = count or self.args.requests
        started = self.service.cpu_s()
        check = tool_call_succeeded if path.endswith("/invoke") else None
        await self.driver.drive(
            method, f"{self.base}{path}", count=count, concurrency=concurrency,
            headers=headers, body=body, check=check,
        )  # fmt: skip
        await asyncio.sleep(0.05)  # run records written after the answers count too
        return 1000 * (self.service.cpu_s() - started) / count

    async def paced(self, headers: dict[str, str], seconds: float, path: str, body: Any) -> float:
        """The service's CPU ms per second while one tenant is called 10 times a second."""
        started, cpu = time.monotonic(), self.service.cpu_s()
        sent = 0
        while (elapsed := time.monotonic() - started) < seconds:
            await self.driver.drive(
                "POST", f"{self.base}{path}", count=1, concurrency=1, headers=headers, body=body
            )
            sent += 1
            await asyncio.sleep(max(0.0, sent / 10 - (time.monotonic() - started)))
        return 1000 * (self.service.cpu_s() - cpu) / elapsed

    async def warm(self) -> None:
        """Each tenant used once on every route first: its snapshot and search index are built
        once per revision (off the event loop), and no row should count that."""
        for size in self.sizes:
            for path, body, extra in self._routes():
                await self.driver.drive(
                    "POST", f"{self.base}{path}", count=3, concurrency=1,
                    headers={**self.keys[size], **extra}, body=body,
                )  # fmt: skip

    def _routes(self) -> list[tuple[str, Any, dict[str, str]]]:
        mcp = {"Accept": "application/json, text/event-stream"}
        return [
            ("/tools/rolldice/invoke", INVOKE, {}),
            ("/chat", SEARCH_CHAT, {}),
            ("/chat", IDS_CHAT, {}),
            ("/mcp", LIST, mcp),
        ]

    async def run(self) -> None:
        mcp = {"Accept": "application/json, text/event-stream"}
        await self.warm()
        for round_index in range(self.args.rounds):
            print(f"round {round_index + 1}/{self.args.rounds}", file=sys.stderr)
            for size in self.sizes:
                key = self.keys[size]
                self.record(f"invoke|{size}", await self.cpu_ms(
                    "POST", "/tools/rolldice/invoke", key, INVOKE))  # fmt: skip
                self.record(f"chat with search|{size}", await self.cpu_ms(
                    "POST", "/chat", key, SEARCH_CHAT))  # fmt: skip
                self.record(f"chat with tool_ids|{size}", await self.cpu_ms(
                    "POST", "/chat", key, IDS_CHAT))  # fmt: skip
                self.record(f"MCP tools/list first page|{size}", await self.cpu_ms(
                    "POST", "/mcp", {**key, **mcp}, LIST))  # fmt: skip
                self.record(f"in use at 10 calls/s (CPU ms per s)|{size}", await self.paced(
                    key, self.args.paced_s, "/tools/rolldice/invoke", INVOKE))  # fmt: skip
            await self.beside()
        await self.defaults()

    async def throughput(self, headers: dict[str, str]) -> float:
        count = self.args.requests
        _, wall = await self.driver.drive(
            "POST", f"{self.base}/tools/rolldice/invoke", count=count, concurrency=10,
            headers=headers, body=INVOKE, check=tool_call_succeeded,
        )  # fmt: skip
        return count / wall

    async def beside(self) -> None:
        small, big = self.keys[min(self.sizes)], self.keys[max(self.sizes)]
        alone = await self.throughput(small)
        load = asyncio.create_task(self.paced(big, 3600, "/chat", SEARCH_CHAT))
        try:
            together = await self.throughput(small)
        finally:
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
        self.record("small tenant beside a big one (throughput ratio)|-", together / alone)

    async def defaults(self) -> None:
        """The invoke and tool_ids rows on the deployment's defaults: 4 at a time (under the
        8 concurrent runs a tenant may have), and as many chats as a minute's limit allows."""
        self.service.stop()
        self.service = self._service(defaults=True)
        self.base = f"http://127.0.0.1:{self.service.port}"
        # Built once before they count, and read again once the change stamps are watched
        # (a snapshot read before a fresh process's second poll of the stamps is refreshed
        # once on its TTL: a start-up cost, not a per-call one).
        for _ in range(3):  # built; refreshed once in the background; then kept
            for size in (min(self.sizes), max(self.sizes)):
                await self.driver.drive(
                    "POST", f"{self.base}/tools/rolldice/invoke", count=1, concurrency=1,
                    headers=self.keys[size], body=INVOKE,
                )  # fmt: skip
            await asyncio.sleep(SETTLE_S)
        for size in (min(self.sizes), max(self.sizes)):
            key = self.keys[size]
            invoke = "/tools/rolldice/invoke"
            self.record(f"defaults: invoke|{size}", await self.cpu_ms(
                "POST", invoke, key, INVOKE, count=DEFAULT_CHATS, concurrency=4))  # fmt: skip
            self.record(f"defaults: chat with tool_ids|{size}", await self.cpu_ms(
                "POST", "/chat", key, IDS_CHAT, count=DEFAULT_CHATS, concurrency=4))  # fmt: skip

    async def close(self) -> None:
        """Whatever setup started, also when it failed half-way."""
        self.driver.close()
        for name in ("service", "model", "db"):
            process = getattr(self, name, None)
            if process is not None:
                process.stop()


def _stored(doc: dict[str, Any]) -> dict[str, Any]:
    stored = {k: v for k, v in doc.items() if k not in ("category_description", "api")}
    stored["category"] = "default"
    return stored


def _marker(tenant: str) -> dict[str, Any]:
    return {
        "tool_id": "size-marker",
        "type": "external",
        "function": {
            "name": "size_marker",
            "description": f"Marks {tenant}'s catalog as written.",
            "url": "https://api.example.com/marker",
            "method": "GET",
            "parameters": {"properties": {}, "required": []},
        },
    }


def report(results: dict[str, list[float]], sizes: list[int]) -> str:
    rows = ["| row | size | median | min | max |", "| --- | --- | --- | --- | --- |"]
    medians: dict[tuple[str, str], float] = {}
    for key, values in results.items():
        name, size = key.split("|")
        medians[(name, size)] = statistics.median(values)
        rows.append(
            f"| {name} | {size} | {statistics.median(values):.3f} | {min(values):.3f} | "
            f"{max(values):.3f} |"
        )
    lines = []
    small, big = str(min(sizes)), str(max(sizes))
    for name in sorted({n for n, _ in medians}):
        if (name, small) in medians and (name, big) in medians:
            ratio = medians[(name, big)] / medians[(name, small)]
            lines.append(f"- {name}: {big} tools / {small} tools = {ratio:.2f}x")
    beside = medians.get(("small tenant beside a big one (throughput ratio)", "-"))
    if beside is not None:
        lines.append(f"- a small tenant's throughput beside a big one in use: {beside:.2f}x")
    return "\n".join(["# toolgate size axis", "", *lines, "", *rows, ""])


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    bench = SizeBench(args)
    try:
        await bench.setup()
        await bench.run()
    finally:
        await bench.close()
    return bench.results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--paced-s", type=float, default=5.0)
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = uvloop.run(measure(args))
    text = report(results, [int(n) for n in args.sizes.split(",")])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    (out / f"size-{stamp}.json").write_text(json.dumps(results, indent=1))
    (out / f"size-{stamp}.md").write_text(text)
    print(text)
    print(f"written: {out}/size-{stamp}.md and .json")


if __name__ == "__main__":
    main()
