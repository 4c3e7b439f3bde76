"""Start-up as an operator sees it: real processes, their exit codes and what they print."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.config import Settings
from app.crypto import new_key
from app.heap import YOUNG_THRESHOLD
from tests.support.processes import ROOT, run_app, service_env, start_app, wait_serving
from tests.support.secantus import free_port
from tests.support.waiting import within

pytestmark = [pytest.mark.processes, pytest.mark.slow]

STRONG = "s" * 40


def test_check_refuses_a_broken_dictionary_with_one_list() -> None:
    result = run_app("check", FUNCTIONS_MODULE="tests.fixtures.broken_functions:registry")
    assert result.returncode == 1
    assert result.stderr.startswith("the function dictionary has 9 problem(s):")
    assert "Traceback" not in result.stderr
    assert "wrong_type: 'count' is declared integer" in result.stderr


def test_check_names_a_dependency_the_install_lacks(tmp_path: Path) -> None:
    """An install without lxml_html_clean (an older pip does not resolve it through trafilatura)
    passes every other check, and fails `check` naming the module and the built-in needing it
    (here it is made unimportable by a module of the same name earlier on the path)."""
    (tmp_path / "lxml_html_clean.py").write_text('raise ImportError("No module named x")\n')
    assert run_app("check").returncode == 0
    result = run_app("check", PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith("missing dependencies:\n"), result.stderr
    assert "built-in 'web-fetch' needs 'lxml_html_clean'" in result.stderr
    assert "requirements.lock" in result.stderr and "Traceback" not in result.stderr


def test_several_workers_on_the_in_memory_store_are_refused() -> None:
    result = run_app("serve", "--workers", "2", "--port", str(free_port()))
    assert result.returncode == 1
    assert "refusing to start 2 workers on the in-memory store" in result.stderr
    assert "MONGODB_URL" in result.stderr and "Traceback" not in result.stderr


def test_uvicorn_refuses_to_start_with_a_broken_dictionary() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "uvicorn", "app.asgi:app", "--port", str(free_port())],
        cwd=ROOT,
        env=service_env(FUNCTIONS_MODULE="tests.fixtures.broken_functions:registry"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode != 0
    assert "the function dictionary has 9 problem(s)" in process.stderr


@pytest.mark.parametrize(
    ("admin", "secret", "message"),
    [
        (None, None, "ADMIN_API_KEY is missing or a placeholder"),
        ("changeme", STRONG, "ADMIN_API_KEY is missing or a placeholder"),
        ("dev-admin-key", STRONG, "ADMIN_API_KEY is missing or a placeholder"),
        (STRONG, "short", "API_KEY_SECRET must be at least 32 characters"),
        (
            STRONG,
            "change-me-please-0123456789abcdefgh",
            "API_KEY_SECRET is missing or a placeholder",
        ),
    ],
)
def test_production_refuses_placeholder_secrets(
    admin: str | None, secret: str | None, message: str
) -> None:
    env = {"APP_ENV": "production"}
    if admin is not None:
        env["ADMIN_API_KEY"] = admin
    if secret is not None:
        env["API_KEY_SECRET"] = secret
    result = run_app("check", **env)
    assert result.returncode == 1
    assert message in result.stderr
    assert STRONG not in result.stderr  # secrets are never echoed back


def test_production_accepts_real_secrets_and_development_falls_back() -> None:
    settings = Settings(
        _env_file=None,
        app_env="production",
        admin_api_key="a" * 40,  # type: ignore[call-arg]
        api_key_secret="b" * 40,
        secrets_key=new_key(),
    )
    assert settings.development_fallbacks() == []
    dev = Settings(_env_file=None)  # type: ignore[call-arg]
    assert dev.development_fallbacks() == ["ADMIN_API_KEY", "API_KEY_SECRET", "SECRETS_KEY"]
    assert dev.effective_admin_api_key == "dev-admin-key"
    with pytest.raises(ValidationError):
        Settings(_env_file=None, app_env="staging")  # type: ignore[call-arg]
    assert "a" * 40 not in repr(settings)


@pytest.fixture
def served() -> Iterator[str]:
    """The README's run command, on a free port, with no settings at all."""
    port = free_port()
    process = start_app("--port", str(port))
    base = f"http://127.0.0.1:{port}"
    wait_serving(process, f"{base}/healthz")
    yield base
    process.terminate()
    output, _ = process.communicate(timeout=15)
    assert "in-memory store" in output  # the zero-setup mode says so in the log


