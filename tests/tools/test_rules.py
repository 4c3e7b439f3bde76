"""`definition_problems` is the one rule for a tool definition: reading a stored tool and writing
one (the tool service) find the same problems; only a write also judges the URL under the
tenant's outbound policy."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from app.http.netguard import OutboundPolicy, url_problems
from app.schemas.tools import StoredTool, ToolCreate
from app.services.tools import ToolService
from app.tools.registry import FunctionRegistry
from app.tools.rules import definition_problems
from app.tools.typed import UnreadableToolError, parse_stored_tool
from tests.support.documents import external_tool


def _broken(**function: Any) -> dict[str, Any]:
    doc = copy.deepcopy(external_tool())
    doc["function"].update(function)
    return doc


BROKEN = [
    _broken(url="https://user:pw@api.example.com/weather"),
    _broken(url="https://api.example.com:99999/weather"),
    _broken(url="https://api.example.com/{city}"),  # no path parameter for the template
    _broken(headers={"Authorization": "Bearer {secret:bad name}"}),
    _broken(headers={"Host": "evil.example"}),
    _broken(method=None),
]


def _service() -> ToolService:
    # Only the synchronous rule check is used: no repository, catalog or outbound is touched.
    return ToolService(
        tools=None,  # type: ignore[arg-type]
        registry=FunctionRegistry(),
        outbound=None,  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
    )


def _stored(doc: dict[str, Any]) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {**doc, "created_at": now, "updated_at": now}


def _read_problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(UnreadableToolError) as raised:
        parse_stored_tool(_stored(doc))
    return raised.value.problems


@pytest.mark.parametrize("doc", BROKEN)
def test_reading_and_writing_a_tool_find_the_same_problems(doc: dict[str, Any]) -> None:
    written = _service().problems(ToolCreate.model_validate(doc), OutboundPolicy())
    assert written
    assert _read_problems(doc) == [f"{path}: {message}" for path, message in written]
    assert (
        definition_problems(StoredTool.model_validate(_stored(doc)), policy=OutboundPolicy())
        == written
    )


def test_only_a_write_judges_where_the_url_points() -> None:
    doc = _broken(url="http://127.0.0.1:8080/weather")
    written = _service().problems(ToolCreate.model_validate(doc), OutboundPolicy())
    [problem] = url_problems(doc["function"]["url"], OutboundPolicy())
    assert written == [("$.function.url", problem)]
    parse_stored_tool(_stored(doc))  # stays readable: its connection is guarded at call time
    allowed = OutboundPolicy(["127.0.0.1"])
    assert _service().problems(ToolCreate.model_validate(doc), allowed) == []


def test_url_problems_judges_the_written_url_before_the_policy() -> None:
    # Credentials on a loopback host: the written rule speaks first, with or without a policy.
    url = "http://user:pw@127.0.0.1/"
    assert url_problems(url, None) == url_problems(url, OutboundPolicy())
    assert "credentials" in url_problems(url, None)[0]
    assert url_problems("http://127.0.0.1/", None) == []
    assert "not a public address" in url_problems("http://127.0.0.1/", OutboundPolicy())[0]
