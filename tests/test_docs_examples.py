"""The curl examples of docs/tools.md and docs/chat.md marked `run by tests/test_docs_examples.py`
run as written: in one bash session, against the service on a real port (its model the scripted
fake, `$API` a local stand-in of a forecast API). Every curl must get a 2xx answer (a curl wrapper
adds --fail-with-body), and the answers are checked afterwards."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.tools.builtin import registry as builtin_registry
from tests.support import fake_model as script
from tests.support import toolkit
from tests.support.apps import ADMIN, make_settings
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- run by tests/test_docs_examples.py"


def marked_blocks(page: str) -> list[str]:
    """The bash blocks right after the marker comment, in order."""
    text = (ROOT / "docs" / page).read_text()
    return re.findall(re.escape(MARKER) + r".*?-->\n```bash\n(.*?)```", text, flags=re.S)


@pytest.fixture
def service(fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel) -> Iterator[str]:
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test",
        outbound_allow=["127.0.0.1"],
    )
    server = ThreadedServer(create_app(settings, registry=builtin_registry), lifespan="on").start()
    yield server.url
    server.stop()


@pytest.fixture
def forecast() -> Iterator[str]:
    server = ThreadedServer(toolkit.forecast_api).start()
    yield server.url
    server.stop()


def run_blocks(blocks: list[str], base: str, api: str, tmp_path: Path) -> list[str]:
    """Run the blocks in one bash session as a new tenant; every curl's answer, in order."""
    key = httpx.post(f"{base}/tenants", json={"tenant_id": "docs"}, headers=ADMIN).json()
    transcript = tmp_path / "transcript"
    script_text = "\n".join(
        [
            "set -euo pipefail",
            f'curl() {{ command curl --fail-with-body -sS "$@" | tee -a {transcript}; '
            f"echo >> {transcript}; }}",
            *blocks,
        ]
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "BASE": base,
        "API": api,
        "AUTH": f"Authorization: Bearer {key['api_key']}",
    }
    done = subprocess.run(
        ["bash", "-c", script_text], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in transcript.read_text().splitlines() if line.strip()]


def test_tools_page_categories_shaping_and_presets(
    service: str, forecast: str, tmp_path: Path
) -> None:
    blocks = marked_blocks("tools.md")
    assert len(blocks) == 1
    toolkit.FORECAST_SEEN.clear()
    answers = [json.loads(line) for line in run_blocks(blocks, service, forecast, tmp_path)]
    category, tool, imported, invoked, toggled, dry, deleted = answers
    assert category["name"] == "weather" and tool["category"] == "weather"
    assert [(t["tool_id"], t["category"]) for t in imported["tools"]] == [("tides", "weather")]
    assert invoked["status"] == "ok"
    assert json.loads(invoked["content"]) == [
        {"day": "2026-11-25", "max": 19},
        {"day": "2026-11-26", "max": 17},
    ]
    assert toolkit.FORECAST_SEEN == [{"city": "Lisbon", "units": "metric"}]  # the preset
    assert toggled == [{**toggled[0], "name": "weather", "enabled": False, "tools": 2}]
    both = ["forecast", "tides"]
    assert dry == {"name": "weather", "dry_run": True, "deleted_tools": both}
    assert deleted == {"name": "weather", "dry_run": False, "deleted_tools": both}


def test_chat_page_usage_hints(service: str, fake: FakeModel, tmp_path: Path) -> None:
    blocks = marked_blocks("chat.md")
    assert len(blocks) == 1
    fake.reset(repeat=script.text("7"))
    answers = [json.loads(line) for line in run_blocks(blocks, service, "", tmp_path)]
    hints = "## default tools\nRoll dice only when the user asks for a random number."
    assert answers[1] == {"categories": ["default"], "content": hints}
    assert answers[2]["stop_reason"] == "completed" and answers[3]["stop_reason"] == "completed"
    with_hints, without = (request["messages"] for request in fake.requests)
    assert with_hints[0] == {"role": "system", "content": hints}
    assert [m["role"] for m in without] == ["user"]
