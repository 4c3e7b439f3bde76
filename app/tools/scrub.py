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
