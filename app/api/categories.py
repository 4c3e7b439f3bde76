"""Tenant routes: tool categories, enabled as groups, with the usage hints chats send."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, status

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep, WriteLimit
from app.schemas import examples
from app.schemas.categories import (
    Category,
    CategoryCreate,
    CategoryDeletion,
    CategoryHints,
    CategoryToggle,
    CategoryUpdate,
)
from app.schemas.fields import NAME_PATTERN, TAG_PATTERN
from app.schemas.problems import problem_responses

router = APIRouter(
    prefix="/categories",
    tags=["categories"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)
CategoryPath = Annotated[str, Path(pattern=NAME_PATTERN, description="The category's name")]
WRITE_ERRORS = problem_responses(400, 404, 409, 413, 422, 429)


@router.get("/hints", response_model=CategoryHints, responses=problem_responses(422))
async def get_hints(
    tenant: TenantDep,
    tool_ids: Annotated[
        list[Annotated[str, Query(pattern=NAME_PATTERN)]] | None,
        Query(max_length=128, description="As a chat's `tool_ids` (repeat the parameter)"),
    ] = None,
    tags: Annotated[
        list[Annotated[str, Query(pattern=TAG_PATTERN)]] | None,
        Query(max_length=32, description="As a chat's `tags` (repeat the parameter)"),
    ] = None,
) -> CategoryHints:
    """Exactly the instruction block a chat with this selection sends the model (422 for
    unavailable `tool_ids`, as the chat would answer)."""
    return await tenant.services.categories.hints(tenant_id=tenant.id, tool_ids=tool_ids, tags=tags)


@router.get("", response_model=list[Category])
async def list_categories(tenant: TenantDep) -> list[Category]:
    """The tenant's categories by name, `default` among them, with how many tools each holds."""
    return await tenant.services.categories.list_all(tenant_id=tenant.id)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=Category,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
)
async def create_category(
    body: Annotated[CategoryCreate, Body(openapi_examples=examples.CATEGORY_CREATE)],
    tenant: TenantDep,
) -> Category:
    """Create a category (409 for a name taken; `default` always is)."""
    return await tenant.services.categories.create(body, tenant_id=tenant.id)


@router.patch("", response_model=list[Category], dependencies=[WriteLimit], responses=WRITE_ERRORS)
async def toggle_categories(
    body: Annotated[CategoryToggle, Body(openapi_examples=examples.CATEGORY_TOGGLE)],
    tenant: TenantDep,
) -> list[Category]:
    """Enable or disable several categories at once: all of them, or none (404 naming the
    unknown ones; 422 for disabling `default`)."""
    return await tenant.services.categories.set_enabled(body, tenant_id=tenant.id)


@router.get("/{name}", response_model=Category, responses=problem_responses(404, 422))
async def get_category(name: CategoryPath, tenant: TenantDep) -> Category:
    """One category."""
    return await tenant.services.categories.get(name, tenant_id=tenant.id)


@router.put("/{name}", response_model=Category, dependencies=[WriteLimit], responses=WRITE_ERRORS)
async def replace_category(
    name: CategoryPath,
    body: Annotated[CategoryUpdate, Body(openapi_examples=examples.CATEGORY_UPDATE)],
    tenant: TenantDep,
) -> Category:
    """Replace a category's description, usage hints and `enabled` (`default` stays enabled)."""
    return await tenant.services.categories.replace(name, body, tenant_id=tenant.id)


@router.delete(
    "/{name}", response_model=CategoryDeletion, dependencies=[WriteLimit], responses=WRITE_ERRORS
)
async def delete_category(
    name: CategoryPath,
    tenant: TenantDep,
    dry_run: Annotated[
        bool, Query(description="List the tools it would delete; delete nothing")
    ] = False,
    confirm: Annotated[bool, Query(description="Delete it although it holds tools")] = False,
) -> CategoryDeletion:
    """Delete a category and its tools (409 while it holds tools, unless `confirm`); `default`
    cannot be deleted (422)."""
    return await tenant.services.categories.delete(
        name, tenant_id=tenant.id, dry_run=dry_run, confirm=confirm
    )
