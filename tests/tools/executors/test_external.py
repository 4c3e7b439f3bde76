"""The external executor (app/tools/executors/external.py): where arguments go, what comes
back, and its failures as results. Fuller coverage against a real local API lives in
tests/chat/test_external_tools.py and tests/api/test_argument_placement.py."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import httpx
import pytest

from app.tools.executors import CallScope
from app.tools.executors.external import ExternalExecutor, _Inflater
from app.tools.outcome import ToolOutcome
from app.tools.typed import ExternalTool


def _external(url: str, method: str = "GET") -> ExternalTool:
    return ExternalTool(
        tool_id="bad-url",
        name="bad_url",
        description="",
        parameters={"properties": {}, "required": []},
        json_parameters={"type": "object", "properties": {}},
        url=url,
        method=method,
    )


async def test_an_invalid_stored_url_is_an_error_result() -> None:
    async with httpx.AsyncClient() as http:  # the real client raises httpx.InvalidURL
        executor = ExternalExecutor(http=http, response_max_bytes=1000)
        outcome = await executor.run(_external("https://[::1/x"), {}, CallScope())
    assert outcome == ToolOutcome.error("the tool's URL is not valid", "unreachable")


async def test_get_sends_a_query_post_a_json_body_and_an_error_status_is_an_error() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/missing":
            return httpx.Response(404, text="no such thing")
        return httpx.Response(200, text="fine")

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        executor = ExternalExecutor(http=http, response_max_bytes=1000)
        got = await executor.run(_external("https://api.test/x"), {"days": [1, 2]}, CallScope())
        posted = await executor.run(_external("https://api.test/x", "POST"), {"a": 1}, CallScope())
        missing = await executor.run(_external("https://api.test/missing"), {}, CallScope())
    assert got == posted == ToolOutcome("ok", "fine")
    assert seen[0].url.query == b"days=1&days=2" and seen[1].content == b'{"a":1}'
    assert missing == ToolOutcome.error(
        "the tool's endpoint answered HTTP 404: no such thing", "upstream_status"
    )


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", lambda data: gzip.compress(data)),
        ("deflate", lambda data: zlib.compress(data)),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send
    ],
)
def test_inflating_is_bounded_per_step(encoding: str, compress: Any) -> None:
    """A bomb's chunk gives at most the bytes asked for: CPU and memory stay at the cap."""
    bomb = compress(b"\0" * 50_000_000)
    inflater = _Inflater.for_encoding(encoding)
    assert inflater is not None
    assert len(inflater.inflate(bomb, 1000)) == 1000
    small = _Inflater.for_encoding(encoding)
    assert small is not None and small.inflate(compress(b"hello"), 100) == b"hello"
    assert _Inflater.for_encoding("identity") is None and _Inflater.for_encoding("br") is None
