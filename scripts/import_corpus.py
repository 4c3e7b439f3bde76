"""Import OpenAPI documents and call every tool against Prism, which checks each request against
the document: the table of documents, operations, tools, skips by reason and acceptance.

    python scripts/import_corpus.py [DOCUMENT ...] [--prism PATH] [--most N] [--github]

Default documents: tests/fixtures/openapi/. Prism is `@stoplight/prism-cli` from npm, installed
once into a cache when node and npm are there (tests/support/prism.py; `--prism` or PRISM_BIN
names another `prism`). Prism serves every document from one node process. Each tool (or, with
`--most N`, N of them evenly spread) is called with arguments generated from the schema the
model sees (tests/support/schema_samples.py), every security scheme mapped to a dummy secret.
`--github` adds GitHub's 13 MB description, unpacked from npm into the same cache; the
service's 500-operation cap is lifted here (the service imports it a tag at a time).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.tools.arguments import argument_problems  # noqa: E402
from app.tools.executors.external import render_headers  # noqa: E402
from app.tools.executors.request import build_request  # noqa: E402
from app.tools.openapi import METHODS, ImportOptions, convert  # noqa: E402
from app.tools.openapi_text import parse_document  # noqa: E402
from app.tools.swagger import as_openapi3  # noqa: E402
from app.tools.typed import ExternalTool, parse_stored_tool  # noqa: E402
from tests.support.prism import PrismHost, cache_dir, prism_program, serve  # noqa: E402
from tests.support.schema_samples import sample  # noqa: E402

SECRET = "dGVzdDp0ZXN0"  # base64 "test:test": fits basic, bearer and API keys alike


@dataclass
class Row:
    document: str
    operations: int = 0
    tools: int = 0
    calls: int = 0
    accepted: int = 0
    skips: Counter[str] = field(default_factory=Counter)
    rejections: list[str] = field(default_factory=list)
    unsatisfiable: list[str] = field(default_factory=list)  # optional arguments left out

    @property
    def acceptance(self) -> float:
        return self.accepted / self.calls if self.calls else 1.0


def _tools(document: Any, server: str) -> tuple[list[ExternalTool], Any, int]:
    openapi = as_openapi3(document)
    schemes = ((openapi.get("components") or {}).get("securitySchemes")) or {}
    options = ImportOptions(server_url=server, security=dict.fromkeys(schemes, "s"))
    options.max_operations = 100_000  # the service's cap (500 selected) is not under test here
    converted = convert(document, options)
    now = datetime.now(UTC)
    tools = []
    for doc in converted.tools:
        tool = parse_stored_tool({**doc, "created_at": now, "updated_at": now})[1]
        assert isinstance(tool, ExternalTool)
        tools.append(tool)
    paths = openapi.get("paths") or {}
    operations = sum(
        1 for item in paths.values() if isinstance(item, dict) for m in METHODS if m in item
    )
    return tools, converted, operations


def call_all(row: Row, tools: list[ExternalTool]) -> None:
    with httpx.Client(timeout=10) as http:
        for tool in tools:
            arguments = tool_arguments(tool, row)
            problems = argument_problems(arguments, tool.validator)
            context = {c.argument: SECRET for c in tool.context}
            built = build_request(tool, {**arguments, **context})
            headers, _ = render_headers(tool.headers, {"s": SECRET})
            row.calls += 1
            if problems or built.problems:
                row.rejections.append(f"{tool.name}: {(problems or built.problems)[0]}")
                continue
            answer = http.request(
                tool.method,
                built.url,
                content=built.body,
                headers={**built.headers, **(headers or {})},
            )
            rejection = prism_rejection(answer)
            if rejection is None:
                row.accepted += 1
            else:
                row.rejections.append(f"{tool.name}: {rejection}")


def tool_arguments(tool: ExternalTool, row: Row) -> dict[str, Any]:
    """Every argument, a sample its own schema accepts; an optional one whose schema no value
    meets (a `oneOf` whose choices all accept the same values) is left out, as a model would,
    and counted."""
    defs = tool.json_parameters.get("$defs")
    required = set(tool.json_parameters.get("required") or [])
    arguments = {}
    for name, schema in tool.json_parameters["properties"].items():
        value = sample(schema, defs)
        whole = {**schema, "$defs": defs} if defs else schema
        if name in required or jsonschema_rs.validator_for(whole).is_valid(value):
            arguments[name] = value
        else:
            row.unsatisfiable.append(f"{tool.name}.{name}")
    return arguments


def prism_rejection(answer: httpx.Response) -> str | None:
    """Why Prism refused the request, or None: its own errors (a request that breaks the
    document: 422, 401, 404 for no such operation) and request violations of severity Error it
    reports (a deprecated parameter is a Warning); a mock answer, even a documented 4xx, means
    the request passed. Prism cuts a long list ("Too many violations! [..."): then any request
    error in the text counts."""
    prism_error = "stoplight.io/prism/errors#" in answer.text[:300]
    if prism_error and "NO_RESPONSE_RESPONSE_DEFINED" not in answer.text[:300]:
        return f"HTTP {answer.status_code} {answer.text[:200]}"
    violations = answer.headers.get("sl-violations", "").removeprefix("Too many violations! ")
    try:
        listed = json.loads(violations) if violations else []
    except ValueError:
        compact = violations.replace(" ", "")
        request_error = '"location":["request"' in compact and '"severity":"Error"' in compact
        return f"violations: {violations[:200]}" if request_error else None
    found = [
        v
        for v in listed
        if (v.get("location") or [""])[0] == "request" and v.get("severity") == "Error"
    ]
    return f"violations: {json.dumps(found)[:200]}" if found else None


def run_document(path: Path, prism: PrismHost, most: int | None = None) -> Row:
    """Import `path` and call its tools (`most` of them, evenly spread, when given) against
    its Prism server."""
    row = Row(path.name)
    document = parse_document(path.read_text())
    tools, converted, row.operations = _tools(document, prism.urls[path])
    row.tools = len(tools)
    row.skips.update(s["reason"].split(":")[0][:60] for s in converted.skipped)
    call_all(row, spread(tools, most))
    return row


def spread(tools: list[ExternalTool], most: int | None) -> list[ExternalTool]:
    """At most `most` tools, every k-th one (first, last and those between alike)."""
    if most is None or len(tools) <= most:
        return tools
    if most < 2:
        return tools[: max(most, 0)]
    return [tools[round(i * (len(tools) - 1) / (most - 1))] for i in range(most)]


def table(rows: list[Row]) -> str:
    lines = [
        "| document | operations | tools | skipped (by reason) | calls | accepted |",
        "| --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in rows:
        skips = "; ".join(f"{n} x {r}" for r, n in row.skips.most_common()) or "none"
        lines.append(
            f"| {row.document} | {row.operations} | {row.tools} | {skips} | {row.calls} "
            f"| {row.acceptance:.0%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("documents", nargs="*", type=Path)
    parser.add_argument("--prism", help="the prism program (default: PRISM_BIN, PATH, cache)")
    parser.add_argument("--most", type=int, help="call at most this many tools per document")
    parser.add_argument(
        "--github", action="store_true", help=f"add GitHub's description ({OCTOKIT}, 13 MB)"
    )
    args = parser.parse_args()
    program = prism_program(args.prism)
    if program is None:
        sys.exit("Prism needs node and npm (or --prism PATH / PRISM_BIN)")
    documents = args.documents or corpus_documents()
    if args.github:
        documents.append(github_document())
    prism = serve(program, documents)
    try:
        rows = [run_document(path, prism, args.most) for path in documents]
    finally:
        prism.stop()
    print(table(rows))
    total = Row("all", **{k: sum(getattr(r, k) for r in rows) for k in TOTALS})
    print(
        f"\nall: {total.operations} operations, {total.tools} tools "
        f"({total.tools / max(total.operations, 1):.1%}), {total.calls} calls, "
        f"{total.accepted} accepted ({total.acceptance:.1%})"
    )
    for row in rows:
        for rejection in row.rejections[:20]:
            print(f"  {row.document}: {rejection}")
        for name in row.unsatisfiable[:10]:
            print(f"  {row.document}: left out (no value fits its schema): {name}")


def corpus_documents() -> list[Path]:
    """The corpus: every document in tests/fixtures/openapi/."""
    folder = ROOT / "tests/fixtures/openapi"
    return sorted(p for p in folder.iterdir() if p.suffix in (".json", ".yaml"))


OCTOKIT = "@octokit/openapi@23.0.2"  # MIT; GitHub's REST API description


def github_document() -> Path:
    """GitHub's description from npm, unpacked once into the cache beside Prism (too big for
    the repository)."""
    folder = cache_dir() / "octokit-openapi-23.0.2"
    document = folder / "package" / "generated" / "api.github.com.json"
    if not document.exists():
        folder.mkdir(parents=True, exist_ok=True)
        packed = (
            subprocess.run(
                ["npm", "pack", OCTOKIT, "--silent", "--pack-destination", str(folder)],
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        with tarfile.open(folder / packed) as archive:
            archive.extract("package/generated/api.github.com.json", folder, filter="data")
        (folder / packed).unlink()
    return document


TOTALS = ("operations", "tools", "calls", "accepted")


if __name__ == "__main__":
    main()
