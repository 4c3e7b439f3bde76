"""The benchmark harness runs end to end and reports every scenario (figures are not judged)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.processes import ROOT, service_env

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SCENARIOS = {
    "toolgate: 1 call, concurrency 1",
    "naive: 1 call, concurrency 1",
    "toolgate: 3 parallel calls, concurrency 50",
    "naive: 3 parallel calls, concurrency 50",
    "GET /ping",
    "GET /tools/{tool_id}",
    "GET /tools/ (50 tools)",
    "POST /tools/{tool_id}/invoke (function tool)",
    "POST /tools/{tool_id}/invoke (external tool, local upstream)",
    "MCP tools/call over /mcp (external tool, protocol 2025-06-18)",
    "MCP tools/call over /mcp (external tool, protocol 2026-07-28)",
    "outbound client alone, c=16 (CPU ms per request)",
    "200 ms model, 100 concurrent chats",
    "RSS",
}


def test_quick_benchmark_writes_json_and_markdown(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "scripts/bench/bench.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        env=service_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    [report] = tmp_path.glob("bench-*.json")
    summary = json.loads(report.read_text())["summary"]
    assert SCENARIOS <= set(summary)
    assert summary["toolgate: 1 call, concurrency 1"]["iterations"][0] == 20  # 10 chats x 2
    assert "CPU per model iteration" in result.stdout
    outbound = summary["outbound client alone, c=16 (CPU ms per request)"]
    for client in ("client", "aiohttp", "httpx"):  # the client in use, and the two before it
        assert outbound[f"{client}_cpu_ms_per_request"][0] > 0
    assert next(tmp_path.glob("bench-*.md")).read_text().startswith("# toolgate benchmark")


def test_the_records_benchmark_reports_each_variant() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/bench/records.py", "--quick", "--variants", "off", "on"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "record() with journal on:" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| on | ")]
    assert len(rows) == 2  # concurrency 1 and 50, each with its difference to `off`


def test_the_model_apis_benchmark_reports_each_api(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "scripts/bench/model_apis.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        env=service_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for api in ("chat_completions", "responses", "anthropic_messages"):
        for concurrency in (1, 50):
            assert f"CPU per model iteration, {api}, c={concurrency}: " in result.stdout
    [report] = tmp_path.glob("model-apis-*.json")
    summary = json.loads(report.read_text())["summary"]
    assert summary["responses, concurrency 1"]["iterations"][0] == 20  # 10 chats x 2


@pytest.mark.parametrize(
    "payload",
    [
        b'{"run_id":"r","tool_id":"weather","status":"ok","content":"21","error":null}',
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}',
        b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"isError":false}}\r\n',
    ],
)
def test_the_benchmark_takes_a_tool_call_that_ran(payload: bytes) -> None:
    _bench().tool_call_succeeded(200, payload)


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        (200, b'{"status":"error","error":{"kind":"unreachable","message":"refused"}}'),
        (200, b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}'),
        (200, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}}'),
        (429, b'{"status":"ok"}'),
    ],
)
def test_the_benchmark_stops_at_a_tool_call_that_failed(status: int, payload: bytes) -> None:
    """A row of failed calls (the upstream down) would be measured as if they ran."""
    with pytest.raises(RuntimeError, match="a tool call failed"):
        _bench().tool_call_succeeded(status, payload)


def _bench() -> ModuleType:
    """scripts/bench/bench.py, a script rather than a package module."""
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench" / "bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
