"""The scale curve: chats/s and service CPU per chat at 1, 2 and 4 workers on a database server,
with shared limits (LIMITS=shared) and local ones (LIMITS=local), in one run.

Starts SecantusDB (a MongoDB-wire server, dev dependency), the fake model and, for each worker
count and limit mode, the service (`python -m app serve --workers N`, production settings, a
fresh database). Closed-loop clients send chats that call one function tool, spread over
several tenants; limits are on but high (a million chats a minute, 10,000 at once), so every
chat pays for the check and none is refused. Reported as ratios within the run:

- chats/s at N workers over 1 worker (same mode): the scale curve;
- CPU per chat, shared over local (same worker count): the cost of shared limits.

    python scripts/bench/scale.py                         # 1, 2, 4 workers, 20 s each
    python scripts/bench/scale.py --workers 1,2 --duration 5 --rounds 1   # a smoke run

The tenant axis (scripts/bench/tenants.py): creation rate, namespaces per tenant, start-up of
one and of three replicas at 1,000 and 10,000 tenants, an idle tenant's first chat during an
outage:

    python scripts/bench/scale.py tenants                 # 1,000 then 10,000 tenants
    python scripts/bench/scale.py tenants --sizes 100,300  # a smoke run

Every process (clients, model, database, workers) shares this machine's cores: the curve is
only meaningful where the cores outnumber the workers plus those helpers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import CLK_TCK, ROOT, Process, free_port
from load import start_secantus

MODES = ("local", "shared")
CHAT = {
    "messages": [{"role": "user", "content": "roll a die"}],
    "tool_ids": ["rolldice"],
    "context_arguments": {"user_id": "u-1"},
}


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children (uvicorn's worker processes)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(stat.parent.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


async def one_run(
    args: argparse.Namespace, workers: int, mode: str, model_url: str, db: tuple[Process, str]
) -> dict[str, Any]:
    database, mongodb_url = db
    admin = secrets.token_urlsafe(32)
    port = free_port()
    env = {
        "APP_ENV": "production",
        "ADMIN_API_KEY": admin,
        "API_KEY_SECRET": secrets.token_urlsafe(32),
        "SECRETS_KEY": base64.b64encode(os.urandom(32)).decode(),
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "scale",
        "MONGODB_URL": mongodb_url,
        "MONGODB_DATABASE": f"scale_{secrets.token_hex(4)}",
        "LIMITS": mode,
        "RATE_LIMIT_CHAT_PER_MINUTE": "1000000",
        "MAX_CONCURRENT_CHATS_PER_TENANT": "10000",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
        "ACCESS_LOG": "false",
    }
    command = [sys.executable, "-m", "app", "serve", "--port", str(port)]
    log_path = Path(args.out) / f"service-{workers}-{mode}.log"
    log = log_path.open("w")
    service = Process([*command, "--workers", str(workers)], port, env, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        connector = aiohttp.TCPConnector(limit=args.concurrency + 10)
        async with aiohttp.ClientSession(connector=connector) as session:
            tenants = []
            for index in range(args.tenants):
                async with session.post(
                    f"{base}/tenants",
                    json={"tenant_id": f"scale{index}"},
                    headers={"Authorization": f"Bearer {admin}"},
                ) as created:
                    key = (await created.json())["api_key"]
                tenants.append({"Authorization": f"Bearer {key}"})
            warm = await closed_loop(session, base, tenants, args.concurrency, args.warmup)
            cpu, db_cpu = tree_cpu_s(service.popen.pid), database.cpu_s()
            started = time.perf_counter()
            chats = await closed_loop(session, base, tenants, args.concurrency, args.duration)
            wall = time.perf_counter() - started
            cpu, db_cpu = tree_cpu_s(service.popen.pid) - cpu, database.cpu_s() - db_cpu
    finally:
        service.stop()
        log.close()
        await drop_database(mongodb_url, env["MONGODB_DATABASE"])
    # Each worker logs its shared-limit round trips when it stops.
    trips = sum(
        int(found)
        for found in re.findall(r"shared limits: (\d+) database round trips", log_path.read_text())
    )
    return {
        "workers": workers,
        "limits": mode,
        "chats": chats,
        "chats_per_s": chats / wall,
        "cpu_ms_per_chat": cpu * 1000 / chats,
        "db_cpu_ms_per_chat": db_cpu * 1000 / chats,
        "round_trips_per_chat": trips / (warm + chats),
    }


async def drop_database(url: str, name: str) -> None:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        await client.drop_database(name)
    finally:
        await client.close()
    await asyncio.sleep(1)  # let the server settle before the next run


async def closed_loop(
    session: aiohttp.ClientSession,
    base: str,
    tenants: list[dict[str, str]],
    concurrency: int,
    duration: float,
) -> int:
    deadline = time.perf_counter() + duration
    done = 0

    async def client(number: int) -> None:
        nonlocal done
        headers = tenants[number % len(tenants)]
        while time.perf_counter() < deadline:
            async with session.post(f"{base}/chat", json=CHAT, headers=headers) as answer:
                body = await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"chat: {answer.status} {body[:300]!r}")
            done += 1

    await asyncio.gather(*(client(n) for n in range(concurrency)))
    return done


def summarize(runs: list[dict[str, Any]], worker_counts: list[int]) -> list[dict[str, Any]]:
    rows = []
    for mode in MODES:
        for workers in worker_counts:
            mine = [r for r in runs if r["limits"] == mode and r["workers"] == workers]
            rows.append(
                {
                    "workers": workers,
                    "limits": mode,
                    "chats_per_s": statistics.median(r["chats_per_s"] for r in mine),
                    "cpu_ms_per_chat": statistics.median(r["cpu_ms_per_chat"] for r in mine),
                    "db_cpu_ms_per_chat": statistics.median(r["db_cpu_ms_per_chat"] for r in mine),
                    "round_trips_per_chat": statistics.median(
                        r["round_trips_per_chat"] for r in mine
                    ),
                }
            )
    for row in rows:
        one = next(r for r in rows if r["limits"] == row["limits"] and r["workers"] == 1)
        local = next(r for r in rows if r["limits"] == "local" and r["workers"] == row["workers"])
        row["speed_vs_1_worker"] = row["chats_per_s"] / one["chats_per_s"]
        row["cpu_vs_local"] = row["cpu_ms_per_chat"] / local["cpu_ms_per_chat"]
    return rows


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"Scale curve: {args.duration:g} s runs, {args.concurrency} clients, {args.tenants} "
        f"tenants, median of {args.rounds} round(s), {os.cpu_count()} cores.",
        "",
        "| workers | limits | chats/s | vs 1 worker | CPU ms/chat | vs local | DB CPU ms/chat "
        "| limit round trips/chat |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['limits']} | {r['chats_per_s']:.0f} | "
            f"{r['speed_vs_1_worker']:.2f}x | {r['cpu_ms_per_chat']:.2f} | "
            f"{r['cpu_vs_local']:.2f}x | {r['db_cpu_ms_per_chat']:.2f} | "
            f"{r['round_trips_per_chat']:.3f} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    worker_counts = [int(n) for n in args.workers.split(",")]
    if worker_counts[0] != 1:
        sys.exit("--workers must start with 1: the ratios are against one worker")
    out = Path(args.out)
    model_port = free_port()
    model = Process(
        [sys.executable, "-m", "app", "fake-model", "--port", str(model_port)], model_port
    )
    db = start_secantus(out / f"secantus-{secrets.token_hex(3)}")
    runs = []
    try:
        for round_ in range(args.rounds):
            for workers in worker_counts:
                # Interleaved, the order swapped each round: what one run leaves the database
                # doing (checkpoints) lands on both modes alike.
                for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                    run = await one_run(
                        args, workers, mode, f"http://127.0.0.1:{model_port}/v1", db
                    )
                    runs.append(run)
                    print(
                        f"round {round_ + 1}: {workers} worker(s), {mode:6}: "
                        f"{run['chats_per_s']:7.0f} chats/s, "
                        f"{run['cpu_ms_per_chat']:.2f} ms CPU/chat",
                        flush=True,
                    )
    finally:
        db[0].stop()
        model.stop()
    rows = summarize(runs, worker_counts)
    report = markdown(rows, args)
    print("\n" + report)
    (out / "scale.json").write_text(json.dumps({"runs": runs, "summary": rows}, indent=2))
    (out / "scale.md").write_text(report + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["tenants"]:
        import tenants

        parser = argparse.ArgumentParser(description=tenants.__doc__.split("\n\n")[0])
        tenants.add_arguments(parser)
        parser.add_argument("--out", default=str(ROOT / "bench-results" / "tenants"))
        tenants.main(parser.parse_args(sys.argv[2:]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "scale"))
    arguments = parser.parse_args()
    Path(arguments.out).mkdir(parents=True, exist_ok=True)
    asyncio.run(main(arguments))
