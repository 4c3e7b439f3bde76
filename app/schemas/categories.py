"""Tool categories: named groups of a tenant's tools, enabled as one, with usage hints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.fields import ClientModel, Description, Name
from app.schemas.tools import ApprovalMode

DEFAULT_CATEGORY = "default"
UsageHints = Annotated[str, StringConstraints(max_length=8192)]


class CategoryFields(ClientModel):
    description: Description = ""
    enabled: bool = Field(
        default=True, description="Chats offer the category's tools only while it is enabled."
    )
    usage_hints: UsageHints = Field(
        default="",
        description="Told to the model when a chat offers the category's tools, as a "
        "`## {name} tools` section of one instruction block.",
    )
    approval: ApprovalMode | None = Field(
        default=None,
        description="Chats: the approval of the category's tools that set none of their own "
        "(`always`, `operator`: the tenant key decides, `never`); unset: each tool's default.",
    )


class CategoryCreate(CategoryFields):
    """A new category."""

    name: Name


class CategoryUpdate(CategoryFields):
    """A full replacement of a category; `name`, if given, must equal the one in the path."""

    name: Name | None = None


class CategoryToggle(ClientModel):
    """`PATCH /categories`: several categories enabled or disabled at once (all or none)."""

    # Keys are category names; the schema says so (no other key is accepted).
    enabled: dict[Name, bool] = Field(
        min_length=1, max_length=256, json_schema_extra={"additionalProperties": False}
    )


class Category(BaseModel):
    """A category, as returned to admins."""

    name: str
    description: str
    enabled: bool
    usage_hints: str
    approval: ApprovalMode | None = None
    tools: int = Field(description="How many of the tenant's tools it holds.")
    created_at: datetime | None = None
    updated_at: datetime | None = None


class CategoryDeletion(BaseModel):
    """What `DELETE /categories/{name}` removed, or would remove (`dry_run`)."""

    name: str
    dry_run: bool
    deleted_tools: list[str] = Field(description="The ids of the tools it held, deleted with it.")


class CategoryHints(BaseModel):
    """The instruction block a chat sends the model (`GET /categories/hints`)."""

    categories: list[str] = Field(description="The categories in play that have usage hints.")
    content: str | None = Field(
        description="The system message's text, exactly as a chat sends it; null: none is sent."
    )
