"""The cost of tracing: CPU per chat iteration with tracing off, on, and (optionally) before.

Starts one service (and its own fake model) per variant, all with the benchmark's production
settings: `off` (no OTEL_* variable: no span is built), `on` (OTEL_EXPORTER_OTLP_ENDPOINT set
to a local OTLP/HTTP receiver, scripts/bench/otlp_sink.py, the default sampler: every chat
traced and exported), `on, 1 in 10 sampled` (OTEL_TRACES_SAMPLER=parentbased_traceidratio,
OTEL_TRACES_SAMPLER_ARG=0.1), `on, none sampled` (OTEL_TRACES_SAMPLER=always_off: what a
request the sampler drops costs) and, with `--before REF`, `before`: the service of commit REF
(extracted with `git archive`), tracing as it was (`--before-traced`: also `before, on`, REF's
service with the same endpoint). Rounds interleave the variants, so a busy machine slows them
alike; each round starts with the next variant, and after a variant that exports spans the next
waits until the OTLP receiver has had nothing new for 6 s. The services share one CPU: a variant
measured while the one before still encoded and sent its last batches shares the CPU with them
(in a fixed order `on, none sampled`, which exports nothing, came out 1.19x and 1.21x of `off`
at c=50 in two runs; 1.07x in one run this way). Prints per variant and concurrency the
service's CPU per model iteration (medians over the rounds) and its ratio to `off`, and the same
with the CPU of the service's child processes added (worker processes it starts, which the first
column does not count); goals: `on` at most 1.15x, `off` at most 1.02x `before`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import HERE, ROOT, Bench, Process, free_port  # scripts/bench/bench.py

MODEL = "fake-calls-1"  # two model calls (iterations) per chat, one tool call
EXPORTING = frozenset({"on", "on, 1 in 10 sampled", "before, on"})  # the variants with spans


def extracted(ref: str) -> Path:
    """The tree of commit `ref`, in a temporary directory (no worktree is registered)."""
    where = Path(tempfile.mkdtemp(prefix="toolgate-bench-before-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


def children_cpu_s(bench: Bench) -> float:
    """The CPU time of the service's child processes alive now (its worker processes)."""
    total = 0.0
    for pid in _descendants(bench.service.popen.pid):
        try:
            total += time.clock_gettime(((~pid) << 3) | 2)
        except OSError:  # it has ended since
            continue
    return total


async def exported(sink_port: int, quiet_s: float = 6.0) -> None:
    """Returns once the OTLP sink has received nothing new for `quiet_s` (longer than the batch
    processor's 5 s schedule): the spans of the variant measured before are all exported, so
    its export thread does not run beside the next variant's measurement, on the same CPU."""

    def count() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{sink_port}/count") as answer:
            return int(json.loads(answer.read())["spans"])

    seen, since = await asyncio.to_thread(count), time.monotonic()
    while time.monotonic() - since < quiet_s:
        await asyncio.sleep(0.5)
        now = await asyncio.to_thread(count)
        if now != seen:
            seen, since = now, time.monotonic()


async def measure(
    args: argparse.Namespace, sink_port: int, before: Path | None
) -> tuple[dict[str, dict[int, list[float]]], dict[str, dict[int, list[float]]]]:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}"}
    one_in_ten = {
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
    }
    benches = {
        "off": Bench(args),
        "on": Bench(args, endpoint),
        "on, 1 in 10 sampled": Bench(args, {**endpoint, **one_in_ten}),
        # Every request sampled out: what tracing on costs a request it does not record.
        "on, none sampled": Bench(args, {**endpoint, "OTEL_TRACES_SAMPLER": "always_off"}),
    }
    if before is not None:
        traced = {"before, on": Bench(args, endpoint, tree=before)} if args.before_traced else {}
        benches = {"before": Bench(args, tree=before), **traced, **benches}
    results: dict[str, dict[int, list[float]]] = {name: {} for name in benches}
    with_children: dict[str, dict[int, list[float]]] = {name: {} for name in benches}
    try:
        for bench in benches.values():
            await bench.setup()
            await bench.service_chats(MODEL, args.warmup, 10)
        names, previous = list(benches), None
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr)
            # Each round starts with the next variant: none always follows the same one.
            order = names[round_index % len(names) :] + names[: round_index % len(names)]
            for concurrency, count in ((1, args.chats_c1), (50, args.chats_c50)):
                for name in order:
                    bench = benches[name]
                    if previous in EXPORTING:  # none measured while another still exports
                        await exported(sink_port)
                    previous = name
                    children = children_cpu_s(bench)
                    figures = await bench.service_chats(MODEL, count, concurrency)
                    children = 1000 * (children_cpu_s(bench) - children) / figures["iterations"]
                    cpu = figures["cpu_ms_per_iteration"]
                    results[name].setdefault(concurrency, []).append(cpu)
                    with_children[name].setdefault(concurrency, []).append(cpu + children)
        if previous in EXPORTING:  # the count printed is of every span sent
            await exported(sink_port)
    finally:
        for bench in benches.values():
            if hasattr(bench, "session"):
                await bench.close()
    return results, with_children


def report(
    results: dict[str, dict[int, list[float]]],
    with_children: dict[str, dict[int, list[float]]],
    spans: dict[str, int],
) -> str:
    rows = [
        "| variant | concurrency | service CPU ms per iteration (median, min-max) | vs off "
        "| with its child processes | vs off |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, by_c in results.items():
        for c, runs in by_c.items():
            median = statistics.median(runs)
            base = statistics.median(results["off"][c])
            family = statistics.median(with_children[name][c])
            family_base = statistics.median(with_children["off"][c])
            rows.append(
                f"| {name} | {c} | {median:.3f} ({min(runs):.3f}-{max(runs):.3f}) "
                f"| {median / base:.3f}x | {family:.3f} | {family / family_base:.3f}x |"
            )
    rows.append("")
    rows.append(f"spans received by the OTLP sink: {spans['spans']} in {spans['requests']} exports")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chats-c1", type=int, default=300)
    parser.add_argument("--chats-c50", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--before", help="a commit whose service is measured too (`before`)")
    parser.add_argument(
        "--before-traced",
        action="store_true",
        help="the `--before` commit's service measured with tracing on too (`before, on`)",
    )
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the services on one CPU, the load on the others (bench.core_split)",
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.chats_c1, args.chats_c50, args.warmup = 1, 10, 60, 20
    sink_port = free_port()
    sink = Process(
        [sys.executable, str(HERE / "otlp_sink.py"), "--port", str(sink_port)], sink_port
    )
    before = extracted(args.before) if args.before else None
    try:
        results, with_children = asyncio.run(measure(args, sink_port, before))
        with urllib.request.urlopen(f"http://127.0.0.1:{sink_port}/count") as answer:
            spans = json.loads(answer.read())
    finally:
        sink.stop()
        if before is not None:
            shutil.rmtree(before, ignore_errors=True)
    print(report(results, with_children, spans))


if __name__ == "__main__":
    main()
