"""Hidden values (context arguments, secrets) replaced in text that leaves a tool call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.hidden import REDACTED, searched_forms

__all__ = ["REDACTED", "Scrubber"]


class Scrubber:
    """Replaces hidden values, raw or in the encodings an upstream may echo them in
    (`app/hidden.py`), in text headed for the model or a caller."""

    __slots__ = ("values",)

    def __init__(self, hidden: Iterable[Any] = ()) -> None:
        self.values = searched_forms(hidden)

    def __bool__(self) -> bool:
        return bool(self.values)

    def __call__(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text
