"""Tenant routes: the calls waiting for a person's approval, and an operator's decisions on
those that wait for the tenant key."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query

from app.deps import CallerDep, TenantDep
from app.schemas import examples
from app.schemas.approvals import (
    APPROVAL_ID_PATTERN,
    OperatorDecisions,
    WaitingApproval,
    WaitingApprovalPage,
)
from app.schemas.problems import problem_responses

router = APIRouter(
    prefix="/approvals", tags=["approvals"], responses=problem_responses(401, 403, 503)
)
ApprovalIdPath = Annotated[str, Path(pattern=APPROVAL_ID_PATTERN)]


@router.get("", response_model=WaitingApprovalPage, responses=problem_responses(422))
async def list_approvals(
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
) -> WaitingApprovalPage:
    """The chats' stops still waiting for a person, newest first: with the tenant key every
    one of the tenant's, with a client token its own chats' only."""
    holder = caller.token.token_id if caller.token is not None else None
    return await caller.services.approvals.waiting(
        tenant_id=caller.id, holder=holder, limit=limit, offset=offset
    )


@router.post(
    "/{approval_id}/decisions",
    response_model=WaitingApproval,
    responses=problem_responses(404, 409, 413, 422),
)
async def decide_approval(
    approval_id: ApprovalIdPath,
    body: Annotated[OperatorDecisions, Body(openapi_examples=examples.OPERATOR_DECISIONS)],
    tenant: TenantDep,
) -> WaitingApproval:
    """An operator's decision (the tenant key's) on every call of a stop that waits for one
    (`decided_by: operator`); the chat's own caller then sends its conversation back."""
    return await tenant.services.approvals.decide(approval_id, body.decisions, tenant_id=tenant.id)
