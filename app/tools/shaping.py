"""Output shaping: a tool's `output.select` (JMESPath) applied to its JSON result.

What does not apply leaves the output as it is, with a note for the run record: the model still
gets the whole (capped, scrubbed) result rather than nothing.

A tenant writes the expression, so its work is bounded by the result's size: JMESPath can
double a value at every step (`[@,@]|[@,@]|...`, `join('', [@,@])`), and 22 such steps took
12 s of CPU and 30 MB for a two-character result. The interpreter here counts its steps and
measures every intermediate value (its size as JSON, shared parts counted as often as they
appear); past the budget it stops, and the output is left as it is.
"""

from __future__ import annotations

from typing import Any

import orjson
from jmespath.parser import ParsedResult
from jmespath.visitor import TreeInterpreter

MAX_STEPS = 200_000  # nodes visited (a projection visits its expression once per element)
SLACK_CHARS = 4096  # on top of four times the result's own size


class _OverBudget(Exception):
    pass


class BoundedInterpreter(TreeInterpreter):
    """JMESPath's tree interpreter, stopped once it has taken `MAX_STEPS` steps or any value it
    made is larger than `limit` (in characters of JSON, roughly)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit
        self._steps = 0
        self._sizes: dict[int, tuple[Any, int]] = {}  # id -> (the value, kept alive; its size)

    def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:  # a parsed node (a dict)
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise _OverBudget(f"it takes more than {MAX_STEPS} steps")
        result = super().visit(node, *args, **kwargs)
        if isinstance(result, str | list | dict) and self.size(result) > self._limit:
            raise _OverBudget("it makes a value far larger than the result")
        return result

    def size(self, value: Any) -> int:
        """Characters of `value` as JSON, about; shared parts counted each time they appear,
        each distinct list or object measured once (and no further than the limit)."""
        if isinstance(value, str):
            return 2 + len(value)
        if not isinstance(value, list | dict):
            return 8
        known = self._sizes.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        total, limit = 2, self._limit
        if isinstance(value, dict):
            for key, child in value.items():
                total += len(key) + 4 + self._child_size(child)
                if total > limit:
                    break  # at least this large: large enough to stop
        else:
            for child in value:
                total += 1 + self._child_size(child)
                if total > limit:
                    break
        self._sizes[id(value)] = (value, total)
        return total

    def _child_size(self, child: Any) -> int:
        kind = type(child)
        if kind is str:
            return 2 + len(child)
        if kind is int or kind is float or kind is bool or child is None:
            return 8
        return self.size(child)


def selected(expression: ParsedResult, content: str) -> tuple[str, str | None]:
    """`content` shaped by `expression`, or as it is with the reason it was not shaped."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content, "output.select not applied: the result is not JSON"
    interpreter = BoundedInterpreter(4 * len(content) + SLACK_CHARS)
    try:
        found: Any = interpreter.visit(expression.parsed, data)
        shaped = found if isinstance(found, str) or found is None else orjson.dumps(found).decode()
    except _OverBudget as exc:
        return content, f"output.select not applied: {exc}"
    except (RecursionError, orjson.JSONEncodeError):
        return content, "output.select not applied: the selection nests too deeply"
    except Exception as exc:  # a function given the wrong type, and the like
        return content, f"output.select not applied: {str(exc)[:200]}"
    if shaped is None:
        return content, "output.select not applied: the expression matched nothing"
    return shaped, None
