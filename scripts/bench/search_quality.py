"""Tool search, measured: recall@1/5/10 of the project's evaluation set and CPU per search, over
a catalog of real-API tools built by scripts/bench/search_corpus.py (default 10,000 tools).

    python scripts/bench/search_quality.py [--tools 10000] [--out DIR]

The catalog goes through the service's own code: each document is parsed into a typed tool
(`ToolSnapshot.build`, as the tool catalog does) and indexed by `ToolIndex`, with each API's
category described by its title, as an import into one category per API leaves it. Each query
of scripts/bench/search_eval.json (written as a model writes one: the service and the action)
counts as found at k when one of its right tools is among the first k results. CPU is the
process clock over every search, divided by their number; the build of the snapshot and the
index is reported apart (it happens once per snapshot revision, off the event loop).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from search_corpus import EVAL, corpus  # noqa: E402

from app.services.catalog import ToolSnapshot  # noqa: E402
from app.services.tool_search import ToolIndex  # noqa: E402

KS = (1, 5, 10)


def measure(tools: int) -> dict[str, Any]:
    docs = list(corpus(tools))
    titles = {doc["category"]: doc.pop("category_description") for doc in docs}
    for doc in docs:
        doc.pop("api")
    started = time.process_time()
    snapshot = ToolSnapshot.build(docs)
    parsed_s = time.process_time() - started
    started = time.process_time()
    index = ToolIndex(snapshot.enabled, titles)
    indexed_s = time.process_time() - started
    queries = json.loads(EVAL.read_text())["queries"]
    found = dict.fromkeys(KS, 0)
    misses = []
    started = time.process_time()
    for query in queries:
        ranked = [t.name for t in index.search(query["query"], limit=max(KS), allowed=_any)]
        for k in KS:
            found[k] += any(name in query["tools"] for name in ranked[:k])
        if not any(name in query["tools"] for name in ranked[:5]):
            misses.append({"query": query["query"], "wanted": query["tools"], "got": ranked[:5]})
    search_ms = 1000 * (time.process_time() - started) / len(queries)
    return {
        "tools": len(snapshot.enabled),
        "queries": len(queries),
        **{f"recall_at_{k}": found[k] / len(queries) for k in KS},
        "cpu_ms_per_search": search_ms,
        "snapshot_build_s": parsed_s,
        "index_build_s": indexed_s,
        "misses_at_5": misses,
    }


def _any(tool: Any) -> bool:
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()
    figures = measure(args.tools)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "search-quality.json").write_text(json.dumps(figures, indent=1))
    print(
        f"{figures['queries']} queries over {figures['tools']} tools: recall@1 "
        f"{figures['recall_at_1']:.3f}, @5 {figures['recall_at_5']:.3f}, @10 "
        f"{figures['recall_at_10']:.3f}; {figures['cpu_ms_per_search']:.3f} ms CPU per search; "
        f"built in {figures['snapshot_build_s']:.1f} s (snapshot) + "
        f"{figures['index_build_s']:.1f} s (index)"
    )
    print(f"written: {out / 'search-quality.json'}")


if __name__ == "__main__":
    main()
