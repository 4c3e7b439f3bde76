"""The external executor (app/tools/executors/external.py): where arguments go, what comes
back, and its failures as results. Fuller coverage against a real local API lives in
tests/chat/test_external_tools.py and tests/api/test_argument_placement.py."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from app.http.client import Inflater as _Inflater
from app.http.client import OutboundClient
from app.http.netguard import OutboundPolicy
from app.tools.executors import CallScope
from app.tools.executors.external import ExternalExecutor
from app.tools.outcome import ToolOutcome
from app.tools.typed import ExternalTool
from tests.support.servers import ThreadedServer
from tests.support.upstream import upstream_app


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


@pytest.fixture(scope="module")
def local_api() -> Iterator[ThreadedServer]:
    server = ThreadedServer(upstream_app).start()
    yield server
    server.stop()


def _client() -> OutboundClient:
    return OutboundClient(OutboundPolicy(["127.0.0.1"]), timeout_s=5, connect_timeout_s=5)


async def test_an_invalid_stored_url_is_an_error_result() -> None:
    async with _client() as http:
        executor = ExternalExecutor(http=http, response_max_bytes=1000)
        outcome = await executor.run(_external("https://[::1/x"), {}, CallScope())
    assert outcome == ToolOutcome.error("the tool's URL is not valid", "unreachable")


async def test_get_sends_a_query_post_a_json_body_and_an_error_status_is_an_error(
    local_api: ThreadedServer,
) -> None:
    async with _client() as http:
        executor = ExternalExecutor(http=http, response_max_bytes=10_000)
        got = await executor.run(_external(f"{local_api.url}/p/x"), {"days": [1, 2]}, CallScope())
        posted = await executor.run(
            _external(f"{local_api.url}/p/x", "POST"), {"a": 1}, CallScope()
        )
        missing = await executor.run(_external(f"{local_api.url}/status/404"), {}, CallScope())
    assert got.status == posted.status == "ok"
    assert json.loads(got.content)["query"] == [["days", "1"], ["days", "2"]]
    assert json.loads(posted.content)["json"] == {"a": 1}
    assert missing.status == "error" and missing.content.startswith(
        "the tool's endpoint answered HTTP 404: upstream says no (404)"
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
