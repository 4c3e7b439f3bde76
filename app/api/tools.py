"""Tenant routes: the tenant's tool definitions."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Path, Query, Request, Response, status
from starlette.convertors import Convertor, register_url_convertor

from app.api.hot_routes import invoke_json, wants_stream
from app.api.routing import StrictJSONRoute, parsed_body
from app.api.sse import INVOKE_STREAM_DOC, event_stream
from app.deps import CallerDep, TenantDep, WriteLimit
from app.schemas import examples
from app.schemas.fields import NAME_PATTERN, TAG_PATTERN, Provider
from app.schemas.invocations import InvokeRequest, InvokeResult
from app.schemas.problems import problem_responses
from app.schemas.runs import IsoDateTime, ToolStats
from app.schemas.tools import (
    ImportResult,
    McpToolSettings,
    McpToolSettingsView,
    Tool,
    ToolCreate,
    ToolId,
    ToolImport,
    ToolPage,
    ToolType,
    ToolUpdate,
)

router = APIRouter(
    prefix="/tools",
    tags=["tools"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)
ToolIdPath = Annotated[str, Path(pattern=NAME_PATTERN, description="The tool's id")]
# Routes match in the order they are declared: the hot POST route comes first.


@router.post(
    "/{tool_id}/invoke",
    response_model=InvokeResult,
    responses={
        **problem_responses(400, 404, 409, 413, 422, 429, 502, 504),
        200: INVOKE_STREAM_DOC,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": InvokeRequest.model_json_schema(),
                    "examples": examples.INVOKE,
                }
            },
        }
    },
)
async def invoke_tool(tool_id: ToolIdPath, tenant: CallerDep, request: Request) -> Response:
    """Run one tool as a model would, without a model; with the tenant key disabled tools run
    too (test before enabling), with an end user's credential (client token, JWT) only the
    tools it may use, its context bound. Tool failures are answered 200 with `status:
    "error"`; every call is a run."""
    if wants_stream(request.headers.get("accept", "")):  # progress, then the result
        body = await parsed_body(request, InvokeRequest)
        prepared = await tenant.services.invocations.prepare_invoke(
            tool_id, body.arguments, body.context_arguments, tenant_id=tenant.id, token=tenant.token
        )  # every 4xx before the stream starts
        keepalive_s = tenant.services.settings.chat_stream_keepalive_s
        return event_stream(prepared.events(keepalive_s=keepalive_s), run_id=prepared.run_id)
    # Usually answered by `InvokeRoute` (app/api/hot_routes.py), with the same function.
    return Response(await invoke_json(tenant, tool_id, request), media_type="application/json")


class McpToolIdConvertor(Convertor[str]):
    """`{server}__{tool}`: an MCP server's tool (a server name has no double underscore)."""

    regex = "[a-zA-Z0-9-]+(?:_[a-zA-Z0-9-]+)*__[a-zA-Z0-9_-]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("mcp_tool_id", McpToolIdConvertor())
MCP_TOOL_PATH = "/{tool_id:mcp_tool_id}"
# An MCP server's tool takes stored settings by its id; a stored tool whose id has the same
# shape stays a stored tool (these routes serve it as the general ones do). Documented with
# the general routes (`PUT /tools/{tool_id}` says so), so the schema has one route per path.


@router.put(MCP_TOOL_PATH, include_in_schema=False, dependencies=[WriteLimit])
async def put_mcp_tool(
    tool_id: str,
    body: Annotated[ToolUpdate | McpToolSettings, Body(discriminator="type")],
    tenant: TenantDep,
) -> Any:
    """Store an MCP tool's settings (or replace a stored tool of this id)."""
    if isinstance(body, ToolUpdate):
        return await tenant.services.tools.replace(tool_id, body, tenant_id=tenant.id)
    await tenant.services.tools.refuse_stored(tool_id, tenant_id=tenant.id)
    return await tenant.services.mcp_tool_settings.put(tool_id, body, tenant_id=tenant.id)


@router.get(MCP_TOOL_PATH, include_in_schema=False)
async def get_mcp_tool(tool_id: str, tenant: TenantDep) -> Any:
    """An MCP tool's stored settings (or the stored tool of this id)."""
    if await tenant.services.tools.has(tool_id, tenant_id=tenant.id):
        stored = await tenant.services.tools.get_json(tool_id, tenant_id=tenant.id)
        return Response(stored, media_type="application/json")
    view: McpToolSettingsView = await tenant.services.mcp_tool_settings.get(
        tool_id, tenant_id=tenant.id
    )
    return view


@router.delete(MCP_TOOL_PATH, include_in_schema=False, dependencies=[WriteLimit])
async def delete_mcp_tool(tool_id: str, tenant: TenantDep) -> Response:
    """Forget an MCP tool's settings (or delete the stored tool of this id)."""
    if await tenant.services.tools.has(tool_id, tenant_id=tenant.id):
        await tenant.services.tools.delete(tool_id, tenant_id=tenant.id)
    else:
        await tenant.services.mcp_tool_settings.delete(tool_id, tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/create",
    status_code=status.HTTP_201_CREATED,
    response_model=Tool,
    response_model_exclude_none=True,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
)
async def create_tool(
    body: Annotated[ToolCreate, Body(openapi_examples=examples.TOOL_CREATE)], tenant: TenantDep
) -> Tool:
    """Create a tool for the calling tenant."""
    return await tenant.services.tools.create(body, tenant_id=tenant.id)


