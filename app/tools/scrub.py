"""Hidden values (context arguments, secrets) replaced in text that leaves a tool call."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from app.kit.hidden import REDACTED, HiddenValues

__all__ = ["NOTHING_HIDDEN", "REDACTED", "Scrubber"]

MAX_JSON_DEPTH = 64  # deeper JSON (an MCP result's structured content) is cut, not walked


class Scrubber:
    """Replaces hidden values, raw or escaped the way an upstream may echo them
    (`app/kit/hidden.py`), in text headed for the model or a caller. `values` (prepared once per
    request) also hides them from the request's log lines (`app.observe.logs.hiding_forms`)."""

    __slots__ = ("values",)

    def __init__(self, hidden: Iterable[Any] = ()) -> None:
        self.values = HiddenValues.of(hidden)

    def __bool__(self) -> bool:
        return bool(self.values)

    def joined(self, hidden: Iterable[Any]) -> Scrubber:
        """A scrubber that also hides `hidden` (tools a chat's search revealed)."""
        more = HiddenValues.of(hidden)
        if not more:
            return self
        joined = Scrubber()
        joined.values = self.values.joined(more) if self.values else more
        return joined

    def __call__(self, text: str) -> str:
        return self.values.redact(text)

    def head(self, text: str, limit: int) -> str:
        """At least `limit` characters of `self(text)` (all of it if shorter), reading no
        further into `text` than that needs: the work is bounded by the limit, not by the text.
        Where redactions shortened it, it reads on (twice as far each time)."""
        until = limit
        while True:
            shown = self.values.redact(text, until=until)
            if len(shown) >= limit or until >= len(text):
                return shown
            until *= 2

    def json(self, value: Any, *, depth: int = 0) -> Any:
        """`value` (JSON: an MCP result's blocks or structured content) with every string
        scrubbed; an image's or audio clip's base64 `data` is decoded and, if a hidden value is
        in it, the block becomes a text saying so (binary cannot be redacted in place)."""
        if depth > MAX_JSON_DEPTH:
            return REDACTED
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.json(item, depth=depth + 1) for item in value]
        if not isinstance(value, dict):
            return value
        if value.get("type") in ("image", "audio") and isinstance(value.get("data"), str):
            if self._hides_in_base64(value["data"]):
                return {"type": "text", "text": f"[{value['type']} withheld: {REDACTED} in it]"}
            kept = {k: v for k, v in value.items() if k != "data"}
            return {**self.json(kept, depth=depth + 1), "data": value["data"]}
        return {self(k): self.json(v, depth=depth + 1) for k, v in value.items()}

    def _hides_in_base64(self, data: str) -> bool:
        try:
            raw = base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError):
            return False
        text = raw.decode("latin-1")  # one character per byte: a value's bytes stay together
        return self(text) != text


NOTHING_HIDDEN = Scrubber()  # a run with no hidden value (read-only, shared)
