"""Tenant routes: MCP servers (the operator's, read-only, and the tenant's own) and their tools."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response, status

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep, WriteLimit
from app.schemas import examples
from app.schemas.fields import SERVER_NAME_MAX, SERVER_NAME_PATTERN, Provider
from app.schemas.mcp import McpServerCreate, McpServerOut, McpServerTest, McpServerUpdate, McpTool
from app.schemas.problems import problem_responses

router = APIRouter(
    prefix="/mcp-servers",
    tags=["mcp-servers"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)
ServerNamePath = Annotated[
    str, Path(pattern=SERVER_NAME_PATTERN, max_length=SERVER_NAME_MAX, description="Server name")
]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=McpServerOut,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
)
async def create_mcp_server(
    body: Annotated[McpServerCreate, Body(openapi_examples=examples.MCP_SERVER)], tenant: TenantDep
) -> Any:
    """Register an MCP server reached over HTTP; its URL must pass the outbound checks."""
    return await tenant.services.mcp_servers.create(body, tenant_id=tenant.id)


@router.get("", response_model=list[McpServerOut])
async def list_mcp_servers(tenant: TenantDep) -> Any:
    """The servers the calling tenant can use: the operator's and its own."""
    return await tenant.services.mcp_servers.all(tenant_id=tenant.id)


@router.get("/{name}", response_model=McpServerOut, responses=problem_responses(404, 422))
async def get_mcp_server(name: ServerNamePath, tenant: TenantDep) -> Any:
    """One server; header values are masked."""
    return await tenant.services.mcp_servers.get(name, tenant_id=tenant.id)


@router.put(
    "/{name}",
    response_model=McpServerOut,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 404, 413, 422, 429),
)
async def replace_mcp_server(
    name: ServerNamePath,
    body: Annotated[McpServerUpdate, Body(openapi_examples=examples.MCP_SERVER_UPDATE)],
    tenant: TenantDep,
) -> Any:
    """Replace one of the tenant's servers but for its name (headers left out: kept); the same
    checks as registering it. The operator's cannot be changed: 403."""
    return await tenant.services.mcp_servers.replace(name, body, tenant_id=tenant.id)


@router.post(
    "/{name}/test",
    response_model=McpServerTest,
    response_model_exclude_none=True,
    dependencies=[WriteLimit],
    responses=problem_responses(404, 422, 429),
)
async def test_mcp_server(name: ServerNamePath, tenant: TenantDep) -> Any:
    """Connect to the server now and list its tools; a failure is the answer's `error`."""
    return await tenant.services.mcp_servers.test(name, tenant_id=tenant.id)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriteLimit],
    responses=problem_responses(404, 422, 429),
)
async def delete_mcp_server(name: ServerNamePath, tenant: TenantDep) -> Response:
    """Delete one of the tenant's servers (the operator's cannot be deleted: 403)."""
    await tenant.services.mcp_servers.delete(name, tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{name}/tools",
    response_model=list[McpTool] | list[dict[str, Any]],
    responses=problem_responses(404, 422, 502, 504),
)
async def list_mcp_server_tools(
    name: ServerNamePath,
    tenant: TenantDep,
    tool_format: Annotated[
        Provider | None,
        Query(alias="format", description="Return the tools in this provider's tool format"),
    ] = None,
) -> Any:
    """The server's tools as they join a chat (`{server}__{tool}`); connects unless cached."""
    return await tenant.services.mcp_servers.tools_json(
        name, tenant_id=tenant.id, provider=tool_format
    )
