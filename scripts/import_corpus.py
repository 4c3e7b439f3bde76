"""Import OpenAPI documents and call every tool against Prism, which checks each request against
the document: the table of documents, operations, tools, skips by reason and acceptance.

    python scripts/import_corpus.py [DOCUMENT ...] [--prism PATH]

Default documents: tests/fixtures/openapi/. Prism is `@stoplight/prism-cli` from npm
(`npm install @stoplight/prism-cli`; `--prism` or PRISM_BIN names its `prism` program). Each
tool is called with arguments generated from the schema the model sees
(tests/support/schema_samples.py), every security scheme mapped to a dummy secret.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.tools.arguments import argument_problems  # noqa: E402
from app.tools.executors.external import render_headers  # noqa: E402
from app.tools.executors.request import build_request  # noqa: E402
from app.tools.openapi import METHODS, ImportOptions, convert  # noqa: E402
from app.tools.openapi_text import parse_document  # noqa: E402
from app.tools.swagger import as_openapi3  # noqa: E402
from app.tools.typed import ExternalTool, parse_stored_tool  # noqa: E402
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

    @property
    def acceptance(self) -> float:
        return self.accepted / self.calls if self.calls else 1.0


def prism_program(given: str | None) -> str | None:
    return given or os.environ.get("PRISM_BIN") or shutil.which("prism")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_prism(program: str, document: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [program, "mock", "-h", "127.0.0.1", "-p", str(port), str(document)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"Prism did not start for {document}")


def _tools(document: Any, server: str) -> tuple[list[ExternalTool], Any, int]:
    openapi = as_openapi3(document)
    schemes = ((openapi.get("components") or {}).get("securitySchemes")) or {}
    options = ImportOptions(server_url=server, security=dict.fromkeys(schemes, "s"))
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
            defs = tool.json_parameters.get("$defs")
            properties = tool.json_parameters["properties"]
            arguments = {n: sample(s, defs) for n, s in properties.items()}  # every one
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


def prism_rejection(answer: httpx.Response) -> str | None:
    """Why Prism refused the request, or None: its own errors (a request that breaks the
    document: 422, 401, 404 for no such operation) and request violations it reports; a mock
    answer, even a documented 4xx, means the request passed."""
    prism_error = "stoplight.io/prism/errors#" in answer.text[:300]
    if prism_error and "NO_RESPONSE_RESPONSE_DEFINED" not in answer.text[:300]:
        return f"HTTP {answer.status_code} {answer.text[:200]}"
    violations = answer.headers.get("sl-violations", "")
    try:
        listed = json.loads(violations) if violations else []
    except ValueError:
        return f"violations: {violations[:200]}"
    found = [v for v in listed if (v.get("location") or [""])[0] == "request"]
    return f"violations: {json.dumps(found)[:200]}" if found else None


def run_document(path: Path, program: str) -> Row:
    row = Row(path.name)
    document = parse_document(path.read_text())
    process, url = start_prism(program, path)
    try:
        tools, converted, row.operations = _tools(document, url)
        row.tools = len(tools)
        row.skips.update(s["reason"].split(":")[0][:60] for s in converted.skipped)
        call_all(row, tools)
    finally:
        process.kill()
        process.wait()
    return row


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
    parser.add_argument("--prism")
    args = parser.parse_args()
    program = prism_program(args.prism)
    if program is None:
        sys.exit("Prism is not installed: npm install @stoplight/prism-cli (or --prism PATH)")
    fixtures = (ROOT / "tests/fixtures/openapi").iterdir()
    documents = args.documents or sorted(p for p in fixtures if p.suffix in (".json", ".yaml"))
    rows = [run_document(path, program) for path in documents]
    print(table(rows))
    for row in rows:
        for rejection in row.rejections[:10]:
            print(f"  {row.document}: {rejection}")


if __name__ == "__main__":
    main()
