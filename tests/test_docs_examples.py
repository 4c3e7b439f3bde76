"""The curl examples of the manual's pages run as written (tests/support/doc_examples.py),
against the service on 127.0.0.1 with `scripts/run --fake-model`'s scripted model (it calls
roll_dice with {"d": 6}, then answers "Tool results: ...")."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from app.fake_model import FakeModelApp
from app.main import create_app
from app.tools.builtin import registry as builtin_registry
from tests.support.apps import ADMIN, make_settings
from tests.support.doc_examples import run_blocks, section_blocks
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    model = FakeModelApp(tool="roll_dice", arguments='{"d": 6}', calls=1, latency_s=0)
    model_server = ThreadedServer(model).start()
    settings = make_settings(openai_base_url=f"{model_server.url}/v1", openai_api_key="sk-fake")
    server = ThreadedServer(create_app(settings, registry=builtin_registry), lifespan="on").start()
    yield server.url
    server.stop()
    model_server.stop()


def _tenant(base: str, name: str) -> str:
    response = httpx.post(f"{base}/tenants", json={"tenant_id": name}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return str(response.json()["api_key"])


def test_chat_approval_examples(service: str) -> None:
    blocks = section_blocks("chat.md", "## Approval before risky calls")
    assert len(blocks) == 3
    stop, approved, refused = run_blocks(
        blocks, base=service, api_key=_tenant(service, "docs-approval")
    )
    put, chat = (json.loads(line) for line in stop.splitlines() if line.strip())
    assert put["approval"] == "always"
    assert chat["stop_reason"] == "approval_required" and chat["tool_calls"] == []
    [pending] = chat["pending_approvals"]
    assert pending["tool"] == "roll_dice" and pending["arguments"] == {"d": 6}
    done = json.loads(approved)
    assert done["stop_reason"] == "completed"
    assert done["tool_calls"][0]["approval"] == {"approved": True, "reason": "fine by Ada"}
    assert 1 <= int(done["message"]["content"].removeprefix("Tool results: ")) <= 6
    assert json.loads(refused)["message"]["content"] == (
        "Tool results: Error: a person refused this call: not now"
    )
