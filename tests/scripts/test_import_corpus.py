"""The import corpus against Prism (issue 29, part 4): every tool of each document in
tests/fixtures/openapi/ called with arguments generated from the schema the model sees, and
accepted by a mock server that checks each request against the document."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "openapi"


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
DOCUMENTS = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".json", ".yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_prism_accepts_the_calls_of_every_imported_tool(document: Path) -> None:
    program = corpus.prism_program(None)
    if program is None:
        pytest.skip("Prism is not installed (npm install @stoplight/prism-cli; or PRISM_BIN)")
    row = corpus.run_document(document, program)
    assert row.tools >= 0.85 * row.operations, corpus.table([row])
    assert row.acceptance >= 0.98, row.rejections
