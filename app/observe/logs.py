"""Structured JSON logs, and the one place where whatever is logged gets redacted.

Every record leaves through `JsonFormatter`, which adds the request's id and tenant (from a
context variable the request middleware sets) and passes the message, exception text and
extra fields through `redact`: bearer tokens, API keys, URL query strings, fields named like
credentials, and the values a running chat must hide (its context arguments and secrets).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson
from opentelemetry import trace

from app.kit.hidden import REDACTED, HiddenValues

# What a request's log lines carry: the middleware sets it, authentication adds the tenant.
request_context: ContextVar[dict[str, str] | None] = ContextVar("request_context", default=None)
# Values a running chat must never log (context arguments, secrets), set for its duration.
_hidden_values: ContextVar[HiddenValues | None] = ContextVar("hidden_values", default=None)
# Whether lines carry the current span's trace_id and span_id (tracing on: telemetry.py).
_trace_ids = False

_PATTERNS = [
    # Authorization: Bearer xyz / Basic xyz, in headers, reprs or prose.
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), r"\1 " + REDACTED),
    # key=value and "key": "value" for names that hold credentials.
    (
        re.compile(
            r"(?i)([\"']?\b(?:authorization|api[_-]?key|x-api-key|access[_-]?token|token|secret|"
            r"password|passwd|client[_-]?secret)\b[\"']?\s*[:=]\s*[\"']?)"
            r"(?!\[redacted\]|(?i:bearer|basic)\s)"
            r"[^\s\"',;}&]+"
        ),
        r"\1" + REDACTED,
    ),
    # Tenant keys and OpenAI-style keys wherever they appear.
    (re.compile(r"\btg_[A-Za-z0-9_-]{16,}"), "tg_" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), "sk-" + REDACTED),
    # Query strings carry context arguments of GET tools: keep the URL, drop the query.
    (re.compile(r"(\bhttps?://[^\s?#\"'<>]+)\?[^\s#\"'<>]*"), r"\1?" + REDACTED),
]
_SENSITIVE_FIELDS = frozenset(
    {
        "authorization",
        "api_key",
        "apikey",
        "token",
        "secret",
        "secrets",
        "password",
        "value",
        "context",
        "context_arguments",
        "headers",
    }
)


def redact(text: str) -> str:
    """`text` with credentials, query strings and the running chat's hidden values removed."""
    hidden = _hidden_values.get()
    if hidden is not None:
        text = hidden.redact(text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _redacted_field(key: str, value: Any) -> Any:
    if key.lower() in _SENSITIVE_FIELDS:
        return REDACTED
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return redact(str(value))


def hiding(values: list[Any]) -> AbstractContextManager[None]:
    """Within the block (and tasks it starts), these values never appear in a log line."""
    hidden = HiddenValues(values)
    return _hiding(hidden) if hidden else nullcontext()


def hiding_forms(hidden: HiddenValues) -> AbstractContextManager[None]:
    """`hiding` for values already prepared (a request's `Scrubber.values`)."""
    return _hiding(hidden) if hidden else nullcontext()


@contextmanager
def _hiding(hidden: HiddenValues) -> Iterator[None]:
    outer = _hidden_values.get()
    token = _hidden_values.set(outer.joined(hidden) if outer is not None else hidden)
    try:
        yield
    finally:
        _hidden_values.reset(token)


def carry_trace_ids(on: bool) -> None:
    """From now on, lines written inside a span name its `trace_id` and `span_id` (or not)."""
    global _trace_ids
    _trace_ids = on


def trace_ids() -> dict[str, str]:
    """The current span's ids as log fields (none outside a span, or with tracing off)."""
    if not _trace_ids:
        return {}
    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return {}
    return {"trace_id": format(found.trace_id, "032x"), "span_id": format(found.span_id, "016x")}


# LogRecord's own attributes; anything else on a record came from `extra=`.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request context, extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        context = request_context.get()
        if context:
            entry.update(context)
        if _trace_ids:
            entry.update(trace_ids())
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in entry:
                entry[key] = _redacted_field(key, value)
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(entry).decode()


class TextFormatter(logging.Formatter):
    """Plain lines for a terminal (LOG_FORMAT=text), redacted the same way."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        context = {**(request_context.get() or {}), **trace_ids()}
        line = redact(super().format(record))
        return f"{line} [{' '.join(f'{k}={v}' for k, v in context.items())}]" if context else line


# Libraries whose debug output holds documents, headers or URLs: never below WARNING.
QUIET_LOGGERS = (
    "pymongo",
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "openai",
    "mcp",
    "uvicorn.access",
    "bm25s",  # a DEBUG line per index it builds (it sets its own logger to DEBUG)
)


def configure_logging(level: str, log_format: str = "json") -> None:
    """Route every logger through one redacting handler on stderr (idempotent)."""
    root = logging.getLogger()
    formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    handler = next((h for h in root.handlers if getattr(h, "toolgate", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.toolgate = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    handler.setFormatter(formatter)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    for name in ("uvicorn", "uvicorn.error"):  # uvicorn's own lines go through ours too
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
