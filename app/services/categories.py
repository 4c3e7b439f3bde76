"""Tool categories for one tenant: CRUD, enabling several at once, and deletion with their tools.

Which tools a chat gets from the categories is the toolbox's decision (`category_on` and
`usage_hints` in app/services/toolbox.py); this service only writes categories and tells the
catalog (and other replicas) that the tenant's tools changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.errors import ConflictError, NotFoundError, UnprocessableError, field_error
from app.limits.local import Fence, local_fence
from app.repositories.categories import CategoryRepository
from app.repositories.tools import ToolRepository
from app.schemas.categories import (
    DEFAULT_CATEGORY,
    Category,
    CategoryCreate,
    CategoryDeletion,
    CategoryHints,
    CategoryToggle,
    CategoryUpdate,
)
from app.services.catalog import CategoryState, ToolCatalog, ToolSnapshot, tools_stamp
from app.services.changes import Publish, unpublished
from app.services.toolbox import Selection, Toolbox


class CategoryService:
    def __init__(
        self,
        *,
        categories: CategoryRepository,
        tools: ToolRepository,
        catalog: ToolCatalog,
        toolbox: Toolbox,
        max_categories: int = 100,
        fence: Fence | None = None,
        publish: Publish = unpublished,
    ) -> None:
        self._categories = categories
        self._tools = tools
        self._catalog = catalog
        self._toolbox = toolbox
        self._max = max_categories
        self._fence = fence or local_fence()
        self._publish = publish

    async def list_all(self, *, tenant_id: str) -> list[Category]:
        """Every category of the tenant by name, `default` always among them."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        states = dict(snapshot.categories)
        states.setdefault(DEFAULT_CATEGORY, CategoryState(DEFAULT_CATEGORY, enabled=True))
        return [_shown(states[name], snapshot) for name in sorted(states)]

    async def get(self, name: str, *, tenant_id: str) -> Category:
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        return _shown(_state(snapshot, name), snapshot)

    async def create(self, body: CategoryCreate, *, tenant_id: str) -> Category:
        """A new category; 409 for a name taken (`default` always is) or past the cap."""
        if body.name == DEFAULT_CATEGORY:
            raise ConflictError("the 'default' category always exists; PUT it to change it")
        async with self._fence(tenant_id, "categories"):  # the cap holds exactly
            if await self._categories.count(tenant_id=tenant_id) >= self._max:
                raise ConflictError(
                    f"the tenant already has {self._max} categories "
                    "(MAX_CATEGORIES_PER_TENANT); delete one first"
                )
            await self._categories.insert(body.model_dump(), tenant_id=tenant_id)
        await self._changed(tenant_id)
        return await self.get(body.name, tenant_id=tenant_id)

    async def replace(self, name: str, body: CategoryUpdate, *, tenant_id: str) -> Category:
        """Replace a category's description, hints and `enabled`; its name cannot change."""
        if body.name is not None and body.name != name:
            raise UnprocessableError(
                "The name of a category cannot change.",
                errors=[field_error("$.name", f"must be '{name}' (the name in the path)")],
            )
        if name == DEFAULT_CATEGORY and not body.enabled:
            raise _default_stays("$.enabled")
        fields = body.model_dump(exclude={"name"})
        if name == DEFAULT_CATEGORY:  # it always exists, stored or not
            await self._categories.insert_if_absent({"name": name, **fields}, tenant_id=tenant_id)
        found = await self._categories.replace(name, fields, tenant_id=tenant_id)
        await self._changed(tenant_id)
        if found is None:
            raise NotFoundError(f"category '{name}' does not exist")
        return await self.get(name, tenant_id=tenant_id)

    async def set_enabled(self, body: CategoryToggle, *, tenant_id: str) -> list[Category]:
        """Enable or disable several categories at once: all of them, or (404, 422) none."""
        if body.enabled.get(DEFAULT_CATEGORY) is False:
            raise _default_stays(f"$.enabled.{DEFAULT_CATEGORY}")
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        unknown = sorted(
            n for n in body.enabled if n != DEFAULT_CATEGORY and n not in snapshot.categories
        )
        if unknown:
            raise NotFoundError(f"no such categories: {', '.join(unknown)}")
        wanted = {n: v for n, v in body.enabled.items() if n != DEFAULT_CATEGORY}
        await self._categories.set_enabled(wanted, tenant_id=tenant_id)
        await self._changed(tenant_id)
        return [await self.get(name, tenant_id=tenant_id) for name in sorted(body.enabled)]

    async def delete(
        self, name: str, *, tenant_id: str, dry_run: bool, confirm: bool
    ) -> CategoryDeletion:
        """Delete a category and its tools; `dry_run` lists them, and a category that holds
        tools is deleted only with `confirm` (409 otherwise)."""
        if name == DEFAULT_CATEGORY:
            raise _default_stays("$.name")
        _state(await self._catalog.snapshot(tenant_id=tenant_id), name)  # 404
        held = await self._tools.ids_in_category(name, tenant_id=tenant_id)
        if dry_run:
            return CategoryDeletion(name=name, dry_run=True, deleted_tools=held)
        if held and not confirm:
            raise ConflictError(
                f"category '{name}' holds {len(held)} tool(s) ({_listed(held)}); deleting it "
                "deletes them: repeat with ?confirm=true (or see them with ?dry_run=true)"
            )
        try:  # its tools first: a failure half-way leaves a category, never orphaned tools
            await self._tools.delete_in_category(name, tenant_id=tenant_id)
            await self._categories.delete(name, tenant_id=tenant_id)
        finally:
            await self._changed(tenant_id)
        return CategoryDeletion(name=name, dry_run=False, deleted_tools=held)

    async def hints(
        self, *, tenant_id: str, tool_ids: Sequence[str] | None, tags: Sequence[str] | None
    ) -> CategoryHints:
        """What a chat of this selection (by the tenant's key) sends the model."""
        found = await self._toolbox.hints(tenant_id, Selection(tool_ids=tool_ids, tags=tags))
        return CategoryHints(categories=found.categories, content=found.content)

    async def _changed(self, tenant_id: str) -> None:
        self._catalog.mark_stale(tenant_id)
        await self._publish(tools_stamp(tenant_id))  # other replicas read the tenant again


def _state(snapshot: ToolSnapshot, name: str) -> CategoryState:
    found = snapshot.categories.get(name)
    if found is None and name == DEFAULT_CATEGORY:
        return CategoryState(DEFAULT_CATEGORY, enabled=True)
    if found is None:
        raise NotFoundError(f"category '{name}' does not exist")
    return found


def _shown(state: CategoryState, snapshot: ToolSnapshot) -> Category:
    held = sum(1 for e in snapshot.entries if e.tool is not None and e.tool.category == state.name)
    fields: dict[str, Any] = {
        "name": state.name,
        "description": state.description,
        "enabled": state.enabled or state.name == DEFAULT_CATEGORY,
        "usage_hints": state.usage_hints,
        "approval": state.approval,
        "tools": held,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
    }
    return Category.model_validate(fields)


def _default_stays(path: str) -> UnprocessableError:
    return UnprocessableError(
        "The 'default' category cannot be disabled or deleted.",
        errors=[field_error(path, "'default' is always enabled")],
    )


def _listed(ids: list[str]) -> str:
    return ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
