"""Approval before risky calls, kept between the two requests: the chat that stops with
`approval_required` holds its waiting calls here, and the one continuation that decides
exactly those calls takes them. A conversation the client wrote itself, a decision sent twice,
one sent by another tenant or client token, or one past `APPROVAL_WAIT_S` matches nothing held,
and is a 422 before any tool runs.

What the person decides on (call ids, tools, arguments) is still read from the conversation
sent back and checked against the decisions (`app/chat/approval.py`); this adds that the
server itself stopped for those very calls, for this caller, once."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import orjson

from app.chat.approval import Decision, PendingCall, decision_problems
from app.chat.model import ModelToolCall
from app.errors import (
    DatabaseUnavailable,
    ServiceUnavailableError,
    UnprocessableError,
    field_error,
)
from app.repositories.approvals import ApprovalRepository
from app.repositories.database import utc_now
from app.schemas.chat import ApprovalDecision

MISMATCH = "The approvals do not match the calls this conversation waits on."


class ApprovalBook:
    def __init__(
        self,
        repository: ApprovalRepository,
        *,
        wait_s: float,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._repository = repository
        self._wait = timedelta(seconds=wait_s)
        self._clock = clock

    async def hold(
        self, pending: Sequence[PendingCall], *, tenant_id: str, holder: str | None
    ) -> None:
        """Keep the calls a chat stopped for (before the caller hears of them): a 503 when the
        database cannot take them, for a whole chat and a streamed one alike (no call ran)."""
        now = self._clock()
        document = {
            "key": waiting_key(pending),
            "holder": holder,
            "calls": [call.shown() for call in pending],
            "held_at": now,
            "expires_at": now + self._wait,
        }
        try:
            await self._repository.hold(document, tenant_id=tenant_id)
        except DatabaseUnavailable as exc:
            raise ServiceUnavailableError(
                "The chat stopped for a person's approval, but the calls waiting could not be "
                "kept (the database is unavailable); no call ran: send the chat again."
            ) from exc

    async def decided(
        self,
        approvals: Sequence[ApprovalDecision],
        calls: Sequence[ModelToolCall],
        pending: Sequence[PendingCall],
        *,
        tenant_id: str,
        holder: str | None,
    ) -> tuple[list[ModelToolCall], dict[str, Decision]]:
        """The unanswered `calls` a conversation sent back ends with (those of them that wait:
        `pending`) and the person's decisions by call id: 422 unless each decision matches a
        waiting call (id, tool, arguments), each waiting call has one, and this caller's chat
        stopped for exactly these calls and nobody decided them yet. Without waiting calls,
        nothing is resumed: the conversation goes to the model as it is."""
        problems = decision_problems(approvals, pending)
        if problems:
            raise UnprocessableError(
                MISMATCH,
                errors=[field_error(path, message) for path, message in problems],
            )
        if not pending:
            return [], {}
        key = waiting_key(pending)
        if await self._repository.take(key, holder, self._clock(), tenant_id=tenant_id) is None:
            wait = f"{self._wait.total_seconds():g}"
            raise UnprocessableError(
                MISMATCH,
                errors=[
                    field_error(
                        "$.approvals",
                        "no chat of this caller stopped for these calls, or they were decided "
                        f"already, or more than {wait} s ago (APPROVAL_WAIT_S): send the "
                        "conversation of an `approval_required` answer back once",
                    )
                ],
            )
        return list(calls), {d.call_id: Decision(d.approved, d.reason) for d in approvals}


def waiting_key(pending: Sequence[PendingCall]) -> str:
    """The digest of the waiting calls (ids, tools, arguments as JSON), in any order."""
    calls = sorted(
        orjson.dumps([call.id, call.tool, call.arguments], option=orjson.OPT_SORT_KEYS)
        for call in pending
    )
    return hashlib.sha256(b"\n".join(calls)).hexdigest()
