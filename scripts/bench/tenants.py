"""The tenant axis of the scale benchmark (`python scripts/bench/scale.py tenants`): at 1,000 and
10,000 tenants on SecantusDB (a MongoDB-wire server), with the deployment's defaults:

- the tenant creation rate (POST /tenants, `--concurrency` at once);
- namespaces (collections + indexes) the installation holds, and per tenant created;
- start-up: one replica from its process start to /readyz 200, with its RSS then; three
  replicas started at once, until the last is ready;
- an idle tenant's first chat during a database outage (its keys and tools loaded once by that
  replica, then idle past every cache TTL), and a chat of a tenant that replica never loaded.

Figures are reported, not judged (SecantusDB is ~2 ms per operation: never a performance
figure for MongoDB itself; what matters is how each figure grows from 1,000 to 10,000).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from pymongo import AsyncMongoClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import ROOT, Process, free_port
from load import start_secantus

RETRIED = [0]  # creations answered 503 and sent again
STARTING, STARTED = "Waiting for application startup.", "Application startup complete."
CHAT = {"messages": [{"role": "user", "content": "roll a die"}], "tool_ids": ["rolldice"]}


class Service:
    """One `python -m app serve` process, timed from its spawn."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("w")
        self.started = time.perf_counter()
        self.spawned_at = datetime.now(UTC)
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(self.port)],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    async def ready_after(self, session: aiohttp.ClientSession, bound_s: float = 600) -> float:
        """Seconds from the spawn to /readyz 200."""
        while time.perf_counter() - self.started < bound_s:
            if self.popen.poll() is not None:
                raise RuntimeError(f"the service exited; see {self.log.name}")
            try:
                async with session.get(f"{self.url}/readyz") as answer:
                    if answer.status == 200:
                        return time.perf_counter() - self.started
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.02)
        raise RuntimeError(f"not ready within {bound_s} s; see {self.log.name}")

    def cpu_s(self) -> float:
        """CPU seconds the process used so far (all threads): start-up's cost whatever the
        machine's load (a shared machine's wall clock says more about its neighbours)."""
        return time.clock_gettime(((~self.popen.pid) << 3) | 2)

    def stamps(self) -> dict[str, datetime]:
        """When the lifespan started and ended, as the process logged them."""
        found = {}
        for line in Path(self.log.name).read_text().splitlines():
            for marker in (STARTING, STARTED):
                if marker in line:
                    found[marker] = datetime.fromisoformat(json.loads(line)["ts"])
        return found

    def startup_s(self) -> float:
        """From the lifespan's start to its end, as the process logged them."""
        stamps = self.stamps()
        return (stamps[STARTED] - stamps[STARTING]).total_seconds()

    def before_lifespan_s(self) -> float:
        """From the spawn to the lifespan's start: the interpreter, imports, settings, the app
        built (wall clock: on a busy machine mostly waiting for a CPU)."""
        return (self.stamps()[STARTING] - self.spawned_at).total_seconds()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.log.close()


async def create_one(
    session: aiohttp.ClientSession, base: str, admin: str, tenant_id: str
) -> str | None:
    """POST /tenants until it is done: its key (None: it exists already)."""
    while True:  # a 503 (the database too slow for once) is retried, as a client would
        async with session.post(
            f"{base}/tenants",
            json={"tenant_id": tenant_id},
            headers={"Authorization": f"Bearer {admin}"},
        ) as answer:
            if answer.status == 201:
                return str((await answer.json())["api_key"])
            if answer.status == 409:  # a retried first try went through late; or a kept run's
                return None
            if answer.status != 503:
                raise RuntimeError(f"POST /tenants: {answer.status} {await answer.text()}")
            RETRIED[0] += 1
        await asyncio.sleep(0.5)


async def create_tenants(
    session: aiohttp.ClientSession, base: str, admin: str, first: int, last: int, concurrency: int
) -> float:
    """Tenants first..last-1 (`t<number>`); tenants created per second."""
    numbers = iter(range(first, last))
    started = time.perf_counter()

    async def creator() -> None:
        for number in numbers:
            await create_one(session, base, admin, f"t{number:06d}")

    await asyncio.gather(*(creator() for _ in range(concurrency)))
    return (last - first) / max(time.perf_counter() - started, 1e-9)


