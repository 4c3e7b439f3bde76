"""POST /chat: the tool-calling loop for a tenant's conversation."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep
from app.schemas.chat import ChatRequest, ChatResponse
from app.schemas.problems import problem_responses

router = APIRouter(tags=["chat"], route_class=StrictJSONRoute)


@router.post(
    "/chat",
    response_model=ChatResponse,
    responses=problem_responses(400, 401, 403, 413, 422, 502, 503, 504),
)
async def chat(body: ChatRequest, tenant: TenantDep) -> Any:
    """Run the model with the tenant's tools until it answers; returns every step taken."""
    # A dict: FastAPI validates it against ChatResponse once while serializing.
    return await tenant.services.chat.chat(body, tenant_id=tenant.id)
