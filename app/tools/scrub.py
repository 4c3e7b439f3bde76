"""Hidden values (context arguments, secrets) replaced in text that leaves a tool call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
# Shorter values are not scrubbed: they would match ordinary text.
MIN_REDACTED_LENGTH = 4


class Scrubber:
    """Replaces hidden values in text headed for the model or a caller (a tool may echo what it
    received). Longest first, so a value containing another is replaced whole."""

    __slots__ = ("_values",)

    def __init__(self, hidden: Iterable[Any] = ()) -> None:
        values: set[str] = set()
        for value in hidden:
            if isinstance(value, list):
                values.update(str(item) for item in value)
            elif not isinstance(value, bool | dict):
                values.add(str(value))
        self._values = sorted(
            (v for v in values if len(v) >= MIN_REDACTED_LENGTH), key=len, reverse=True
        )

    def __bool__(self) -> bool:
        return bool(self._values)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text
