"""Micro-benchmark of redaction: the scrubber runs on every tool output (up to the response cap)
and every log line of a run, so its cost per call matters.

Times `Scrubber(values)(text)` (values prepared once, as per request) on tool outputs of 64 KB
and 1 MB (JSON, with and without escapes, with and without echoed values), escape-only texts,
and short log lines; 5 hidden values. Prints CPU microseconds per call (process time, best of 5
repeats: steadier than wall time on a shared machine) and MB/s.
Only the `Scrubber` API is used, so the same script, copied into an older checkout, times it:

    python scripts/bench/redaction.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

from app.tools.scrub import Scrubber

HIDDEN = [
    "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    "user-7f3a9c@example.com",
    "tok_live_51be02aa93c4d7e8",
    "zq1/a+b=c&d e\"f<g é'(h)!",
    "Basic c3ZjLXVzZXI6cGFzc3dvcmQ=",
]


def _records(size: int, *, escapes: bool, rng: random.Random) -> str:
    """A JSON tool output of about `size` characters: a list of search results."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    if escapes:
        words += ["café", "naïve", "Zürich", 'say "hi"', "a/b", "50%", "R&D"]
    items, length = [], 0
    while length < size:
        item = {
            "title": " ".join(rng.choices(words, k=6)),
            "url": f"https://example.com/{rng.choice(words)}?q={quote(rng.choice(words))}",
            "snippet": " ".join(rng.choices(words, k=20)),
            "score": rng.random(),
        }
        items.append(item)
        length += len(json.dumps(item))
    return json.dumps({"results": items}, ensure_ascii=escapes)


def _with_echoes(text: str) -> str:
    """`text` with each hidden value echoed raw, JSON-escaped .NET style and percent-encoded."""
    echoes = [v for value in HIDDEN for v in (value, quote(value, safe=""))]
    echoes.append("wJalrXUtnFEMI/K7MDENG\\u002BbPxRfiCYEXAMPLEKEY")
    middle = len(text) // 2
    return text[:middle] + " ".join(echoes) + text[middle:]


def scenarios(rng: random.Random) -> dict[str, str]:
    plain_64k = _records(64_000, escapes=False, rng=rng)
    escaped_64k = _records(64_000, escapes=True, rng=rng)
    escaped_1m = _records(1_000_000, escapes=True, rng=rng)
    return {
        "64 KB JSON, no escapes, nothing hidden in it": plain_64k,
        "64 KB JSON with escapes, nothing hidden in it": escaped_64k,
        "64 KB JSON with escapes, 11 echoes": _with_echoes(escaped_64k),
        "1 MB JSON with escapes, nothing hidden in it": escaped_1m,
        "1 MB JSON with escapes, 11 echoes": _with_echoes(escaped_1m),
        "64 KB of %XX (every byte escaped)": quote("a/b" * 7_200, safe="")[:64_000],
        "64 KB of \\uXXXX": "".join(f"\\u{ord(c):04x}" for c in "abc/é" * 2_134)[:64_000],
        "log line, 140 chars, no escapes": (
            "chat finished: model=gpt-4o-mini tool_calls=3 tokens_in=1234 tokens_out=98 "
            "duration_ms=812.4 tenant=acme request_id=9f1c2e7a"
        ),
        "log line, 140 chars, escapes": (
            'tool weather failed: upstream said {\\"error\\": \\"unknown city'
            ' q=S%C3%A3o%20Paulo&amp;units=metric\\", \\"code\\": 404}'
        ),
    }


def measure(call: Callable[[], object], seconds: float) -> float:
    """CPU seconds per call, best of 5 repeats of about `seconds` / 5 each."""
    timer = timeit.Timer(call, timer=time.process_time)
    number, elapsed = timer.autorange()
    number = max(1, int(number * seconds / 5 / max(elapsed, 1e-9)))
    return min(timer.repeat(repeat=5, number=number)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per scenario")
    arguments = parser.parse_args()
    scrub = Scrubber(HIDDEN)
    prepare = measure(lambda: Scrubber(HIDDEN), arguments.seconds)
    print(f"{'prepare 5 values (once per request)':<48} {prepare * 1e6:>10.1f} us")
    texts = scenarios(random.Random(7))
    for name, text in texts.items():
        per_call = measure(lambda text=text: scrub(text), arguments.seconds)  # type: ignore[misc]
        rate = len(text) / per_call / 1e6
        print(f"{name:<48} {per_call * 1e6:>10.1f} us {rate:>8.1f} MB/s")
    # What the invoker does with a tool's answer: scrub, then cut at the output cap (16,000).
    head = getattr(scrub, "head", lambda text, limit: scrub(text)[:limit])
    for name in (
        "1 MB JSON with escapes, nothing hidden in it",
        "1 MB JSON with escapes, 11 echoes",
    ):
        text = texts[name]
        per_call = measure(lambda text=text: head(text, 16_000), arguments.seconds)  # type: ignore[misc]
        print(f"{name + ', cut at 16,000':<48} {per_call * 1e6:>10.1f} us")


if __name__ == "__main__":
    main()
