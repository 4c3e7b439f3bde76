"""Local `$ref`s of an OpenAPI document, resolved with work bounded by the document's size.

Each target is resolved once and the result shared by every reference to it, so a document
whose schemas reference the next level twice (2^n paths to the bottom, no cycle) costs n
resolutions, not 2^n. The shared results form a graph, not a tree: callers look at them, never
walk or copy them whole. A stated budget (`MAX_RESOLVE_STEPS` nodes visited) bounds the rest.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

# Nodes visited over one whole import; an ordinary document needs a few times its node count.
MAX_RESOLVE_STEPS = 1_000_000
MAX_REF_DEPTH = 64


class Skip(Exception):
    """This operation cannot be a tool (the reason is reported)."""


class CpuSpent(Exception):
    """The import's CPU budget is spent (app/tools/openapi_worker.py)."""


class DocumentError(Exception):
    """The document cannot be imported at all; `problems` says why, each precisely."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Resolver:
    """Local `$ref`s (`#/...`) resolved; anything else, or a cycle, is a document problem."""

    def __init__(self, document: dict[str, Any], *, budget: int = MAX_RESOLVE_STEPS) -> None:
        self._document = document
        self._budget = budget
        self._steps = 0
        self._resolved: dict[str, Any] = {}  # ref -> its target, resolved once, shared
        self._failed: dict[str, str] = {}  # ref -> why it cannot be resolved
        self._active: list[str] = []  # refs being resolved now: meeting one again is a cycle
        self.problems: list[str] = []

    def resolve(self, node: Any) -> Any:
        """`node` with every `$ref` replaced by what it points at, deeply (targets shared)."""
        self._steps += 1
        if self._steps > self._budget:
            raise DocumentError(
                [f"resolving its $refs visits more than {self._budget} nodes (the import budget)"]
            )
        if isinstance(node, list):
            return [self.resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._reference(ref)
        return {key: self.resolve(value) for key, value in node.items()}

    def follow(self, ref: str) -> Any:
        """The target of a local `$ref`, its children not resolved (the caller walks them);
        Skip when it cannot be followed. Never a problem of the whole document: a schema
        converter meets cycles and foreign references in parts it may leave out."""
        self._steps += 1
        if self._steps > self._budget:
            raise DocumentError(
                [f"resolving its $refs visits more than {self._budget} nodes (the import budget)"]
            )
        shown = ref if len(ref) <= 200 else ref[:200] + "..."
        if not ref.startswith("#/"):
            raise Skip(f"$ref '{shown}' points outside the document (not supported)")
        node: Any = self._document
        for part in pointer_parts(ref):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise Skip(f"$ref '{shown}' points at nothing")
        return node

    def _reference(self, ref: str) -> Any:
        shown = ref if len(ref) <= 200 else ref[:200] + "..."
        if ref in self._resolved:
            return self._resolved[ref]
        if ref in self._failed:
            raise Skip(self._failed[ref])
        if ref in self._active:
            self._fail(ref, f"the schema at '{shown}' refers to itself (a cycle)")
        if not ref.startswith("#/"):
            self._fail(ref, f"$ref '{shown}' points outside the document (not supported)")
        if len(self._active) >= MAX_REF_DEPTH:
            self._fail(ref, f"$ref chain deeper than {MAX_REF_DEPTH} at '{shown}'")
        self._active.append(ref)
        try:
            target = self.resolve(self._target(ref, shown))
        except Skip as why:
            self._failed[ref] = str(why)
            raise
        finally:
            self._active.pop()
        self._resolved[ref] = target
        return target

    def _fail(self, ref: str, problem: str) -> None:
        self.problems.append(problem)
        self._failed.setdefault(ref, problem)
        raise Skip(problem)

    def _target(self, ref: str, shown: str) -> Any:
        node: Any = self._document
        for part in pointer_parts(ref):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                self._fail(ref, f"$ref '{shown}' points at nothing")
        return node


def pointer_parts(ref: str) -> list[str]:
    """The keys of a local `$ref` (`#/...`): a URI fragment, so percent-decoded first (RFC 6901,
    section 6: DigitalOcean writes `#/paths/~1v2~1droplets~1%7Bdroplet_id%7D/...`), then `~1`
    and `~0` of each key."""
    return [unquote(p).replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/")]
