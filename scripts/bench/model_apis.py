"""CPU per model iteration for each model API: the same chats (one tool call, then the answer)
through the service with MODEL_API=chat_completions, responses and anthropic_messages.

For each API it starts the fake model (`python -m app fake-model`, which speaks all three) and
the service (production settings, one worker, the lean HTTP client), then interleaves rounds
at concurrency 1 and 50 and prints the medians with min-max, and the ratio to chat completions:

    python scripts/bench/model_apis.py            # 3 rounds
    python scripts/bench/model_apis.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import ROOT, Bench, summarize

APIS = ("chat_completions", "responses", "anthropic_messages")
MODEL = "fake-calls-1"  # one tool call, then a text answer: two model iterations per chat


async def measure(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    benches = {api: Bench(args, service_env={"MODEL_API": api}) for api in APIS}
    results: dict[str, list[dict[str, float]]] = {}
    try:
        for bench in benches.values():
            await bench.setup()
            await bench.service_chats(MODEL, 50, 1)  # warm-up: connections, caches
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr)
            for concurrency, count in ((1, args.chats_c1), (50, args.chats_c50)):
                for api, bench in benches.items():  # interleaved: drift hits every API alike
                    figures = await bench.service_chats(MODEL, count, concurrency)
                    results.setdefault(f"{api}, concurrency {concurrency}", []).append(figures)
    finally:
        for bench in benches.values():
            if hasattr(bench, "session"):
                await bench.close()
    return results


def headline(summary: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = []
    for concurrency in (1, 50):
        base = summary[f"chat_completions, concurrency {concurrency}"]["cpu_ms_per_iteration"][0]
        for api in APIS:
            median, low, high = summary[f"{api}, concurrency {concurrency}"]["cpu_ms_per_iteration"]
            lines.append(
                f"CPU per model iteration, {api}, c={concurrency}: {median:.3f} ms "
                f"({low:.3f}-{high:.3f}), {median / base:.2f}x of chat_completions"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chats-c1", type=int, default=300)
    parser.add_argument("--chats-c50", type=int, default=1500)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.chats_c1, args.chats_c50 = 1, 10, 60
    summary = summarize(asyncio.run(measure(args)))
    lines = headline(summary)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report: dict[str, Any] = {"summary": summary, "headline": lines}
    (out / f"model-apis-{stamp}.json").write_text(json.dumps(report, indent=1))
    print("\n".join(lines))
    print(f"written: {out}/model-apis-{stamp}.json")


if __name__ == "__main__":
    main()
