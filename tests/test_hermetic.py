"""Tests are hermetic: a developer's `.env` and exported settings never change their outcome."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.config import ENV_FILE_VARIABLE, Settings
from tests.support.processes import run_app, start_app, wait_serving
from tests.support.secantus import free_port

ROOT = Path(__file__).resolve().parents[1]

# Settings a developer plausibly has (the README suggests LOG_FORMAT=text for terminals), and
# some that would break tests outright if they leaked in.
HOSTILE = {
    "LOG_FORMAT": "text",
    "LOG_LEVEL": "ERROR",
    "APP_ENV": "production",
    "ACCESS_LOG": "false",
    "DOCS_ENABLED": "false",
    "MAX_BODY_BYTES": "100",
    "ADMIN_API_KEY": "a-developer-admin-key-0123456789abcdef",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "FUNCTIONS_MODULE": "no.such.module:registry",
}


def test_the_suite_sees_no_setting_from_the_environment() -> None:
    fields = {name.lower() for name in Settings.model_fields}
    assert not [name for name in os.environ if name.lower() in fields]
    assert os.environ[ENV_FILE_VARIABLE] == ""


def test_env_file_variable_chooses_the_dotenv_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "custom.env"
    env.write_text("LOG_FORMAT=text\n")
    monkeypatch.setenv(ENV_FILE_VARIABLE, str(env))
    assert Settings().log_format == "text"
    monkeypatch.setenv(ENV_FILE_VARIABLE, "")
    assert Settings().log_format == "json"
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("LOG_FORMAT=text\n")
    monkeypatch.delenv(ENV_FILE_VARIABLE)
    assert Settings().log_format == "text"  # the default: .env in the working directory


@pytest.mark.processes
@pytest.mark.slow
def test_tests_pass_with_a_hostile_dotenv_and_environment(tmp_path: Path) -> None:
    """A sample of the suite that reads logs, docs and settings, run from a directory whose
    `.env` and whose environment set every setting above: its in-process tests (the service
    processes a test starts are the next test's: one run of them is enough)."""
    (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in HOSTILE.items()))
    env = {k: v for k, v in os.environ.items() if k != ENV_FILE_VARIABLE}
    result = subprocess.run(
        [
            os.path.abspath(sys.executable),  # the run starts in another directory
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            str(ROOT / "tests/test_startup.py"),
            str(ROOT / "tests/api/test_health_and_docs.py"),
            str(ROOT / "tests/chat/test_observability.py"),
            "-m",
            "not processes",
        ],
        cwd=tmp_path,
        env={**env, **HOSTILE},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


@pytest.mark.processes
@pytest.mark.slow
def test_service_processes_ignore_a_hostile_dotenv_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helpers every test uses to start `python -m app` (tests/support/processes.py), called
    from a directory whose `.env` sets hostile values, with the same values exported and the
    suite's `TOOLGATE_ENV_FILE` gone: the processes see none of them."""
    (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in HOSTILE.items()))
    monkeypatch.delenv(ENV_FILE_VARIABLE)
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)

    checked = run_app("check", cwd=tmp_path)  # production and FUNCTIONS_MODULE would refuse
    assert checked.returncode == 0, checked.stderr

    port = free_port()
    process = start_app("--port", str(port), cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_serving(process, f"{base}/healthz")
        assert httpx.get(f"{base}/healthz").json()["store"] == "memory"
        assert httpx.get(f"{base}/docs").status_code == 200  # DOCS_ENABLED=false would hide it
        admin = {"Authorization": "Bearer dev-admin-key"}  # not the exported ADMIN_API_KEY
        created = httpx.post(f"{base}/tenants", json={"tenant_id": "demo"}, headers=admin)
        assert created.status_code == 201, created.text
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=15)
    assert output.lstrip().startswith("{")  # JSON logs: LOG_FORMAT=text did not reach it
