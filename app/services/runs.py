"""Run records: what is kept of a run, and what admins read (app/services/run_recorder.py
writes them)."""

from __future__ import annotations

import base64
import contextlib
import logging
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import orjson

from app.errors import AppError, NotFoundError, UnprocessableError, field_error
from app.kit.crypto import random_hex
from app.observe.telemetry import annotate
from app.repositories.database import utc_now
from app.repositories.runs import RunStore
from app.repositories.storable import storable
from app.schemas.runs import Run, RunKind, RunQuery, RunStatus, Usage
from app.schemas.usage import BucketSize, UsageBy
from app.services.run_recorder import RunRecorder as RunRecorder  # where callers import it
from app.services.usage import usage_report, usage_window

logger = logging.getLogger(__name__)

RUN_STATUSES: tuple[RunStatus, ...] = typing.get_args(RunStatus)
SHOWN_DEPTH = 32  # a reduced record shows at most this much nesting (JSON writers stop near 255)


def run_record(
    *,
    run_id: str,
    kind: str,
    started: datetime,
    status: str,
    error: str | None,
    tool_calls: list[dict[str, Any]],
    model: str | None = None,
    iterations: int = 0,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What is kept of a run (a chat, or one invocation): never context values."""
    return {
        "run_id": run_id,
        "kind": kind,
        "started_at": started,
        "ended_at": datetime.now(UTC),
        "model": model,
        "stop_reason": status,
        "error": error,
        "iterations": iterations,
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "tool_calls": tool_calls,
    }


Clock = Callable[[], datetime]


def new_run_id() -> str:
    """32 hex digits: the time in nanoseconds, then 64 random bits. Records are listed by
    (started_at, run_id), and started_at keeps milliseconds (BSON): runs that start within the
    same millisecond still list in the order they started."""
    return f"{time.time_ns():016x}{random_hex(16)}"


@dataclass(slots=True)
class RunRecording:
    """One run being recorded: its id and start are minted when it begins; the run fills in
    how it went. Left by an exception it is `error`, left by cancellation (or before `status`
    was set) it is `cancelled`."""

    run_id: str
    kind: RunKind
    started: datetime
    status: RunStatus = "cancelled"
    error: str | None = None
    model: str | None = None
    iterations: int = 0
    usage: dict[str, int] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # kept as they are (messages)

    def document(self) -> dict[str, Any]:
        record = run_record(
            run_id=self.run_id,
            kind=self.kind,
            started=self.started,
            status=self.status,
            error=self.error,
            tool_calls=self.tool_calls,
            model=self.model,
            iterations=self.iterations,
            usage=self.usage,
        )
        return {**record, **self.extra}


class recording:  # a context manager used like a function: `with recording(...) as run`
    """Record the run done inside: whatever way it is left, its record is queued once (after
    `done`, which may count it). Left by an `AppError` it is `error` with the error's message,
    by any other exception `error`, by cancellation as the run last said (`cancelled` unless
    it set a status). A class, not a generator (docs/performance.md, "Seventh round")."""

    __slots__ = ("_done", "_recorder", "_run", "_tenant_id")

    def __init__(
        self,
        recorder: RunRecorder,
        *,
        tenant_id: str,
        kind: RunKind,
        run_id: str | None = None,
        clock: Clock = utc_now,
        done: Callable[[RunRecording], None] | None = None,
    ) -> None:
        self._recorder, self._tenant_id, self._done = recorder, tenant_id, done
        self._run = RunRecording(run_id or new_run_id(), kind, clock())

    def __enter__(self) -> RunRecording:
        # The current span (a chat's, a request's) names the run: a trace finds its record.
        annotate(**{"toolgate.run_id": self._run.run_id, "toolgate.run_kind": self._run.kind})
        return self._run

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        run = self._run
        if isinstance(exc, AppError):
            run.status, run.error = "error", exc.message
        elif isinstance(exc, Exception):
            run.status = "error"
        if self._done is not None:
            self._done(run)
        self._recorder.record(run.document(), tenant_id=self._tenant_id)


class RunService:
    """What admins read: runs, newest first, and per-tool aggregates."""

    def __init__(self, *, runs: RunStore) -> None:
        self._runs = runs

    async def get_json(self, run_id: str, *, tenant_id: str) -> bytes:
        found = await self._runs.get(run_id, tenant_id=tenant_id)
        if found is None:
            raise NotFoundError(f"run '{run_id}' does not exist")
        return shown_run(found)

    async def kept_messages(self, run_id: str, *, tenant_id: str) -> list[dict[str, Any]] | None:
        """The conversation a chat's record kept (RUN_STORE_MESSAGES), None if it kept none;
        404 for no such run (or one not stored yet)."""
        found = await self._runs.get(run_id, tenant_id=tenant_id)
        if found is None:
            raise NotFoundError(f"run '{run_id}' does not exist (or is not stored yet)")
        messages = found.get("messages")
        return messages if found.get("kind") == "chat" and isinstance(messages, list) else None

    async def page(self, query: RunQuery, *, tenant_id: str, cursor: str | None) -> bytes:
        """A page as JSON (a RunPage); every stored record is shown, whole or reduced."""
        if cursor:
            query = replace(query, after=_decode(cursor))
        items = await self._runs.page(query, tenant_id=tenant_id)
        next_cursor = _encode(items[-1]) if len(items) == query.limit else None
        shown = b",".join(shown_run(item) for item in items)
        return b'{"items":[%b],"next_cursor":%b}' % (shown, orjson.dumps(next_cursor))

    async def tool_stats(
        self, tool_id: str, *, tenant_id: str, since: datetime | None, until: datetime | None
    ) -> dict[str, Any]:
        until = until or datetime.now(UTC)
        since = since or _day_before(until)
        found = await self._runs.tool_stats(tool_id, tenant_id=tenant_id, since=since, until=until)
        calls, errors = int(found.get("calls", 0)), int(found.get("errors", 0))
        return {
            "tool_id": tool_id,
            "since": since,
            "until": until,
            "calls": calls,
            "errors": errors,
            "error_rate": errors / calls if calls else 0.0,
            "p50_ms": found.get("p50_ms") if calls else None,
            "p95_ms": found.get("p95_ms") if calls else None,
        }

    async def usage(
        self,
        *,
        tenant_id: str,
        by: UsageBy,
        since: datetime | None,
        until: datetime | None,
        bucket: BucketSize,
        limit: int,
    ) -> dict[str, Any]:
        """Usage per tool or per model over a window (a UsageReport), computed by the database."""
        window = usage_window(since=since, until=until, bucket=bucket, now=utc_now())
        return await usage_report(
            self._runs, window, tenant_id=tenant_id, by=by, bucket=bucket, limit=limit
        )


def shown_run(stored: dict[str, Any]) -> bytes:
    """A stored record as JSON. Reading never fails on what was stored (by this version or
    another): a record that does not validate or serialize is shown reduced, saying why."""
    try:
        return Run.model_validate(stored).model_dump_json(exclude_none=True).encode()
    except (ValueError, TypeError):  # pydantic's validation and serialization errors included
        pass
    try:
        reduced = storable(stored, max_depth=SHOWN_DEPTH)
        return Run.model_validate(reduced).model_dump_json(exclude_none=True).encode()
    except (ValueError, TypeError):
        pass
    return _minimal_run(stored).model_dump_json(exclude_none=True).encode()


def _minimal_run(stored: dict[str, Any]) -> Run:
    """What can always be shown of a record: its identity, times and how it ended."""
    epoch = datetime.fromtimestamp(0, UTC)
    started = stored.get("started_at")
    ended = stored.get("ended_at")
    status = stored.get("stop_reason")
    return Run(
        run_id=str(stored.get("run_id")),
        kind=stored.get("kind") if stored.get("kind") in typing.get_args(RunKind) else "chat",
        started_at=started if isinstance(started, datetime) else epoch,
        ended_at=ended if isinstance(ended, datetime) else epoch,
        stop_reason=status if status in RUN_STATUSES else "error",
        iterations=0,
        usage=Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
        tool_calls=[],
        error="the stored record cannot be shown whole; its details are left out",
    )


def _encode(run: dict[str, Any]) -> str:
    raw = f"{run['started_at'].isoformat()}|{run['run_id']}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, str]:
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        at, run_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("|")
        moment = datetime.fromisoformat(at)
        if moment.tzinfo is not None:
            return moment, run_id
    raise UnprocessableError(
        "The cursor is not valid.",
        errors=[field_error("query.cursor", "use next_cursor from a previous page")],
    )


_EARLIEST = datetime.min.replace(tzinfo=UTC)


def _day_before(instant: datetime) -> datetime:
    """A day earlier, or the first instant a datetime holds (0001-01-01 has no day before)."""
    day = timedelta(days=1)
    return instant - day if instant - _EARLIEST >= day else _EARLIEST
