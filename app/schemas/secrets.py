"""Tenant secrets: a value goes in, only names and dates come out."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from app.schemas.fields import ClientModel


class SecretPut(ClientModel):
    value: str = Field(
        min_length=1,
        pattern=r"^[^\x00]*$",
        description="The secret's value; stored encrypted and never returned.",
        json_schema_extra={"writeOnly": True},
    )


class SecretInfo(BaseModel):
    name: str
    created_at: datetime
    updated_at: datetime
