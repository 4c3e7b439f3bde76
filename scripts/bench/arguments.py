"""Per-call argument checking: the compiled jsonschema-rs validator against the seed's
hand-written check (read from git at SEED_COMMIT) and the `jsonschema` package.

    python scripts/bench/arguments.py [--calls 20000]

Prints microseconds per call for a valid call (the hot path) and an invalid one (messages).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jsonschema  # noqa: E402

from app.tools.arguments import argument_problems  # noqa: E402
from app.tools.schema import compiled, parameters_json_schema  # noqa: E402

SEED_COMMIT = "fd6a4d4"  # the last commit with the hand-written check
PARAMETERS: dict[str, Any] = {
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "max_items": 5},
        "metric": {"type": "boolean"},
    },
    "required": ["city"],
}
VALID = {"city": "Oslo", "days": 3, "tags": ["a", "b"], "metric": True}
INVALID = {"city": "Rome", "days": "3", "extra": 1}


def seed_check() -> Any:
    """The seed's `argument_problems(arguments, parameters)`, or None without git."""
    try:
        source = subprocess.run(
            ["git", "show", f"{SEED_COMMIT}:app/tools/arguments.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    namespace: dict[str, Any] = {"__name__": "seed_arguments"}
    exec(compile(source, "seed_arguments.py", "exec"), namespace)
    return namespace["argument_problems"]


def per_call_us(function: Any, calls: int) -> float:
    return min(timeit.repeat(function, number=calls, repeat=3)) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    calls = parser.parse_args().calls
    schema = parameters_json_schema(PARAMETERS)
    rust = compiled(schema)
    python = jsonschema.Draft202012Validator(schema)
    rows = [
        ("jsonschema-rs (compiled once)", lambda a: argument_problems(a, rust)),
        ("jsonschema (package)", lambda a: [e.message for e in python.iter_errors(a)]),
    ]
    seed = seed_check()
    if seed is not None:
        rows.insert(0, (f"seed check ({SEED_COMMIT})", lambda a: seed(a, PARAMETERS)))
    print(f"{'check':34} {'valid us/call':>14} {'invalid us/call':>16}")
    for label, check in rows:
        valid = per_call_us(lambda check=check: check(VALID), calls)
        invalid = per_call_us(lambda check=check: check(INVALID), calls // 4)
        print(f"{label:34} {valid:14.2f} {invalid:16.2f}")


if __name__ == "__main__":
    main()
