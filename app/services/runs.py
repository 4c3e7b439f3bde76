"""Run records: what is kept of a run, and what admins read (app/services/run_recorder.py
writes them)."""

from __future__ import annotations

import base64
import contextlib
import logging
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from app.errors import NotFoundError, UnprocessableError, field_error
from app.repositories.runs import RunStore
from app.repositories.storable import storable
from app.schemas.runs import Run, RunKind, RunStatus, RunUsage
from app.services.run_recorder import RunRecorder as RunRecorder  # where callers import it

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


class RunService:
    """What admins read: runs, newest first, and per-tool aggregates."""

    def __init__(self, *, runs: RunStore) -> None:
        self._runs = runs

    async def get_json(self, run_id: str, *, tenant_id: str) -> bytes:
        found = await self._runs.get(run_id, tenant_id=tenant_id)
        if found is None:
            raise NotFoundError(f"run '{run_id}' does not exist")
        return shown_run(found)

    async def page(
        self,
        *,
        tenant_id: str,
        limit: int,
        cursor: str | None,
        tool_id: str | None,
        tool_name: str | None,
        status: str | None,
        since: datetime | None,
        until: datetime | None,
    ) -> bytes:
        """A page as JSON (a RunPage); every stored record is shown, whole or reduced."""
        items = await self._runs.page(
            tenant_id=tenant_id,
            limit=limit,
            after=_decode(cursor) if cursor else None,
            tool_id=tool_id,
            tool_name=tool_name,
            status=status,
            since=since,
            until=until,
        )
        next_cursor = _encode(items[-1]) if len(items) == limit else None
        shown = b",".join(shown_run(item) for item in items)
        return b'{"items":[%b],"next_cursor":%b}' % (shown, orjson.dumps(next_cursor))

    async def tool_stats(
        self, tool_id: str, *, tenant_id: str, since: datetime | None, until: datetime | None
    ) -> dict[str, Any]:
        until = until or datetime.now(UTC)
        since = since or until - timedelta(days=1)
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
        usage=RunUsage(prompt_tokens=0, completion_tokens=0, total_tokens=0),
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
