"""The request an external tool sends (app/tools/executors/request.py, issue 29 part 2): no
body for an operation without one, styles, the URL's own query kept, forms and multipart."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import pytest

from app.tools.executors.request import build_request, with_query
from app.tools.typed import ExternalTool, UnreadableToolError, parse_stored_tool


def stored(method: str, url: str, properties: dict[str, Any], **function: Any) -> ExternalTool:
    now = datetime.now(UTC)
    doc = {
        "tool_id": "t",
        "type": "external",
        "function": {
            "name": "t",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [n for n, p in properties.items() if p.get("in") == "path"],
            },
            "url": url,
            "method": method,
            **function,
        },
        "created_at": now,
        "updated_at": now,
    }
    tool = parse_stored_tool(doc)[1]
    assert isinstance(tool, ExternalTool)
    return tool


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_an_operation_without_body_members_sends_no_body(method: str) -> None:
    tool = stored(method, "https://api.test/x", {"q": {"type": "string", "in": "query"}})
    built = build_request(tool, {"q": "1"})
    assert built.body is None and "Content-Type" not in built.headers
    assert built.url == "https://api.test/x?q=1"


def test_body_members_send_a_body_even_when_none_is_given() -> None:
    tool = stored("POST", "https://api.test/x", {"note": {"type": "string"}})
    assert build_request(tool, {}).body == b"{}"
    nested = build_request(tool, {"note": "hi"})
    assert nested.body == b'{"note":"hi"}' and nested.headers["Content-Type"] == "application/json"


def test_the_urls_own_query_is_kept() -> None:
    tool = stored(
        "GET",
        "https://api.test/responses/{id}?beta=true",
        {
            "id": {"type": "string", "in": "path"},
            "include": {"type": "array", "items": {"type": "string"}},
        },
    )
    built = build_request(tool, {"id": "r 1", "include": ["a", "b"]})
    assert built.url == "https://api.test/responses/r%201?beta=true&include=a&include=b"


@pytest.mark.parametrize(
    ("style", "explode", "value", "query"),
    [
        (None, None, ["a", "b"], "f=a&f=b"),
        ("form", False, ["a", "b"], "f=a,b"),
        ("form", False, ["a,b", "c"], "f=a%2Cb,c"),
        ("spaceDelimited", False, ["a", "b"], "f=a%20b"),
        ("pipeDelimited", False, ["a", "b"], "f=a|b"),
        ("deepObject", True, {"x": 1, "y": "z w"}, "f%5Bx%5D=1&f%5By%5D=z%20w"),
        ("form", True, {"x": 1, "y": 2}, "x=1&y=2"),
        ("form", False, {"x": 1, "y": 2}, "f=x,1,y,2"),
        (None, None, "a&b=c", "f=a%26b%3Dc"),
        (None, None, "a+b c", "f=a%2Bb%20c"),  # a raw + would arrive as a space
        (None, None, True, "f=true"),
    ],
)
def test_query_styles(style: str | None, explode: bool | None, value: Any, query: str) -> None:
    schema: dict[str, Any] = {"in": "query"}
    schema["type"] = (
        "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "string"
    )
    if style is not None:
        schema["style"] = style
    if explode is not None:
        schema["explode"] = explode
    tool = stored("GET", "https://api.test/x", {"f": schema})
    assert build_request(tool, {"f": value}).url == f"https://api.test/x?{query}"


def test_path_and_header_are_simple() -> None:
    tool = stored(
        "GET",
        "https://api.test/items/{ids}",
        {
            "ids": {"type": "array", "in": "path", "items": {"type": "integer"}},
            "X-Tags": {"type": "object", "in": "header", "explode": True},
        },
    )
    tool_required = build_request(tool, {"ids": [1, 2], "X-Tags": {"a": 1, "b": 2}})
    assert tool_required.url == "https://api.test/items/1,2"
    assert tool_required.headers["X-Tags"] == "a=1,b=2"


def test_a_form_body() -> None:
    tool = stored(
        "POST",
        "https://api.test/x",
        {"name": {"type": "string"}, "tags": {"type": "array"}},
        body_type="form",
    )
    built = build_request(tool, {"name": "a b&c", "tags": ["x", "y"]})
    assert built.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert parse_qsl(built.body.decode()) == [("name", "a b&c"), ("tags", "x"), ("tags", "y")]


def test_a_multipart_body_without_files() -> None:
    tool = stored(
        "POST",
        "https://api.test/x",
        {"name": {"type": "string"}, "meta": {"type": "object"}},
        body_type="multipart",
    )
    built = build_request(tool, {"name": "n", "meta": {"k": 1}})
    kind, _, boundary = built.headers["Content-Type"].partition("; boundary=")
    assert kind == "multipart/form-data" and built.body is not None
    parts = built.body.decode().split(f"--{boundary}")
    assert 'name="name"' in parts[1] and parts[1].endswith("\r\n\r\nn\r\n")
    assert 'name="meta"' in parts[2] and "application/json" in parts[2] and '{"k":1}' in parts[2]
    assert parts[3] == "--\r\n"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "array", "in": "query", "style": "simple"}, "a query parameter takes form"),
        (
            {"type": "object", "in": "path", "style": "deepObject"},
            "a path parameter takes simple",
        ),
    ],
)
def test_a_style_that_does_not_fit_its_place_is_refused(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(UnreadableToolError) as caught:
        stored("POST", "https://api.test/x", {"f": schema})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/x",
        "https://api.example.com/x?a=1",
        "https://api.example.com/x?a=1#frag",
        "https://h/p#f",
        "http://h",
        "http://h?",
        "http://h/?#",
        "https://h:8080/a/b/?q=%20&z#x?y",
        "//h/p",
        "/relative?x",
        "http://[::1]:80/p",
        "http://[::1/p",  # urlsplit refuses it: left as it is
        "https://h/p;params?x=1",
        "HTTP://H/P",
        "https://h/" + "p" * 3000 + "?x=1",  # past what is kept: split each time
    ],
)
@pytest.mark.parametrize("pairs", [[], [("a", "b")], [("c", "d"), ("e", "%20")]])
def test_a_query_is_appended_as_urlunsplit_writes_it(
    url: str, pairs: list[tuple[str, str]]
) -> None:
    """The URL is split once and kept (`_around_query`): what it writes must be what splitting
    it each time with `urlsplit`/`urlunsplit` wrote."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        expected = url
    else:
        added = "&".join(f"{key}={value}" for key, value in pairs)
        query = f"{parts.query}&{added}" if parts.query else added
        expected = (
            urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
            if pairs
            else url
        )
    assert with_query(url, pairs) == expected
    assert with_query(url, pairs) == expected  # from what was kept
