"""Hidden values (context arguments, secrets) replaced in text that leaves a tool call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.hidden import REDACTED, HiddenValues

__all__ = ["REDACTED", "Scrubber"]


class Scrubber:
    """Replaces hidden values, raw or escaped the way an upstream may echo them
    (`app/hidden.py`), in text headed for the model or a caller. `values` (prepared once per
    request) also hides them from the request's log lines (`app.logs.hiding_forms`)."""

    __slots__ = ("values",)

    def __init__(self, hidden: Iterable[Any] = ()) -> None:
        self.values = HiddenValues(hidden)

    def __bool__(self) -> bool:
        return bool(self.values)

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
