"""Tool search quality on the project's evaluation set (scripts/bench/search_eval.json): the
right tool in the first five for at least 0.9 of the model-style queries, over 10,000 tools of
real APIs (issue 49). The corpus comes from the npm registry once per machine."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.slow
BENCH = ROOT / "scripts" / "bench"


def _module(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_expected_tool_of_the_evaluation_set_is_in_the_corpus() -> None:
    """A query whose right tools the corpus lacks would count against the ranking unfairly."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to fetch the OpenAPI directory (the npm registry)")
    corpus = _module("search_corpus")
    names = {tool["function"]["name"] for tool in corpus.corpus(10_000)}
    queries = json.loads(Path(corpus.EVAL).read_text())["queries"]
    assert len(queries) >= 150
    assert [q["query"] for q in queries if not set(q["tools"]) <= names] == []


def test_recall_at_five_is_at_least_nine_tenths_over_ten_thousand_tools() -> None:
    figures = _module("search_quality").measure(10_000)
    assert figures["tools"] == 10_000
    assert figures["recall_at_5"] >= 0.9, figures["misses_at_5"]
    assert figures["recall_at_1"] <= figures["recall_at_5"] <= figures["recall_at_10"]
