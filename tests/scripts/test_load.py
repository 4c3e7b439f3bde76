"""The load script runs end to end: every operation is sent and reported (figures not judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import ROOT, service_env

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def run_load(out: Path, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "scripts/load.py", *args, "--out", str(out)],
        cwd=ROOT,
        env=service_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "load.json").read_text())
    return report


def test_a_short_load_run_reports_every_operation(tmp_path: Path) -> None:
    report = run_load(
        tmp_path, "--duration", "6", "--rate", "25", "--tenants", "2", "--sample-s", "2"
    )
    assert report["unexpected_errors"] == 0 and report["requests"] >= 100
    assert set(report["operations"]) == {
        "get_tool",
        "list_tools",
        "create_tool",
        "update_tool",
        "delete_tool",
        "put_secret",
        "chat",
        "chat_stream",
    }
    assert len(report["rss_mb"]["samples"]) >= 3
    # The service's JSON log was kept, one access line per request.
    lines = (tmp_path / "service.log").read_text().splitlines()
    assert sum('"logger":"app.access"' in line for line in lines) >= report["requests"]
    assert (tmp_path / "load.md").read_text().startswith("Load: 6.0 s at 25.0/s")


def test_closed_loop_chats_on_several_workers_over_a_mongodb_wire_server(tmp_path: Path) -> None:
    """The reproduction path of the several-workers trust item: chats from many clients at once
    on 2 workers sharing a SecantusDB database."""
    report = run_load(
        tmp_path,
        "--secantus",
        "--workers",
        "2",
        "--chat-concurrency",
        "16",
        "--duration",
        "4",
        "--tenants",
        "2",
    )
    assert report["workers"] == 2 and report["unexpected_errors"] == 0
    assert report["operations"]["chat"]["count"] >= 50
    log = (tmp_path / "service.log").read_text()
    assert log.count("Application startup complete") == 2  # both workers served
    assert (tmp_path / "load.md").read_text().startswith("Chats: 16 clients for 4.0 s on 2 work")
