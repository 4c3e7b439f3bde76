"""Tenant routes: the record of every run (chats, tool invocations)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from app.deps import TenantDep
from app.schemas.fields import NAME_PATTERN
from app.schemas.problems import problem_responses
from app.schemas.runs import IsoDateTime, Run, RunPage, RunQuery, RunStatus

router = APIRouter(prefix="/runs", tags=["runs"], responses=problem_responses(401, 403, 503))


@router.get(
    "",
    response_model=RunPage,
    responses=problem_responses(422),
)
async def list_runs(
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=200, description="next_cursor of a page")
    ] = None,
    tool_id: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="Runs that called it")
    ] = None,
    tool_name: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="Runs that called this function")
    ] = None,
    status: Annotated[RunStatus | None, Query(description="Runs that ended this way")] = None,
    since: Annotated[
        IsoDateTime | None, Query(description="Started at or after (ISO 8601)")
    ] = None,
    until: Annotated[IsoDateTime | None, Query(description="Started before (ISO 8601)")] = None,
) -> Any:
    """The calling tenant's runs (chats and tool invocations), newest first, a page at a time."""
    query = RunQuery(
        limit=limit, tool_id=tool_id, tool_name=tool_name, status=status, since=since, until=until
    )
    page = await tenant.services.runs.page(query, tenant_id=tenant.id, cursor=cursor)
    return Response(page, media_type="application/json")  # pre-serialized


@router.get(
    "/{run_id}",
    response_model=Run,
    response_model_exclude_none=True,
    responses=problem_responses(404, 422),
)
async def get_run(
    run_id: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")], tenant: TenantDep
) -> Any:
    """One run (a chat or a tool invocation) of the calling tenant."""
    run = await tenant.services.runs.get_json(run_id, tenant_id=tenant.id)
    return Response(run, media_type="application/json")  # pre-serialized
