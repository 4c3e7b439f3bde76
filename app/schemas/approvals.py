"""Calls waiting for a person's approval, as `GET /approvals` lists them, and an operator's
decisions on those that wait for the tenant key (`POST /approvals/{approval_id}/decisions`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.chat import CallId, GivenApproval
from app.schemas.fields import ClientModel

APPROVAL_ID_PATTERN = r"^[0-9a-f]{32}$"
MAX_DECISIONS = 128


class WaitingCall(BaseModel):
    id: str
    tool: str
    arguments: Any = Field(description="As the model sent them (context values never shown).")
    decided_by: Literal["caller", "operator"] = Field(
        description="`caller`: the chat's own continuation decides it (`approvals`); "
        "`operator`: the tenant key does (`POST /approvals/{approval_id}/decisions`)."
    )
    decision: GivenApproval | None = Field(
        default=None, description="The operator's decision, once given (`operator` calls)."
    )


class WaitingApproval(BaseModel):
    """One chat's stop for approval: the calls it waits on, until its continuation takes them
    or `APPROVAL_WAIT_S` passes."""

    approval_id: str
    holder: str | None = Field(
        description="The client token whose chat stopped (its `token_id`); null: the tenant key."
    )
    calls: list[WaitingCall]
    held_at: datetime
    expires_at: datetime


class WaitingApprovalPage(BaseModel):
    items: list[WaitingApproval]
    limit: int
    offset: int
    next_offset: int | None = Field(description="The next page's offset; null: no more.")


class OperatorDecision(ClientModel):
    call_id: CallId = Field(description="The `id` of a call that waits for an operator.")
    approved: bool
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = Field(
        default=None, description="Why; a refusal's reason is what the model reads."
    )


class OperatorDecisions(ClientModel):
    """The operator's decision on every call of the stop that waits for one."""

    decisions: list[OperatorDecision] = Field(min_length=1, max_length=MAX_DECISIONS)