@router.post(
    "/import",
    response_model=ImportResult,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
)
async def import_tools(
    body: Annotated[ToolImport, Body(openapi_examples=examples.TOOL_IMPORT)], tenant: TenantDep
) -> Response:
    """External tools from an OpenAPI 3.0 or 3.1 (or Swagger 2.0) document, one per operation,
    each with its verdict: stored, or skipped with its reason (one operation never refuses the
    others); the tools that pass are stored together or not at all. `dry_run` shows the
    verdicts without storing."""
    answer = await tenant.services.importer.run(body, tenant_id=tenant.id)
    return Response(orjson.dumps(answer), media_type="application/json")  # pre-serialized


FormatQuery = Annotated[
    Provider | None,
    Query(alias="format", description="Return the tools in this provider's tool format instead"),
]


CategoryQuery = Annotated[
    str | None,
    Query(pattern=NAME_PATTERN, description="Only tools of this category (`default` included)"),
]


@router.get(
    "/",
    response_model=ToolPage | list[dict[str, Any]],
    response_model_exclude_none=True,
    responses=problem_responses(422),
)
# The app redirects no slashes (a 307 would answer before the credential is checked), so the
# list answers at both spellings.
@router.get("", include_in_schema=False)
async def list_tools(
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    type: Annotated[ToolType | None, Query(description="Only tools of this type")] = None,
    tag: Annotated[
        str | None, Query(pattern=TAG_PATTERN, description="Only tools with this tag")
    ] = None,
    category: CategoryQuery = None,
    tool_format: FormatQuery = None,
) -> Response:
    """List the calling tenant's tools by tool_id; with `format`, as that provider's tool list."""
    page = await tenant.services.tools.page_json(
        tenant_id=tenant.id,
        limit=limit,
        offset=offset,
        tool_type=type,
        tag=tag,
        provider=tool_format,
        category=category,
    )
    return Response(page, media_type="application/json")  # pre-serialized


@router.get(
    "/ids",
    response_model=list[ToolId],
    response_model_exclude_none=True,
    responses=problem_responses(422),
)
async def list_tool_ids(
    tenant: TenantDep,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    category: CategoryQuery = None,
) -> Response:
    """List the calling tenant's tool ids with their function names, by tool_id, a page at a
    time: `X-Total-Count` says how many there are, and a `Link` header (`rel="next"`) gives the
    next page while there is one."""
    page, total = await tenant.services.tools.ids_json(
        tenant_id=tenant.id, limit=limit, offset=offset, category=category
    )
    headers = {"X-Total-Count": str(total)}
    if offset + limit < total:
        following = request.url.include_query_params(offset=offset + limit, limit=limit)
        headers["Link"] = f'<{following.path}?{following.query}>; rel="next"'
    return Response(page, media_type="application/json", headers=headers)


@router.get(
    "/{tool_id}",
    response_model=Tool | dict[str, Any],
    response_model_exclude_none=True,
    responses=problem_responses(404, 422),
)
async def get_tool(
    tool_id: ToolIdPath, tenant: TenantDep, tool_format: FormatQuery = None
) -> Response:
    """Get one of the calling tenant's tools; with `format`, in that provider's tool format."""
    tool = await tenant.services.tools.get_json(tool_id, tenant_id=tenant.id, provider=tool_format)
    return Response(tool, media_type="application/json")  # pre-serialized


@router.get("/{tool_id}/stats", response_model=ToolStats, responses=problem_responses(404, 422))
async def get_tool_stats(
    tool_id: ToolIdPath,
    tenant: TenantDep,
    since: Annotated[
        IsoDateTime | None, Query(description="Window start (default: a day ago)")
    ] = None,
    until: Annotated[IsoDateTime | None, Query(description="Window end (default: now)")] = None,
) -> Any:
    """Calls, error rate and p50/p95 duration of one tool over a time window."""
    await tenant.services.tools.get_json(tool_id, tenant_id=tenant.id)  # 404 for unknown ids
    return await tenant.services.runs.tool_stats(
        tool_id, tenant_id=tenant.id, since=since, until=until
    )


@router.put(
    "/{tool_id}",
    response_model=Tool,
    response_model_exclude_none=True,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 404, 409, 413, 422, 429),
)
async def replace_tool(
    tool_id: ToolIdPath,
    body: Annotated[ToolUpdate, Body(openapi_examples=examples.TOOL_UPDATE)],
    tenant: TenantDep,
) -> Tool:
    """Replace a tool's whole definition; its tool_id cannot change. An MCP server's tool
    (`{server}__{tool}`) takes its settings instead: `{"type": "mcp", "category",
    "timeout_s", "output", "approval", "enabled", "presets"}` (GET and DELETE read and forget
    them)."""
    return await tenant.services.tools.replace(tool_id, body, tenant_id=tenant.id)


@router.delete(
    "/{tool_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriteLimit],
    responses=problem_responses(404, 422, 429),
)
async def delete_tool(tool_id: ToolIdPath, tenant: TenantDep) -> Response:
    """Delete one of the calling tenant's tools."""
    await tenant.services.tools.delete(tool_id, tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
