"""The error body every route returns (RFC 9457 problem details)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class FieldProblem(BaseModel):
    path: str
    message: str


class Problem(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldProblem] | None = None


_DESCRIPTIONS = {
    400: "Malformed request (for example invalid JSON)",
    401: "Missing, malformed, unknown or rotated API key",
    403: "A valid key of the wrong kind (admin key on a tenant route, or the reverse)",
    404: "No such object for this tenant",
    409: "Conflicts with an existing object, or a per-tenant cap on stored objects is reached",
    413: "Request body larger than the configured limit",
    422: "Well-formed but invalid; `errors` lists each problem with its JSON path",
    429: "A per-tenant rate limit or concurrency cap was hit; retry after `Retry-After` seconds",
    502: "The model endpoint or an MCP server failed (error after retries, bad credentials, "
    "malformed answer, unreachable)",
    503: "A dependency is unavailable (database, model config, model rate limit); retry later",
    504: "The model, an MCP server or the chat deadline timed out",
}


def problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the given error statuses."""
    return {
        code: {
            "model": Problem,
            "description": _DESCRIPTIONS[code],
            "content": {"application/problem+json": {}},
        }
        for code in codes
    }
