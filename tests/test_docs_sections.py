"""The curl examples of whole sections of the manual (the approval walk in docs/chat.md, the web
built-ins in docs/tools.md) run as written (tests/support/doc_examples.py),
against the service on 127.0.0.1 with `scripts/run --fake-model`'s scripted model (it calls
roll_dice with {"d": 6}, then answers "Tool results: ...")."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from app.chat.fake_model import FakeModelApp
from app.main import create_app
from app.tools.builtin import registry as builtin_registry
from tests.support import search_services
from tests.support.apps import ADMIN, make_settings
from tests.support.doc_examples import run_blocks, section_blocks
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def search() -> Iterator[ThreadedServer]:
    server = ThreadedServer(search_services.search_services).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(search: ThreadedServer) -> Iterator[str]:
    """The service with the built-ins, the fake model, and the web built-ins configured against
    the SearXNG stand-in (pages: the local site, allowed by OUTBOUND_ALLOW)."""
    model = FakeModelApp(tool="roll_dice", arguments='{"d": 6}', calls=1, latency_s=0)
    model_server = ThreadedServer(model).start()
    settings = make_settings(
        openai_base_url=f"{model_server.url}/v1",
        openai_api_key="sk-fake",
        web_search_url=f"{search.url}/searxng",
        web_fetch_enabled=True,
        outbound_allow=["127.0.0.1"],
    )
    server = ThreadedServer(create_app(settings, registry=builtin_registry), lifespan="on").start()
    yield server.url
    server.stop()
    model_server.stop()


def _tenant(base: str, name: str) -> str:
    response = httpx.post(f"{base}/tenants", json={"tenant_id": name}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return str(response.json()["api_key"])


def test_chat_approval_examples(service: str) -> None:
    """Stop, approve, stop again, refuse: each continuation with the id its stop gave (the
    examples show `call_7`; a decision is taken once, so each needs a stop of its own)."""
    blocks = section_blocks("chat.md", "## Approval before risky calls")
    assert len(blocks) == 4
    key = _tenant(service, "docs-approval")

    def run(block: str, call_id: str = "call_7") -> str:
        [output] = run_blocks([block.replace("call_7", call_id)], base=service, api_key=key)
        return output

    put, chat = (json.loads(line) for line in run(blocks[0]).splitlines() if line.strip())
    assert put["approval"] == "always"
    assert chat["stop_reason"] == "approval_required" and chat["tool_calls"] == []
    [pending] = chat["pending_approvals"]
    assert pending["tool"] == "roll_dice" and pending["arguments"] == {"d": 6}
    done = json.loads(run(blocks[1], pending["id"]))
    assert done["stop_reason"] == "completed"
    assert done["tool_calls"][0]["approval"] == {"approved": True, "reason": "fine by Ada"}
    assert 1 <= int(done["message"]["content"].removeprefix("Tool results: ")) <= 6
    again = json.loads(run(blocks[2]))
    assert again["stop_reason"] == "approval_required"
    refused = json.loads(run(blocks[3], again["pending_approvals"][0]["id"]))
    assert refused["message"]["content"] == (
        "Tool results: Error: a person refused this call: not now"
    )


def test_web_search_and_fetch_examples(service: str, upstream: ThreadedServer) -> None:
    blocks = [
        block.replace("https://example.org/tides", f"{upstream.url}/pages/article")
        for block in section_blocks("tools.md", "## Web search and fetch")
    ]
    assert len(blocks) == 2
    searched, fetched = run_blocks(blocks, base=service, api_key=_tenant(service, "docs-web"))
    result = json.loads(searched)
    assert result["status"] == "ok"
    assert [hit["title"] for hit in json.loads(result["content"])] == [
        "Release notes",
        "Changelog",
    ]
    assert search_services.RECEIVED[-1]["query"] == {"q": "how tides work", "format": "json"}
    events = [line for line in fetched.splitlines() if line.startswith(("event:", "data:"))]
    assert events[:4] == [
        "event: tool_progress",
        'data: {"message":"fetching the page","fraction":0.0}',
        "event: tool_progress",
        'data: {"message":"extracting the readable text","fraction":0.5}',
    ]
    done = json.loads(events[-1].removeprefix("data: "))
    assert done["status"] == "ok" and done["content"].startswith("How tides work")
    assert "[truncated:" in done["content"]
