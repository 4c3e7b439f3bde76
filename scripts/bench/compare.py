"""The per-call rows of the benchmark for this tree and another (an earlier commit's), measured
side by side in one run: `python scripts/bench/compare.py --against DIR`, DIR a source tree of
the other commit (`git archive COMMIT | tar -x -C DIR`), run with this virtualenv.

One service per tree (each with its own fake model and upstream, on the same CPU when pinned),
measured in turns: each turn runs every route for `--slice` requests on one service, then on the
other, until each route has `--requests` on each; the model iteration (one call, concurrency 50)
alternates the same way, once per round. Each tree's routes are compared with its own `/ping`
(the machine's speed drifts under both alike); the change of each ratio is the headline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import uvloop
from bench import (
    INVOKE,
    INVOKE_MCP,
    INVOKE_REST,
    MCP_CALL,
    MCP_CALL_MODERN,
    MCP_REST,
    MCP_REST_MODERN,
    SLICE,
    Bench,  # scripts/bench/bench.py (the script's directory is on the path)
)

ROWS = (INVOKE, MCP_CALL, MCP_CALL_MODERN, INVOKE_REST, INVOKE_MCP, MCP_REST, MCP_REST_MODERN)
CHATS = "model iteration, 1 call, c=50"


async def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """tree label -> row -> CPU ms per request (per model iteration for CHATS), one per round."""
    benches = {"this tree": Bench(args), "against": Bench(args, tree=Path(args.against))}
    figures: dict[str, dict[str, list[float]]] = {label: {} for label in benches}
    try:
        for bench in benches.values():
            await bench.setup()
            await bench.service_chats("fake-calls-1", 500, 50)  # warm-up
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr)
            totals: dict[str, dict[str, list[float]]] = {label: {} for label in benches}
            for _ in range(max(1, args.requests // args.slice)):
                for label, bench in benches.items():
                    bench.args.requests = args.slice
                    rows = await bench.endpoints(bench.endpoint_cases())
                    for name, row in rows.items():
                        totals[label].setdefault(name, []).append(row["cpu_ms_per_request"])
            for label, bench in benches.items():
                chats = await bench.service_chats("fake-calls-1", args.chats, 50)
                for name, values in totals[label].items():
                    figures[label].setdefault(name, []).append(statistics.fmean(values))
                figures[label].setdefault(CHATS, []).append(chats["cpu_ms_per_iteration"])
    finally:
        for bench in benches.values():
            if hasattr(bench, "session"):
                await bench.close()
    return figures


def report(figures: dict[str, dict[str, list[float]]], against: str) -> str:
    ours, theirs = figures["this tree"], figures["against"]
    lines = [
        f"# This tree against {against}",
        "",
        "CPU per request (median of the rounds), its ratio to the same tree's `GET /ping`, and",
        "the change of that ratio (positive: this tree costs more).",
        "",
        "| row | this tree ms | against ms | this tree / ping | against / ping | change |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    ping = statistics.median(ours["GET /ping"]), statistics.median(theirs["GET /ping"])
    lines.append(f"| GET /ping | {ping[0]:.4f} | {ping[1]:.4f} | 1 | 1 | |")
    for row in (*ROWS, CHATS):
        mine, other = statistics.median(ours[row]), statistics.median(theirs[row])
        by_ping = (mine / ping[0], other / ping[1])
        change = by_ping[0] / by_ping[1] - 1
        lines.append(
            f"| {row} | {mine:.4f} | {other:.4f} | {by_ping[0]:.3f} | {by_ping[1]:.3f} "
            f"| {change:+.1%} |"
        )
    rounds = "; ".join(
        f"{label}: " + ", ".join(f"{value:.4f}" for value in figures[label]["GET /ping"])
        for label in figures
    )
    lines += ["", f"`/ping` per round (ms): {rounds}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", required=True, help="the other source tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="per route, tree and round")
    parser.add_argument("--slice", type=int, default=SLICE)
    parser.add_argument("--chats", type=int, default=400, help="chats at c=50, per tree and round")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.memory_chats = args.slow_chats = args.round_trips = 0
    print(report(uvloop.run(measure(args)), args.against))


if __name__ == "__main__":
    main()
