"""POST /chat: the tool-calling loop for a tenant's conversation, answered whole or streamed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request

from app.api.hot_routes import chat_response
from app.api.routing import StrictJSONRoute
from app.api.sse import STREAM_DOC
from app.deps import CallerDep
from app.schemas import examples
from app.schemas.chat import ChatRequest, ChatResponse
from app.schemas.problems import problem_responses

router = APIRouter(tags=["chat"], route_class=StrictJSONRoute)


@router.post(
    "/chat",
    response_model=ChatResponse,
    responses={
        **problem_responses(400, 401, 403, 413, 422, 429, 502, 503, 504),
        200: STREAM_DOC,
    },
)
async def chat(
    body: Annotated[ChatRequest, Body(openapi_examples=examples.CHAT)],
    tenant: CallerDep,
    request: Request,
) -> Any:
    """Run the model with the tenant's tools until it answers; returns every step taken."""
    # Usually answered by `ChatRoute` (app/api/hot_routes.py), with the same function.
    return await chat_response(tenant, body, request)
