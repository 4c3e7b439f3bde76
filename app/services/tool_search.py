"""Tool search: the tenant's tools ranked for a short query the model writes ("spotify pause
playback"), so a chat over a large catalog offers a few tools and a `search_tools` function
instead of every tool.

Ranking is BM25 (bm25s, sparse matrices over numpy; Snowball stemming by PyStemmer) over four
fields of each tool, scored separately and summed with weights:

- **identity** (weight 1.0): the name split into words (`postCampaignsIdActionsSend` ->
  post campaigns id actions send), the category, the literal segments of an external tool's
  path, and the verbs its HTTP method stands for (POST: create add new send; GET on a
  collection: list search; GET on an item: get fetch; PUT/PATCH: update edit; DELETE: delete
  remove): imported APIs name an operation by its path, and a model asks by its action;
- **description** (0.3): the first 400 characters, markup removed;
- **parameters** (0.1): the names and descriptions of the first 20 parameters;
- **category** (0.5): the category's name and its description (the API's title, for tools an
  import put in one category per API).

Why these fields, measured against the alternatives: docs/performance.md, "Catalog size".

An index is built once per snapshot (off the event loop for large catalogs) and reuses the
words of every tool whose typed tool did not change (typed tools are shared by definition,
app/services/catalog.py). A search ranks every tool, then keeps the first `limit` that the
caller's `allowed` accepts: the rules (client token, categories, what the chat already has)
are the caller's, applied to each candidate in rank order.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import bm25s
import numpy as np
import Stemmer  # PyStemmer

from app.tools.typed import TypedTool

SEARCH_TOOL_NAME = "search_tools"
SEARCH_TOOL_DESCRIPTION = (
    "Find more tools. This chat offers only some of its tools at first; call this with a short "
    "query naming the service and the action (for example 'spotify pause playback' or "
    "'weather forecast for a city'), and the best matching tools are listed and become "
    "callable from your next step on."
)
MAX_QUERY_CHARS = 500
FIELD_WEIGHTS = (1.0, 0.3, 0.1, 0.5)  # identity, description, parameters, category
DESCRIPTION_CHARS = 400
PARAMETERS = 20
PARAMETER_CHARS = 80
# Candidates looked at before falling back to every tool (when the caller refuses most).
FIRST_LOOK = 64

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^A-Za-z0-9]+")
_MARKUP = re.compile(r"<[^>]+>")
_STOPWORDS = frozenset(bm25s.stopwords.STOPWORDS_EN)
_VERBS = {
    "POST": "create add new send",
    "PUT": "update set replace edit",
    "PATCH": "update edit change modify",
    "DELETE": "delete remove",
}
_stemmer = Stemmer.Stemmer("english")


def search_tool_schema() -> dict[str, Any]:
    """The `search_tools` function as chat completions declare it."""
    return {
        "type": "function",
        "function": {
            "name": SEARCH_TOOL_NAME,
            "description": SEARCH_TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "A few words: the service and the action.",
                        "maxLength": MAX_QUERY_CHARS,
                    }
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


def words(text: str) -> list[str]:
    """Lower-case stemmed words of `text`, names split at case changes and punctuation."""
    spaced = _NON_WORD.sub(" ", _CAMEL.sub(" ", text)).lower().split()
    stemmed: list[str] = _stemmer.stemWords(
        [w for w in spaced if w not in _STOPWORDS and len(w) < 40]
    )
    return stemmed


def _http_words(tool: TypedTool) -> str:
    route = tool.route()
    if route is None:
        return ""
    method, url = route
    path = re.sub(r"^[a-z]+://[^/]+", "", url).split("?")[0]
    segments = [s for s in path.split("/") if s]
    literal = " ".join(s for s in segments if "{" not in s)
    if method == "GET":
        on_item = bool(segments) and "{" in segments[-1]
        verbs = "get fetch retrieve show" if on_item else "list all search get"
    else:
        verbs = _VERBS.get(method, "")
    return f"{literal} {verbs}"


def tool_fields(tool: TypedTool, category_text: str) -> tuple[list[str], ...]:
    """The four fields of a tool, as words (see the module doc)."""
    description = _MARKUP.sub(" ", html.unescape(tool.description))[:DESCRIPTION_CHARS]
    properties = tool.json_parameters.get("properties")
    parameters = []
    if isinstance(properties, dict):
        for name, schema in list(properties.items())[:PARAMETERS]:
            about = schema.get("description") if isinstance(schema, dict) else None
            parameters.append(f"{name} {str(about or '')[:PARAMETER_CHARS]}")
    identity = f"{tool.name} {tool.category} {tool.title or ''} {_http_words(tool)}"
    return (
        words(identity),
        words(description),
        words(" ".join(parameters)),
        words(f"{tool.category} {category_text}"),
    )


@dataclass(frozen=True, slots=True)
class _Words:
    tool: TypedTool
    fields: tuple[list[str], ...]


class ToolIndex:
    """A BM25 index of some tools (a snapshot's), built once; `search` is read-only, so one
    index serves every concurrent chat of its snapshot."""

    def __init__(
        self,
        tools: Sequence[TypedTool],
        categories: Mapping[str, str] | None = None,
        previous: ToolIndex | None = None,
    ) -> None:
        """`categories`: each category's text (its description); `previous`: an index whose
        words are reused for the tools it already had (the same typed tool objects)."""
        known = previous._words if previous is not None else {}
        texts = categories or {}
        self._words: dict[int, _Words] = {}
        self.tools = list(tools)
        for tool in self.tools:
            found = known.get(id(tool))
            if found is None or found.tool is not tool:
                found = _Words(tool, tool_fields(tool, texts.get(tool.category, "")))
            self._words[id(tool)] = found
        self._fields = [self._field(i) for i in range(len(FIELD_WEIGHTS))]

    def _field(self, field: int) -> bm25s.BM25 | None:
        corpus = [self._words[id(tool)].fields[field] or [""] for tool in self.tools]
        if not corpus:
            return None
        index = bm25s.BM25()
        index.index(corpus, show_progress=False)
        return index

    def __len__(self) -> int:
        return len(self.tools)

    def search(
        self, query: str, *, limit: int, allowed: Callable[[TypedTool], bool]
    ) -> list[TypedTool]:
        """The best `limit` tools for `query` that `allowed` accepts, best first; none for a
        query without a word of the catalog."""
        terms = words(query[:MAX_QUERY_CHARS])
        if not terms or not self.tools or limit <= 0:
            return []
        scores = np.zeros(len(self.tools), dtype=np.float32)
        for weight, index in zip(FIELD_WEIGHTS, self._fields, strict=True):
            if index is not None:
                scores += weight * index.get_scores(terms)
        found = self._pick(scores, min(FIRST_LOOK, len(self.tools)), limit, allowed)
        if len(found) < limit and len(self.tools) > FIRST_LOOK:
            found = self._pick(scores, len(self.tools), limit, allowed)
        return found

    def _pick(
        self,
        scores: np.ndarray[Any, Any],
        look: int,
        limit: int,
        allowed: Callable[[TypedTool], bool],
    ) -> list[TypedTool]:
        if look < len(scores):
            candidates = np.argpartition(-scores, look - 1)[:look]
        else:
            candidates = np.arange(len(scores))
        ordered = candidates[np.argsort(-scores[candidates], kind="stable")]
        found: list[TypedTool] = []
        for place in ordered:
            if scores[place] <= 0:
                break
            tool = self.tools[int(place)]
            if allowed(tool):
                found.append(tool)
                if len(found) == limit:
                    break
        return found
