"""Does an MCP server listing 10,000 tools stall other requests? (issue 49: by at most 50 ms)

    python scripts/bench/mcp_listing_stall.py                 # every case, both ways, 5 listings
    python scripts/bench/mcp_listing_stall.py --cases paged-raised --via route --listings 2
    python scripts/bench/mcp_listing_stall.py --cases at-the-cap --profile DIR  # cProfile files

For each case, an MCP server with many tools over streamable HTTP (tests/support/mcp_many.py, a
process of its own: one answer of every tool, or pages of 500 with `nextCursor`) is the
operator's server `many` of one service process (`python -m app serve`, production settings,
in-memory store, MCP_TOOLS_CACHE_TTL_S=0 so every listing asks the server again). A pinger (a
process of its own) sends `GET /ping` every 10 ms on a kept-alive connection for the whole
case, while the driver has the service list the server `--listings` times, one after the other,
one way (`--via`): `route`, `GET /mcp-servers/many/tools` (the console's listing); `chat`, a
chat naming the server (`mcp_servers: ["many"]`: listed, converted, then offered or refused).
Reported: the pings' p50, p99 and max latency before the listings (the baseline) and while one
ran, the listings' status and time, and the service's own loop metrics over the listings
(`toolgate_event_loop_lag_seconds`, and `_held_seconds`: the lag less the time the loop's
thread waited for a CPU, so a busy machine's share is apart): the highest bucket reached.

Cases: `one-answer` and `paged` (10,000 tools) at the defaults (MCP_MAX_LIST_BYTES 512 KiB,
MCP_MAX_SERVER_TOOLS 1,000: the server is skipped, with its reason, past either; a chat then
skips it for its backoff without asking again); `at-the-cap`, 1,000 tools in pages, the most
the defaults take; `paged-raised` and `one-answer-raised`, 10,000 tools with the operator's
caps raised to take them all.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import ROOT, Process, free_port

TOOLS = 10_000
PAGE = 500
RAISED = {"MCP_MAX_SERVER_TOOLS": str(TOOLS), "MCP_MAX_LIST_BYTES": str(64 * 1_048_576)}
# name: (tools the server lists, its page size or None for one answer, settings)
CASES: dict[str, tuple[int, int | None, dict[str, str]]] = {
    "one-answer": (TOOLS, None, {}),
    "paged": (TOOLS, PAGE, {}),
    "paged-raised": (TOOLS, PAGE, RAISED),
    "one-answer-raised": (TOOLS, None, RAISED),
    "at-the-cap": (1000, PAGE, {}),  # the most the defaults take
}
INTERVAL_S = 0.01
CHAT = {"messages": [{"role": "user", "content": "roll a die"}], "mcp_servers": ["many"]}
# `python -m app` under cProfile, its figures written when it stops: uvicorn re-raises the
# SIGTERM it caught once shut down, which this handler turns into an ordinary exit.
PROFILED = """
import cProfile, runpy, signal, sys
def leave(*_): raise SystemExit(0)
signal.signal(signal.SIGTERM, leave)
path, sys.argv = sys.argv[1], ["app", *sys.argv[2:]]
profile = cProfile.Profile()
profile.enable()
try:
    runpy.run_module("app", run_name="__main__")
finally:
    profile.disable()
    profile.dump_stats(path)
"""
LOOP_METRICS = ("toolgate_event_loop_lag_seconds_bucket", "toolgate_event_loop_held_seconds_bucket")


def ping_forever(port: int, seconds: float) -> None:
    """The pinger (`--ping PORT SECONDS`): prints `[sent_at, latency]` pairs (monotonic clock,
    the same in every process) as JSON when done."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    pings = []
    deadline = time.monotonic() + seconds
    tick = time.monotonic()
    while tick < deadline:
        sent = time.monotonic()
        connection.request("GET", "/ping")
        answer = connection.getresponse()
        answer.read()
        pings.append((sent, time.monotonic() - sent))
        tick += INTERVAL_S
        time.sleep(max(0.0, tick - time.monotonic()))
    print(json.dumps(pings))


def buckets(text: str) -> dict[str, dict[str, float]]:
    """The loop histograms' cumulative buckets: {metric: {le: count}}."""
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line.startswith(LOOP_METRICS):
            name, _, rest = line.partition("{")
            le = rest.split('le="', 1)[1].split('"', 1)[0]
            found.setdefault(name, {})[le] = float(line.rsplit(" ", 1)[1])
    return found


def highest(before: dict[str, float], after: dict[str, float]) -> str:
    """The smallest bucket bound that holds every sample taken between the two readings."""
    total = after["+Inf"] - before["+Inf"]
    for le in sorted((k for k in after if k != "+Inf"), key=float):
        if after[le] - before.get(le, 0) >= total:
            return f"<= {float(le) * 1000:g} ms"
    return "> 30 s"


def percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"pings": 0}
    ordered = sorted(latencies)
    return {
        "pings": len(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": 1000 * ordered[-1],
    }


async def list_once(
    session: aiohttp.ClientSession, base: str, headers: dict[str, str], via: str
) -> dict[str, Any]:
    """One listing of the server through the service: its status and what it found."""
    if via == "route":
        async with session.get(f"{base}/mcp-servers/many/tools", headers=headers) as answer:
            body = json.loads(await answer.read())
        if answer.status == 200:
            return {"status": 200, "tools": len(body)}
        return {"status": answer.status, "tools": 0, "detail": body.get("detail")}
    async with session.post(f"{base}/chat", json=CHAT, headers=headers) as answer:
        body = json.loads(await answer.read())
    skipped = body.get("skipped_mcp_servers") if answer.status == 200 else None
    return {"status": answer.status, "skipped": skipped, "detail": body.get("detail")}


async def run_case(name: str, via: str, args: argparse.Namespace, model: str) -> dict[str, Any]:
    count, page, caps = CASES[name]
    upstream_port = free_port()
    upstream = Process(
        [
            sys.executable,
            "-m",
            "tests.support.mcp_many",
            str(upstream_port),
            str(count),
            *([str(page)] if page else []),
        ],
        upstream_port,
        stderr=subprocess.DEVNULL,
    )
    admin = secrets.token_urlsafe(32)
    port = free_port()
    servers = {
        "mcpServers": {
            "many": {"type": "streamable-http", "url": f"http://127.0.0.1:{upstream_port}/mcp"}
        }
    }
    env = {
        "APP_ENV": "production",
        "ADMIN_API_KEY": admin,
        "API_KEY_SECRET": secrets.token_urlsafe(32),
        "SECRETS_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "MONGODB_URL": "",
        "TOOLGATE_ENV_FILE": "",
        "METRICS_PUBLIC": "true",
        "OUTBOUND_ALLOW": f"127.0.0.1:{upstream_port}",
        "MCP_SERVERS": json.dumps(servers),
        "MCP_TOOLS_CACHE_TTL_S": "0",  # every listing reaches the server
        "MCP_LIST_DEADLINE_S": "60",
        "OPENAI_BASE_URL": model,
        "OPENAI_API_KEY": "stall",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
        **caps,
    }
    log = (Path(args.out) / f"service-{name}.log").open("w")
    profile = ["-c", PROFILED, str(Path(args.profile or ".") / f"{name}-{via}.prof")]
    program = profile if args.profile else ["-m", "app"]
    service = Process(
        [sys.executable, *program, "serve", "--port", str(port)],
        port,
        env,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{base}/tenants",
                json={"tenant_id": "lister"},
                headers={"Authorization": f"Bearer {admin}"},
            ) as created:
                key = (await created.json())["api_key"]
            headers = {"Authorization": f"Bearer {key}"}
            # Once before the measurement: imports and first-use work happen here.
            await list_once(session, base, headers, via)
            pinger = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--ping",
                str(port),
                str(args.baseline_s + args.listings * args.listing_budget_s),
                stdout=asyncio.subprocess.PIPE,
            )
            await asyncio.sleep(args.baseline_s)
            async with session.get(f"{base}/metrics") as answer:
                metrics_before = buckets(await answer.text())
            windows, listings = [], []
            for _ in range(args.listings):
                started = time.monotonic()
                listing = await list_once(session, base, headers, via)
                ended = time.monotonic()
                windows.append((started, ended))
                listings.append({**listing, "s": ended - started})
            async with session.get(f"{base}/metrics") as answer:
                metrics_after = buckets(await answer.text())
            pinged, _ = await pinger.communicate()
    finally:
        service.popen.terminate()
        service.popen.wait(30)
        log.close()
        upstream.stop()
    pings = json.loads(pinged)
    during = [
        latency
        for sent, latency in pings
        if any(start <= sent + latency and sent <= end for start, end in windows)
    ]
    baseline = [latency for sent, latency in pings if sent + latency < windows[0][0]]
    return {
        "case": name,
        "via": via,
        "tools": count,
        "page": page,
        "caps": caps,
        "listings": listings,
        "baseline": percentiles(baseline),
        "during_listings": percentiles(during),
        "loop_lag_highest_bucket": highest(
            metrics_before[LOOP_METRICS[0]], metrics_after[LOOP_METRICS[0]]
        ),
        "loop_held_highest_bucket": highest(
            metrics_before[LOOP_METRICS[1]], metrics_after[LOOP_METRICS[1]]
        ),
    }


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    model_port = free_port()
    model = Process(
        [sys.executable, "-m", "app", "fake-model", "--port", str(model_port)], model_port
    )
    try:
        for name in args.cases.split(","):
            for via in args.via.split(","):
                row = await run_case(name, via, args, f"http://127.0.0.1:{model_port}/v1")
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        model.stop()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"An MCP server listing many tools, {os.cpu_count()} cores, load averages "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}: `/ping` every 10 ms while the "
        "service lists it.",
        "",
        "| case | tools | via | listing: status, s | ping p50 / p99 / max, before (ms) "
        "| ping p50 / p99 / max, during (ms) | loop lag | loop held |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        listing = row["listings"]
        b, d = row["baseline"], row["during_listings"]
        lines.append(
            f"| {row['case']} | {row['tools']:,} | {row['via']} | {listing[0]['status']}, "
            f"{statistics.median(x['s'] for x in listing):.2f} | "
            f"{b['p50_ms']:.1f} / {b['p99_ms']:.1f} / {b['max_ms']:.1f} | "
            f"{d['p50_ms']:.1f} / {d['p99_ms']:.1f} / {d['max_ms']:.1f} | "
            f"{row['loop_lag_highest_bucket']} | {row['loop_held_highest_bucket']} |"
        )
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--ping"]:
        ping_forever(int(sys.argv[2]), float(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--via", default="route,chat", help="GET /mcp-servers/many/tools, a chat")
    parser.add_argument("--listings", type=int, default=5)
    parser.add_argument("--baseline-s", type=float, default=3.0)
    parser.add_argument(
        "--listing-budget-s", type=float, default=4.0, help="the pinger's time per listing"
    )
    parser.add_argument("--profile", help="run the service under cProfile, its files here")
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "mcp_listing_stall"))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = asyncio.run(measure(args))
    report = markdown(rows)
    print("\n" + report)
    (Path(args.out) / "mcp_listing_stall.json").write_text(json.dumps(rows, indent=2))
    (Path(args.out) / "mcp_listing_stall.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
