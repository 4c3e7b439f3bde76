"""The OpenAPI importer's schema conversion (app/tools/openapi_schema.py), alone."""

from __future__ import annotations

import pytest

from app.tools.openapi_refs import Resolver, Skip
from app.tools.openapi_schema import SchemaConverter


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ("not a schema", "the body has no schema"),
        ({"type": "file"}, "the body is a file"),
        ({"type": "object", "required": "id"}, "the body has a 'required' that is a string"),
    ],
)
def test_a_body_that_cannot_be_a_tool_is_named_the_body(schema: object, said: str) -> None:
    """The body's schema has no member path: its problems say "the body", never `''`."""
    with pytest.raises(Skip) as skipped:
        SchemaConverter(Resolver({})).convert(schema, "")
    assert str(skipped.value).startswith(said)
