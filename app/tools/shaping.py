"""Output shaping: a tool's `output.select` (JMESPath) applied to its JSON result.

What does not apply leaves the output as it is, with a note for the run record: the model still
gets the whole (capped, scrubbed) result rather than nothing.
"""

from __future__ import annotations

from typing import Any

import orjson
from jmespath.parser import ParsedResult


def selected(expression: ParsedResult, content: str) -> tuple[str, str | None]:
    """`content` shaped by `expression`, or as it is with the reason it was not shaped."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content, "output.select not applied: the result is not JSON"
    try:
        found: Any = expression.search(data)
    except RecursionError:
        return content, "output.select not applied: the result nests too deeply"
    except Exception as exc:  # a function given the wrong type, and the like
        return content, f"output.select not applied: {str(exc)[:200]}"
    if found is None:
        return content, "output.select not applied: the expression matched nothing"
    if isinstance(found, str):
        return found, None
    return orjson.dumps(found).decode(), None
