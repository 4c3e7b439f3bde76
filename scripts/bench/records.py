"""The cost of durable run records: chats against services that differ only in RUN_JOURNAL.

Starts one service (and its own fake model) per variant: `off` (today's default with the
in-memory store: records only queued in memory), `on` (each record appended to the journal
before the answer completes: kill -9 safe) and `fsync` (also fsynced: machine-crash safe).
Rounds interleave the variants, so a busy machine slows them alike. Prints, per variant and
concurrency, chat latency p50/p99 and service CPU per chat (medians over the rounds), and the
difference to `off`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import ROOT, Bench  # scripts/bench/bench.py (the script's directory is on the path)

VARIANTS = {
    "off": {"RUN_JOURNAL": "off"},
    "on": {"RUN_JOURNAL": "on"},
    "fsync": {"RUN_JOURNAL": "on", "RUN_JOURNAL_FSYNC": "true"},
}
MODEL = "fake-calls-1"  # two model calls per chat, one tool call


async def measure(args: argparse.Namespace) -> dict[str, dict[int, list[dict[str, float]]]]:
    journal_dir = tempfile.mkdtemp(prefix="toolgate-bench-journal-")
    benches = {
        name: Bench(args, {**env, "RUN_JOURNAL_DIR": f"{journal_dir}/{name}"})
        for name, env in VARIANTS.items()
        if name in args.variants
    }
    results: dict[str, dict[int, list[dict[str, float]]]] = {name: {} for name in benches}
    try:
        for bench in benches.values():
            await bench.setup()
            await bench.service_chats(MODEL, 200, 10)  # warm-up
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr)
            for concurrency, count in ((1, args.chats_c1), (50, args.chats_c50)):
                for name, bench in benches.items():
                    figures = await bench.service_chats(MODEL, count, concurrency)
                    cpu_per_chat = figures["cpu_ms_per_iteration"] * figures["iterations"] / count
                    results[name].setdefault(concurrency, []).append(
                        {
                            "p50_ms": figures["p50_ms"],
                            "p99_ms": figures["p99_ms"],
                            "cpu_ms_per_chat": cpu_per_chat,
                            "chats_per_s": figures["chats_per_s"],
                        }
                    )
    finally:
        for bench in benches.values():
            if hasattr(bench, "session"):
                await bench.close()
    return results


def record_cost_us(variant: str, count: int) -> dict[str, float]:
    """Wall and CPU microseconds of one `RunRecorder.record()` call (what runs before the
    answer's last byte), for a chat record with one tool call, measured in this process."""
    from app.repositories.run_journal import RunJournal
    from app.repositories.runs import MemoryRunRepository
    from app.services.run_recorder import RunRecorder
    from app.services.runs import run_record

    env = VARIANTS[variant]
    journal = None
    if env["RUN_JOURNAL"] == "on":
        journal = RunJournal(
            Path(tempfile.mkdtemp(prefix="toolgate-bench-journal-")),
            max_bytes=1 << 40,
            fsync=env.get("RUN_JOURNAL_FSYNC") == "true",
        )
        journal.open()
    recorder = RunRecorder(
        MemoryRunRepository(limit=10), journal=journal, max_records=1 << 30, max_bytes=1 << 40
    )
    call = {"id": "c1", "name": "rolldice", "tool_id": "rolldice", "status": "ok"}
    record = run_record(
        run_id="0" * 32,
        kind="chat",
        started=datetime.now(UTC),
        status="completed",
        error=None,
        tool_calls=[{**call, "duration_ms": 0.2, "arguments": {"d": 6}}],
        model="fake-calls-1",
        iterations=2,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        recorder.record(dict(record), tenant_id="bench")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if journal is not None:
        journal.close()
    return {"wall_us": 1e6 * wall / count, "cpu_us": 1e6 * cpu / count}


def report(results: dict[str, dict[int, list[dict[str, float]]]]) -> str:
    rows = [
        "| variant | concurrency | p50 ms | p99 ms | CPU ms/chat | chats/s "
        "| vs off: p50 / p99 / CPU |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    median = {
        (name, c): {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, by_c in results.items()
        for c, runs in by_c.items()
    }
    for (name, c), m in median.items():
        base = median.get(("off", c))
        delta = (
            f"{m['p50_ms'] - base['p50_ms']:+.3f} / {m['p99_ms'] - base['p99_ms']:+.3f} / "
            f"{m['cpu_ms_per_chat'] - base['cpu_ms_per_chat']:+.3f} ms"
            if base and name != "off"
            else ""
        )
        rows.append(
            f"| {name} | {c} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | "
            f"{m['cpu_ms_per_chat']:.3f} | {m['chats_per_s']:.0f} | {delta} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chats-c1", type=int, default=300)
    parser.add_argument("--chats-c50", type=int, default=1500)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--micro-only", action="store_true", help="only record() in-process")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.chats_c1, args.chats_c50 = 1, 10, 60
    sys.path.insert(0, str(ROOT))  # record() below is this checkout's, as the services are
    for variant in args.variants:
        cost = record_cost_us(variant, 200 if variant == "fsync" else 20_000)
        print(
            f"record() with journal {variant}: {cost['wall_us']:.1f} us wall, "
            f"{cost['cpu_us']:.1f} us CPU per chat"
        )
    if not args.micro_only:
        print(report(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
