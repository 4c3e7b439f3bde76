"""Liveness and readiness probes."""

from __future__ import annotations

import hmac
from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field

from app.deps import ServicesDep, presented_bearer
from app.errors import ForbiddenError, UnauthorizedError
from app.schemas.problems import problem_responses
from app.services.health import HealthService

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    store: Literal["memory", "mongodb"]
    database: Literal["reachable", "unreachable", "wedged"] = Field(
        default="reachable",
        description=(
            "Whether the database answered its last check (every second); `wedged`: this "
            "process's database client has stopped working while the database answers a "
            "fresh client (liveness fails: restart the process)."
        ),
    )
    database_unreachable_s: float | None = Field(
        default=None, description="Seconds since the database stopped answering."
    )
    warning: str | None = None


def _health(health: HealthService, status: Literal["ok", "unavailable"]) -> Health:
    state = health.database()
    return Health(
        status=status,
        store=health.store,
        database="wedged" if state.wedged else "reachable" if state.reachable else "unreachable",
        database_unreachable_s=(
            None if state.unreachable_for_s is None else round(state.unreachable_for_s, 1)
        ),
        warning=(
            "in-memory store: data is lost when the process stops"
            if health.store == "memory"
            else None
        ),
    )


@router.get("/ping", response_class=PlainTextResponse)
async def ping() -> str:
    """A bare route: the benchmark's yardstick for the framework's own cost per request."""
    return "pong"


def _probe(health: HealthService, passing: bool, response: Response) -> Health:
    if not passing:
        response.status_code = 503
    return _health(health, "ok" if passing else "unavailable")


@router.get(
    "/healthz",
    response_model=Health,
    response_model_exclude_none=True,
    responses={503: {"model": Health}},
)
async def healthz(services: ServicesDep, response: Response) -> Health:
    """The process is up: 200 whether or not the database answers (an outage restarts
    nothing); 503 only when its database client is wedged (restart it). Says which store it
    uses and whether the database answers."""
    return _probe(services.health, services.health.alive(), response)


@router.get(
    "/readyz",
    response_model=Health,
    response_model_exclude_none=True,
    responses={503: {"model": Health}},
)
async def readyz(services: ServicesDep, response: Response) -> Health:
    """Ready to serve: the database answers, or stopped answering less than the cache TTL plus
    CACHE_STALE_IF_ERROR_S ago (cached keys and tools still serve); 503 otherwise."""
    return _probe(services.health, services.health.ready(), response)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 403),
    },
)
async def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus metrics; with METRICS_TOKEN set, send it as `Authorization: Bearer <token>`.
    In production they are not public unless METRICS_PUBLIC=true (403 without a token)."""
    settings = services.settings
    access, token = settings.metrics_access, settings.metrics_token
    if access == "closed":
        raise ForbiddenError(
            "Metrics are not public in production: set METRICS_TOKEN (then send it as a bearer "
            "token), or METRICS_PUBLIC=true."
        )
    if access == "token" and token is not None:
        try:
            presented = presented_bearer(request)
        except UnauthorizedError:
            presented = ""
        if not hmac.compare_digest(presented.encode(), token.get_secret_value().encode()):
            raise UnauthorizedError("Send METRICS_TOKEN as 'Authorization: Bearer <token>'.")
    return Response(services.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
