"""The service's log records, captured as the JSON lines it would write."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from app.observe.logs import JsonFormatter


class JsonLines(logging.Handler):
    """Every record of every logger, formatted by the service's own formatter."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def entries(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.lines]
