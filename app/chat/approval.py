"""Approval before risky calls: which calls of a turn wait for a person, which calls of a
conversation sent back are still unanswered, and whether the caller's decisions match them.

The chat stops before running any call of a turn in which one call waits (`approval_required`);
the caller sends the conversation back with one decision per waiting call, and the turn's calls
then run (refused ones go to the model as a refusal). What waits is read from the conversation
itself; that the service stopped for exactly those calls, for this caller, once, is the
approval book's check (`app/services/approvals.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.chat.model import ModelToolCall
from app.schemas.chat import ApprovalDecision
from app.schemas.fields import arguments_problem
from app.schemas.tools import ApprovalMode
from app.tools.invocation import visible_arguments
from app.tools.typed import TypedTool


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call that waits for a person: its arguments as the model sent them (visible ones), and
    whether an operator (the tenant key) decides it rather than the caller (`operator`
    approval, in a chat a client token started)."""

    id: str
    tool: str
    arguments: dict[str, Any]
    operator: bool = False

    def shown(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "arguments": self.arguments,
            "decided_by": "operator" if self.operator else "caller",
        }


@dataclass(frozen=True, slots=True)
class Decision:
    approved: bool
    reason: str | None = None

    def shown(self) -> dict[str, Any]:
        return {"approved": self.approved, "reason": self.reason}


def parsed_arguments(
    call: ModelToolCall, tool: TypedTool | None
) -> tuple[dict[str, Any], str | None]:
    """The call's arguments (without any named like a context parameter: the server's value
    wins, and nothing named like one is ever shown), and why they are unusable (or None)."""
    try:
        arguments = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON: {exc}"
    if not isinstance(arguments, dict):
        return {}, "the arguments must be a JSON object"
    problem = arguments_problem(arguments)  # every copy (answer, stream, record) is writable
    if problem is not None:
        return {}, f"the arguments are not acceptable: {problem}"
    return visible_arguments(tool, arguments), None


def waiting_calls(
    calls: Sequence[ModelToolCall],
    by_name: Mapping[str, TypedTool],
    mode: Callable[[TypedTool], ApprovalMode],
    *,
    by_token: bool = False,
) -> list[PendingCall]:
    """The calls that wait for a person: of a tool that requires approval, with usable
    arguments (a call that cannot run goes to the model as its error, with nothing to approve).
    In a chat of a client token (`by_token`), an `operator` tool's call is the operator's to
    decide; the tenant key decides its own chat's calls."""
    waiting = []
    for call in calls:
        tool = by_name.get(call.name)
        needed = mode(tool) if tool is not None else "never"
        if tool is None or needed == "never":
            continue
        arguments, problem = parsed_arguments(call, tool)
        if problem is None:
            operator = by_token and needed == "operator"
            waiting.append(PendingCall(call.id, call.name, arguments, operator))
    return waiting


def unanswered_calls(messages: Sequence[Mapping[str, Any]]) -> list[ModelToolCall]:
    """The calls of the conversation's last assistant turn that no tool message answers yet
    (empty unless the conversation ends with that turn and its answers)."""
    answered: set[Any] = set()
    for message in reversed(messages):
        if message.get("role") == "tool":
            answered.add(message.get("tool_call_id"))
            continue
        if message.get("role") != "assistant":
            return []
        return [
            ModelToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
            if c["id"] not in answered
        ]
    return []


def decision_problems(
    decisions: Sequence[ApprovalDecision], pending: Sequence[PendingCall]
) -> list[tuple[str, str]]:
    """(path, message) for each decision that matches no waiting call of the conversation
    (id, tool and arguments) or decides an operator's call, each decision given twice and each
    waiting call of the caller's left undecided."""
    waiting = {call.id: call for call in pending}
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, decision in enumerate(decisions):
        path = f"$.approvals[{index}]"
        call = waiting.get(decision.call_id)
        if decision.call_id in seen:
            problems.append((f"{path}.call_id", "a second decision on the same call"))
        elif call is not None and call.operator:
            problems.append(
                (
                    f"{path}.call_id",
                    "an operator decides this call (the tenant key: GET /approvals, then "
                    "POST /approvals/{approval_id}/decisions), not this client token",
                )
            )
        elif call is None:
            known = ", ".join(sorted(waiting)) or "none"
            problems.append(
                (f"{path}.call_id", f"no call of this conversation waits for it (waiting: {known})")
            )
        elif decision.tool is not None and decision.tool != call.tool:
            problems.append((f"{path}.tool", f"the waiting call is of tool '{call.tool}'"))
        elif decision.arguments is not None and _canonical(decision.arguments) != _canonical(
            call.arguments
        ):
            problems.append((f"{path}.arguments", "differ from the waiting call's arguments"))
        seen.add(decision.call_id)
    problems += [
        ("$.approvals", f"call '{call.id}' ({call.tool}) waits for a decision")
        for call in pending
        if call.id not in seen and not call.operator
    ]
    return problems


def _canonical(arguments: Mapping[str, Any]) -> bytes:
    """Equal as JSON, not as Python values (where `true == 1 == 1.0`)."""
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
