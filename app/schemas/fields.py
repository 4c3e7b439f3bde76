"""Field types shared by every schema and by the MCP server configuration: one definition each."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
TAG_PATTERN = r"^[a-zA-Z0-9_.:-]{1,64}$"
# No double underscore and no trailing underscore: `{server}__{tool}` must split one way.
SERVER_NAME_PATTERN = r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$"
SERVER_NAME_MAX = 32
# An HTTP field name (RFC 9110 token).
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$"
# A field value without control characters (a tab is allowed, as RFC 9110 allows it).
HEADER_VALUE_PATTERN = r"^[^\x00-\x08\x0a-\x1f\x7f]*$"
HEADER_VALUE_MAX = 8192

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]
Description = Annotated[str, StringConstraints(max_length=4096)]
ServerName = Annotated[
    str, StringConstraints(pattern=SERVER_NAME_PATTERN, min_length=1, max_length=SERVER_NAME_MAX)
]
HeaderName = Annotated[str, StringConstraints(pattern=HEADER_NAME_PATTERN)]
HeaderValue = Annotated[
    str, StringConstraints(pattern=HEADER_VALUE_PATTERN, max_length=HEADER_VALUE_MAX)
]


def problem_lines(exc: ValidationError) -> list[str]:
    """One `field.path: message` line per problem; messages name fields, never input values."""
    return [f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in exc.errors()]


class ClientModel(BaseModel):
    """What clients send: unknown fields are rejected, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)
