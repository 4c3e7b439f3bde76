"""A 3 MB OpenAPI document in YAML, shaped like a real one (the import's loop-stall test; the
upstream serves it at /openapi/large.yaml)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import yaml

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "openapi" / "readme-api-3.1.yaml"
COPIES = 7
HUGE_COPIES = 32  # 15 MB, 1,728 operations (issue 43 H1)


@functools.cache
def large_yaml(copies: int = COPIES) -> str:
    """ReadMe's real API (473 KB of YAML) with its paths COPIES times over under /v1 ... /v7:
    3.3 MB of YAML with a real document's descriptions, nesting and choices, 378 operations.
    Slow to build (seconds): call it off the event loop the first time."""
    document = yaml.load(SOURCE.read_text(), Loader=yaml.CSafeLoader)
    paths = {}
    for copy in range(1, copies + 1):
        for path, item in document["paths"].items():
            paths[f"/v{copy}{path}"] = {
                method: {**op, "operationId": f"{op['operationId']}V{copy}"}
                if isinstance(op, dict) and "operationId" in op
                else op
                for method, op in item.items()
            }
    unshared = json.loads(json.dumps({**document, "paths": paths}))  # no YAML aliases
    return str(yaml.dump(unshared, Dumper=yaml.CSafeDumper, sort_keys=False, width=100))