async def tenant_count(url: str, database: str) -> int:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        return int(await client[database]["tenants"].count_documents({}))
    finally:
        await client.close()


async def namespaces(url: str, database: str) -> int:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    total = 0
    try:
        for name in await client.list_database_names():
            if name == database or name.startswith(f"{database}-"):
                for collection in await client[name].list_collection_names():
                    found = await (await client[name][collection].list_indexes()).to_list(None)
                    total += 1 + len(found)
    finally:
        await client.close()
    return total


async def start_up(env: dict[str, str], out: Path, replicas: int, label: str) -> dict[str, float]:
    """Start `replicas` processes at once: when each was ready, and the first one's RSS."""
    services = [Service(env, out / f"service-{label}-{n}.log") for n in range(replicas)]
    try:
        async with aiohttp.ClientSession() as session:
            ready = await asyncio.gather(*(s.ready_after(session) for s in services))
        first = services[0]
        return {
            "ready_s": max(ready),
            "first_ready_s": min(ready),
            "cpu_s": first.cpu_s(),
            "lifespan_s": first.startup_s(),
            "before_lifespan_s": first.before_lifespan_s(),
            # After the lifespan, until the poll saw /readyz 200 (polled every 20 ms).
            "after_lifespan_s": ready[0] - first.before_lifespan_s() - first.startup_s(),
            "import_cpu_s": import_cpu_s(env),
            "rss_mb": first.rss_mb(),
        }
    finally:
        for service in services:
            service.stop()


def import_cpu_s(env: dict[str, str]) -> float:
    """CPU seconds a process spends importing the app (`app.asgi`, which builds it), with the
    same settings: the part of start-up's CPU that is not the lifespan."""
    program = "import time, app.asgi; print(time.process_time())"
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[-1])


async def first_chat_in_an_outage(
    env: dict[str, str], out: Path, database: Process, admin: str, idle_s: float
) -> dict[str, float]:
    """An idle tenant's first chat once the replica knows the database is down."""
    service = Service(env, out / "service-outage.log")
    try:
        async with aiohttp.ClientSession() as session:
            await service.ready_after(session)
            keys = {}
            suffix = secrets.token_hex(3)
            for tenant in ("idle", "stranger"):
                key = await create_one(session, service.url, admin, f"{tenant}-{suffix}")
                assert key is not None
                keys[tenant] = {"Authorization": f"Bearer {key}"}
            # Past the change feed's next read: the creation's own stamp, read back, empties
            # this replica's cache of the tenant once (the cache is filled after that).
            await asyncio.sleep(2.5)
            async with session.post(f"{service.url}/chat", json=CHAT, headers=keys["idle"]) as hi:
                assert hi.status == 200, await hi.text()
            await asyncio.sleep(idle_s)  # idle past every cache TTL
            database.popen.kill()
            database.popen.wait()
            while True:  # the replica has seen the outage (its check, every second)
                async with session.get(f"{service.url}/healthz") as health:
                    if (await health.json())["database"] == "unreachable":
                        break
                await asyncio.sleep(0.05)
            figures = {}
            for tenant in ("idle", "stranger"):
                started = time.perf_counter()
                async with session.post(
                    f"{service.url}/chat", json=CHAT, headers=keys[tenant]
                ) as answer:
                    await answer.read()
                    figures[f"{tenant}_status"] = float(answer.status)
                figures[f"{tenant}_s"] = time.perf_counter() - started
            return figures
    finally:
        service.stop()


