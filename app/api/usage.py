"""Tenant route: usage over time (calls, errors, latency, tokens), aggregated from run records."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.deps import TenantDep
from app.schemas.problems import problem_responses
from app.schemas.runs import IsoDateTime
from app.schemas.usage import DEFAULT_KEYS, MAX_KEYS, BucketSize, UsageBy, UsageReport

router = APIRouter(prefix="/usage", tags=["runs"], responses=problem_responses(401, 403, 503))


@router.get(
    "",
    response_model=UsageReport,
    response_model_exclude_none=True,
    responses=problem_responses(422),
)
async def get_usage(
    tenant: TenantDep,
    by: Annotated[UsageBy, Query(description="Per tool, or per provider and model")] = "tool",
    since: Annotated[
        IsoDateTime | None,
        Query(description="Window start (ISO 8601; default: a day before `until`)"),
    ] = None,
    until: Annotated[IsoDateTime | None, Query(description="Window end (default: now)")] = None,
    bucket: Annotated[
        BucketSize, Query(description="Bucket size; at most 1000 buckets, 31 days")
    ] = "1h",
    limit: Annotated[
        int, Query(ge=1, le=MAX_KEYS, description="Keys with series; the rest as `(other)`")
    ] = DEFAULT_KEYS,
) -> Any:
    """Calls, errors, p50/p95 latency (tools) and tokens (models) of the calling tenant over
    time, computed by the database from run records."""
    return await tenant.services.runs.usage(
        tenant_id=tenant.id, by=by, since=since, until=until, bucket=bucket, limit=limit
    )
