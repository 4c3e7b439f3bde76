"""RSS of the whole service with many tenants touched once (issue 49): the service process as
deployed (`python -m app serve`, production settings, its defaults), on SecantusDB, so the
store's data lives in the database's process and not in the figures.

    python scripts/bench/whole_service_rss.py                  # 10,000 tenants, then 10,000 more
    python scripts/bench/whole_service_rss.py --tenants 500    # a smoke run
    # on an installation kept from `scale.py tenants --storage DIR --database NAME`:
    python scripts/bench/whole_service_rss.py --storage DIR --database NAME

A first service process creates 2 x `--tenants` tenants (`t000000`, ...: those that exist get a
new key through `POST /tenants/{id}/keys`), plus a few for the warm-up. Then a fresh process is
started and each tenant is touched once the way a user does: `GET /tools/`, `POST
/tools/rolldice/invoke` and a chat that calls that tool (the fake model), which fill every
per-tenant cache a request reaches (API key, tool catalog, secrets, outbound allow list, model
providers, rate and concurrency limits, change stamps). The process's RSS (/proc/<pid>/status) is
read after the warm-up, after `--tenants` tenants, and after `--tenants` more: past
TOOL_CACHE_MAX_TENANTS (10,000) the least recently used snapshots go, so the second half must
not add what the first did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import ROOT, Process, free_port
from load import start_secantus
from tenants import Service, create_one, service_env

WARM_UP = 100  # tenants touched before the first reading (each twice)
INVOKE = {"arguments": {"d": 6}}
CHAT = {"messages": [{"role": "user", "content": "roll a die"}], "tool_ids": ["rolldice"]}


async def keys_for(
    session: aiohttp.ClientSession, base: str, admin: str, names: list[str], concurrency: int
) -> dict[str, str]:
    """An API key for each tenant: created, or a new key for one that exists."""
    keys: dict[str, str] = {}
    pending = iter(names)

    async def worker() -> None:
        for name in pending:
            key = await create_one(session, base, admin, name)
            while key is None:  # it exists: a new key (a 503 is retried, as a client would)
                async with session.post(
                    f"{base}/tenants/{name}/keys", headers={"Authorization": f"Bearer {admin}"}
                ) as rotated:
                    if rotated.status == 200:
                        key = str((await rotated.json())["api_key"])
                    elif rotated.status != 503:
                        raise RuntimeError(f"key of {name}: {rotated.status}")
                    else:
                        await asyncio.sleep(0.5)
            keys[name] = key

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return keys


async def touch(
    session: aiohttp.ClientSession, base: str, keys: list[str], concurrency: int
) -> dict[str, int]:
    """Each tenant once: its tool list, an invoke, a chat. Counts of answers by status."""
    statuses: dict[str, int] = {}
    pending = iter(keys)

    async def request(method: str, path: str, key: str, body: Any = None) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        async with session.request(method, f"{base}{path}", json=body, headers=headers) as r:
            await r.read()
            label = f"{method} {path} {r.status}"
            statuses[label] = statuses.get(label, 0) + 1

    async def worker() -> None:
        for key in pending:
            await request("GET", "/tools/", key)
            await request("POST", "/tools/rolldice/invoke", key, INVOKE)
            await request("POST", "/chat", key, CHAT)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS and its parts (anonymous memory is the heap), in KB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    n = args.tenants
    names = [f"t{number:06d}" for number in range(2 * n + WARM_UP)]
    model_port = free_port()
    model = Process(
        [sys.executable, "-m", "app", "fake-model", "--port", str(model_port)], model_port
    )
    db, url = start_secantus(Path(args.storage) if args.storage else out / "secantus")
    admin = secrets.token_urlsafe(32)
    database = args.database or f"rss_{secrets.token_hex(4)}"
    env = service_env(url, database, admin, f"http://127.0.0.1:{model_port}/v1")
    env["RATE_LIMIT_WRITES_PER_MINUTE"] = "0"  # the writer's creations and key rotations
    connector = aiohttp.TCPConnector(limit=max(args.concurrency, args.writers) + 4)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            writer = Service(env, out / "service-writer.log")
            try:
                await writer.ready_after(session)
                started = time.perf_counter()
                keys = await keys_for(session, writer.url, admin, names, args.writers)
                print(f"{len(keys)} keys in {time.perf_counter() - started:.0f} s", flush=True)
            finally:
                writer.stop()
            # The measured process: the deployment's defaults (rate limits on, as deployed).
            measured_env = {k: v for k, v in env.items() if k != "RATE_LIMIT_WRITES_PER_MINUTE"}
            measured_env.update(item.split("=", 1) for item in args.env)
            service = Service(measured_env, out / "service-measured.log")
            try:
                ready_s = await service.ready_after(session)
                pid = service.popen.pid
                warm = [keys[name] for name in names[2 * n :]]
                await touch(session, service.url, warm, args.concurrency)
                await touch(session, service.url, warm, args.concurrency)
                await asyncio.sleep(args.settle_s)
                readings = {"before": rss_kb(pid)}
                print(f"before: {readings['before']}", flush=True)
                statuses: dict[str, int] = {}
                for label, part in (
                    ("touched_once", names[:n]),
                    ("twice_as_many_touched", names[n : 2 * n]),
                ):
                    started = time.perf_counter()
                    counts = await touch(
                        session, service.url, [keys[name] for name in part], args.concurrency
                    )
                    for status, count in counts.items():
                        statuses[status] = statuses.get(status, 0) + count
                    took = time.perf_counter() - started
                    await asyncio.sleep(args.settle_s)
                    readings[label] = rss_kb(pid)
                    print(f"{label}: {readings[label]} ({took:.0f} s) {counts}", flush=True)
                cpu_s = service.cpu_s()
            finally:
                service.stop()
    finally:
        db.stop()
        model.stop()
    before = readings["before"]["VmRSS"]
    once = readings["touched_once"]["VmRSS"]
    return {
        "tenants": n,
        "database": database,
        "ready_s": ready_s,
        "cpu_s": cpu_s,
        "statuses": statuses,
        "readings_kb": readings,
        "rss_mb_before": before / 1024,
        "rss_mb_touched_once": once / 1024,
        "rss_mb_twice_as_many_touched": readings["twice_as_many_touched"]["VmRSS"] / 1024,
        "kb_per_tenant": (once - before) / n,
        "kb_per_tenant_second_half": (readings["twice_as_many_touched"]["VmRSS"] - once) / n,
        "settings": args.env,
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8, help="tenants touched at once")
    parser.add_argument("--writers", type=int, default=16, help="tenants created at once")
    parser.add_argument("--settle-s", type=float, default=3.0, help="pause before each reading")
    parser.add_argument("--storage", help="SecantusDB's directory (an installation kept)")
    parser.add_argument("--database", help="the database in it")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the measured process (a slow database's timeouts, say); repeatable",
    )
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "whole_service_rss"))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    figures = asyncio.run(measure(args))
    print(json.dumps(figures, indent=2))
    (Path(args.out) / "whole_service_rss.json").write_text(json.dumps(figures, indent=2))
    print(
        f"{figures['tenants']} tenants touched once: RSS {figures['rss_mb_before']:.1f} -> "
        f"{figures['rss_mb_touched_once']:.1f} MB ({figures['kb_per_tenant']:.2f} KB each); "
        f"{figures['tenants']} more: {figures['rss_mb_twice_as_many_touched']:.1f} MB "
        f"({figures['kb_per_tenant_second_half']:.2f} KB each)"
    )


if __name__ == "__main__":
    main()