def test_zero_setup_run_serves_the_api(served: str) -> None:
    health = httpx.get(f"{served}/healthz").json()
    assert health["store"] == "memory" and "warning" in health
    admin = {"Authorization": "Bearer dev-admin-key"}
    created = httpx.post(f"{served}/tenants", json={"tenant_id": "demo"}, headers=admin)
    assert created.status_code == 201
    key = {"Authorization": f"Bearer {created.json()['api_key']}"}
    assert httpx.get(f"{served}/tools/rolldice", headers=key).status_code == 200


def test_an_idle_keep_alive_connection_outlives_common_client_idle_limits(served: str) -> None:
    """uvicorn's default closes idle connections after 5 s, httpx's pool keeps them 5 s: a
    request sent as the server closes fails (ReadError) with nothing retried. The service keeps
    them 75 s, so clients and load balancers close first."""
    host, port = served.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/healthz")
        assert connection.getresponse().read() and connection.sock is not None
        first = connection.sock
        time.sleep(6)
        connection.request("GET", "/healthz")  # before: RemoteDisconnected (closed at 5 s)
        response = connection.getresponse()
        assert response.status == 200 and response.read()
        assert connection.sock is first  # the same connection, not a new one
    finally:
        connection.close()


_GC_PROBE = """
import asyncio, gc, json, sys

async def main():
    before = gc.get_threshold()
    if sys.argv[1] == "entry":
        from app.asgi import app
    else:
        from app.main import create_app
        app = create_app()
    async with app.router.lifespan_context(app):
        serving = {"frozen": gc.get_freeze_count(), "young": gc.get_threshold()[0]}
    print(json.dumps({**serving, "young_before": before[0], "young_after": gc.get_threshold()[0]}))

asyncio.run(main())
"""


@pytest.mark.parametrize("entry", [True, False], ids=["app.asgi", "create_app"])
def test_the_entry_point_freezes_what_start_up_built(entry: bool) -> None:
    """The process `uvicorn app.asgi:app` and `python -m app serve` run freezes start-up's
    objects and collects young ones less often while it serves (app/heap.py); an app built by
    another program leaves that program's collector alone."""
    result = subprocess.run(
        [sys.executable, "-c", _GC_PROBE, "entry" if entry else "factory"],
        cwd=ROOT,
        env=service_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["young_before"] == seen["young_after"] == 700  # put back at shutdown
    if entry:
        assert seen["frozen"] > 50_000  # the modules, types and validators of start-up
        assert seen["young"] == YOUNG_THRESHOLD
    else:
        assert seen == {"frozen": 0, "young": 700, "young_before": 700, "young_after": 700}


async def test_start_up_does_not_wait_for_tenants_and_the_sweep_reconciles_them(
    secantus_server: Any,
) -> None:
    """Start-up is the same at any number of tenants: ready before the tenants are
    reconciled (they were, one by one, before the port opened: 110 s at 10,001); the background
    sweep brings every stale tenant to the current stamp afterwards."""
    from pymongo import AsyncMongoClient

    from app.tools.builtin import registry
    from tests.support.apps import http_client, make_settings, running_app

    settings = make_settings(secantus_server.url, mongodb_timeout_ms=10_000)
    tenants = [
        {"tenant_id": f"t{n:04d}", "key_hash": f"h{n}", "stamp": "2|one_database|older"}
        for n in range(TENANTS_AT_START)
    ]
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus_server.url)
    try:
        await client[settings.mongodb_database]["tenants"].insert_many(tenants)
    finally:
        await client.close()
    async with running_app(settings, registry) as app, http_client(app) as http:
        assert (await http.get("/readyz")).status_code == 200
        current = app.state.services.reconciler.stamp
        store = app.state.services.tenant_store
        stale_at_ready = len(await store.stale_after(current, "", limit=TENANTS_AT_START))
        assert stale_at_ready > 0  # ready before the tenants were done

        async def all_current() -> bool:
            return not await store.stale_after(current, "", limit=1)

        await within(all_current, 120)
        tools = await app.state.services.database.tools("t0042").count_documents({})
        assert tools == len(registry)


TENANTS_AT_START = 300
