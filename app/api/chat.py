"""POST /chat: the tool-calling loop for a tenant's conversation, answered whole or streamed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response

from app.api.routing import StrictJSONRoute
from app.api.sse import STREAM_DOC, event_stream
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
    services = tenant.services
    started = await services.chat.start(
        body, tenant_id=tenant.id, token=tenant.token
    )  # 429/4xx/503 here
    if body.stream or "text/event-stream" in request.headers.get("accept", ""):
        keepalive_s = services.settings.chat_stream_keepalive_s
        return event_stream(started.events(keepalive_s=keepalive_s), run_id=started.run_id)
    answer = await started.result()
    # Validated when it was built: serialized once here, with no second validation.
    return Response(
        answer.model_dump_json(),
        media_type="application/json",
        headers={"X-Run-ID": started.run_id},
    )
