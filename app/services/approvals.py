"""Approval before risky calls, kept between the two requests: the chat that stops with
`approval_required` holds its waiting calls here, and the one continuation that decides
exactly those calls takes them. A conversation the client wrote itself, a decision sent twice,
one sent by another tenant or client token, or one past `APPROVAL_WAIT_S` matches nothing held,
and is a 422 before any tool runs.

What the person decides on (call ids, tools, arguments) is still read from the conversation
sent back and checked against the decisions (`app/chat/approval.py`); this adds that the
server itself stopped for those very calls, for this caller, once.

A call of an `operator` tool in a client token's chat is the tenant key's to decide: the stop
is listed (`GET /approvals`), the operator decides it here (`decide`), and the continuation
(which may not decide it itself) takes the operator's decision; before it, the continuation is
a 409 and the stop stays held."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import orjson

from app.chat.approval import Decision, PendingCall, decision_problems
from app.chat.model import ModelToolCall
from app.crypto import random_hex
from app.errors import (
    ConflictError,
    DatabaseUnavailable,
    NotFoundError,
    ServiceUnavailableError,
    UnprocessableError,
    field_error,
)
from app.repositories.approvals import ApprovalRepository
from app.repositories.database import Document, utc_now
from app.schemas.approvals import OperatorDecision, WaitingApproval, WaitingApprovalPage
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
        document: Document = {
            "approval_id": random_hex(32),
            "key": waiting_key(pending),
            "holder": holder,
            "calls": [call.shown() for call in pending],
            "operator_pending": sum(call.operator for call in pending),
            "decisions": {},
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
        taken = await self._repository.take(key, holder, self._clock(), tenant_id=tenant_id)
        if taken is None:
            await self._explain_not_taken(key, holder, tenant_id=tenant_id)
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
        decided = {d.call_id: Decision(d.approved, d.reason) for d in approvals}
        for call_id, given in (taken.get("decisions") or {}).items():  # the operator's
            decided[call_id] = Decision(bool(given.get("approved")), given.get("reason"))
        return list(calls), decided

    async def _explain_not_taken(self, key: str, holder: str | None, *, tenant_id: str) -> None:
        """A 409 when the stop is held but an operator has yet to decide some of its calls."""
        held = await self._repository.held(key, holder, self._clock(), tenant_id=tenant_id)
        if held is not None and held.get("operator_pending"):
            waiting = [c["id"] for c in held["calls"] if c.get("decided_by") == "operator"]
            verb = "waits" if len(waiting) == 1 else "wait"
            raise ConflictError(
                f"Call {', '.join(waiting)} {verb} for an operator's decision (the tenant key: "
                f"POST /approvals/{held.get('approval_id')}/decisions); send the conversation "
                "back once decided."
            )

    async def waiting(
        self, *, tenant_id: str, holder: str | None, limit: int, offset: int
    ) -> WaitingApprovalPage:
        """The stops still waiting: the tenant key sees every one, a client token its own."""
        docs = await self._repository.waiting(
            self._clock(),
            tenant_id=tenant_id,
            holder=holder,
            every_holder=holder is None,
            limit=limit + 1,  # one more: whether there is a next page
            offset=offset,
        )
        return WaitingApprovalPage(
            items=[_shown(doc) for doc in docs[:limit]],
            limit=limit,
            offset=offset,
            next_offset=offset + limit if len(docs) > limit else None,
        )

    async def decide(
        self, approval_id: str, decisions: Sequence[OperatorDecision], *, tenant_id: str
    ) -> WaitingApproval:
        """An operator's decisions on every call of the stop that waits for one: 404 for no
        such stop (of this tenant, unexpired), 422 for decisions that do not match those calls,
        409 once decided."""
        now = self._clock()
        held = await self._repository.one(approval_id, now, tenant_id=tenant_id)
        if held is None:
            raise NotFoundError(f"no call waits under approval '{approval_id}'")
        operator_calls = [c["id"] for c in held["calls"] if c.get("decided_by") == "operator"]
        problems = operator_decision_problems(decisions, operator_calls)
        if problems:
            raise UnprocessableError(
                "The decisions do not match the calls that wait for an operator.",
                errors=[field_error(path, message) for path, message in problems],
            )
        given = {d.call_id: {"approved": d.approved, "reason": d.reason} for d in decisions}
        decided = await self._repository.decide(approval_id, given, now, tenant_id=tenant_id)
        if decided is None:
            raise ConflictError(f"the calls of approval '{approval_id}' are decided already")
        return _shown(decided)


def operator_decision_problems(
    decisions: Sequence[OperatorDecision], waiting: Sequence[str]
) -> list[tuple[str, str]]:
    """(path, message) for a decision on a call that does not wait for an operator, a second
    one on a call, and each waiting call left undecided (all are decided at once)."""
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, decision in enumerate(decisions):
        path = f"$.decisions[{index}].call_id"
        if decision.call_id in seen:
            problems.append((path, "a second decision on the same call"))
        elif decision.call_id not in waiting:
            known = ", ".join(waiting) or "none"
            problems.append((path, f"no call waits for an operator under it (waiting: {known})"))
        seen.add(decision.call_id)
    problems += [
        ("$.decisions", f"call '{call_id}' waits for a decision")
        for call_id in waiting
        if call_id not in seen
    ]
    return problems


def _shown(doc: Document) -> WaitingApproval:
    decisions = doc.get("decisions") or {}
    return WaitingApproval.model_validate(
        {
            "approval_id": doc["approval_id"],
            "holder": doc.get("holder"),
            "calls": [
                {
                    "id": call["id"],
                    "tool": call["tool"],
                    "arguments": call["arguments"],
                    "decided_by": call.get("decided_by", "caller"),
                    "decision": decisions.get(call["id"]),
                }
                for call in doc["calls"]
            ],
            "held_at": doc["held_at"],
            "expires_at": doc["expires_at"],
        }
    )


def waiting_key(pending: Sequence[PendingCall]) -> str:
    """The digest of the waiting calls (ids, tools, arguments as JSON), in any order."""
    calls = sorted(
        orjson.dumps([call.id, call.tool, call.arguments], option=orjson.OPT_SORT_KEYS)
        for call in pending
    )
    return hashlib.sha256(b"\n".join(calls)).hexdigest()