def service_env(url: str, database: str, admin: str, model: str) -> dict[str, str]:
    return {
        "APP_ENV": "production",
        "ADMIN_API_KEY": admin,
        "API_KEY_SECRET": secrets.token_urlsafe(32),
        "SECRETS_KEY": base64.b64encode(os.urandom(32)).decode(),
        "OPENAI_BASE_URL": model,
        "OPENAI_API_KEY": "scale",
        "MONGODB_URL": url,
        "MONGODB_DATABASE": database,
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",  # tenants are created as fast as they come
        "TOOLGATE_ENV_FILE": "",
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    sizes = [int(size) for size in args.sizes.split(",") if size]
    model_port = free_port()
    model = Process(
        [sys.executable, "-m", "app", "fake-model", "--port", str(model_port)], model_port
    )
    db, url = start_secantus(Path(args.storage) if args.storage else out / "secantus")
    admin, database = secrets.token_urlsafe(32), args.database or f"t_{secrets.token_hex(4)}"
    env = service_env(url, database, admin, f"http://127.0.0.1:{model_port}/v1")
    rows: list[dict[str, Any]] = []
    try:
        created = await tenant_count(url, database)  # a database kept from an earlier run
        for size in sizes:
            before = await namespaces(url, database)
            writer = Service(env, out / f"service-create-{size}.log")
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=args.concurrency + 4)
            ) as session:
                await writer.ready_after(session)
                rate = await create_tenants(
                    session, writer.url, admin, created, size, args.concurrency
                )
            writer.stop()
            after = await namespaces(url, database)
            row = {
                "tenants": size,
                "created_per_s": rate if size > created else None,
                "creations_retried": RETRIED[0],
                "namespaces": after,
                "namespaces_per_tenant": (after - before) / max(size - created, 1),
                "load_average": os.getloadavg(),
                "one": await start_up(env, out, 1, f"{size}-one"),
                "three": await start_up(env, out, 3, f"{size}-three"),
            }
            created = size
            rows.append(row)
            print(json.dumps(row), flush=True)
        outage = await first_chat_in_an_outage(env, out, db, admin, args.idle_s)
    finally:
        if db.popen.poll() is None:
            db.stop()
        model.stop()
    return {"sizes": rows, "outage": outage}


def markdown(result: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"Tenants on SecantusDB, {os.cpu_count()} cores (load averages "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}), "
        f"creation at concurrency {args.concurrency}. Ready: from the process's spawn (imports "
        "included) to /readyz 200; lifespan: start-up proper; CPU: the process's, to ready.",
        "",
        "| tenants | created/s | namespaces | per tenant created | one replica: ready (s) "
        "| spawn to lifespan (s) | its lifespan (s) | to /readyz 200 after (s) | its CPU (s) "
        "| import CPU (s) | its RSS (MB) | three at once: all ready (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["sizes"]:
        lines.append(
            f"| {row['tenants']:,} | {row['created_per_s'] or 0:.0f} | {row['namespaces']:,} | "
            f"{row['namespaces_per_tenant']:.2f} | {row['one']['ready_s']:.2f} | "
            f"{row['one']['before_lifespan_s']:.2f} | {row['one']['lifespan_s']:.2f} | "
            f"{row['one']['after_lifespan_s']:.2f} | {row['one']['cpu_s']:.2f} | "
            f"{row['one']['import_cpu_s']:.2f} | "
            f"{row['one']['rss_mb']:.0f} | {row['three']['ready_s']:.2f} |"
        )
    outage = result["outage"]
    lines += [
        "",
        f"An idle tenant's first chat during an outage: {outage['idle_status']:.0f} in "
        f"{outage['idle_s'] * 1000:.0f} ms; a tenant the replica never loaded: "
        f"{outage['stranger_status']:.0f} in {outage['stranger_s'] * 1000:.0f} ms.",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(measure(args))
    report = markdown(result, args)
    print("\n" + report)
    (Path(args.out) / "tenants.json").write_text(json.dumps(result, indent=2))
    (Path(args.out) / "tenants.md").write_text(report + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1000,10000", help="tenant counts, increasing")
    parser.add_argument("--concurrency", type=int, default=16, help="tenants created at once")
    parser.add_argument("--idle-s", type=float, default=5.0, help="idle before the outage")
    parser.add_argument("--storage", help="SecantusDB's directory (kept: measure again later)")
    parser.add_argument("--database", help="the database in it, from an earlier run")
