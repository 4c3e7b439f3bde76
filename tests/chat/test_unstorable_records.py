"""One unstorable run record never takes others with it, is kept reduced rather than lost, and
no stored record ever breaks reading the runs (over the real driver, on SecantusDB)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from pymongo import AsyncMongoClient

from app.config import Settings
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import (
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.fake_model import FakeModel, Reply
from tests.support.secantus import SecantusServer
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded

BIG = "9223372036854775808"  # 2**63: JSON the model may send, one past BSON's int64


def _by_user_message(request: dict[str, Any]) -> Reply:
    """Answer once a tool has run; else call `add` with what the user's message names."""
    if any(message["role"] == "tool" for message in request["messages"]):
        return script.text("done")(request)
    wanted = request["messages"][0]["content"]
    arguments = {
        "big": f'{{"a": {BIG}, "b": 1}}',
        "deep": '{"a": ' + "[" * 252 + "]" * 252 + "}",
    }.get(wanted if isinstance(wanted, str) else "", '{"a": 1, "b": 2}')
    return script.tool_calls(("add", arguments))(request)


@pytest.fixture
async def on_secantus(
    secantus_server: SecantusServer, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> AsyncIterator[tuple[httpx.AsyncClient, TenantCredentials, Settings]]:
    fake = fake_model_server[0]
    fake.reset(repeat=_by_user_message)
    settings = make_settings(
        secantus_server.url,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        run_store_messages=True,
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        yield http, await create_tenant(http, "acme"), settings


async def _runs(http: httpx.AsyncClient, tenant: TenantCredentials, count: int) -> list[Any]:
    return await runs_recorded(http, tenant.headers, count)


async def test_one_bad_record_does_not_take_the_batch_and_is_kept_reduced(
    on_secantus: tuple[httpx.AsyncClient, TenantCredentials, Settings],
) -> None:
    http, acme, _ = on_secantus

    def chat(content: Any) -> Any:
        body = {"messages": [{"role": "user", "content": content}]}
        return http.post("/chat", json=body, headers=acme.headers)

    answers = await asyncio.gather(
        chat("big"),  # an integer BSON cannot hold, in the model's tool arguments
        chat([{"type": "text", "text": "x", "nul\x00key": 1}]),  # NUL in a key (caller)
        chat([{"type": "text", "text": "x", "$where": "1"}]),  # a key read as an operator
        chat("innocent"),
    )
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    runs = {run["run_id"]: run for run in await _runs(http, acme, 4)}
    assert set(runs) == {a.json()["run_id"] for a in answers}  # none lost
    big, nul, dollar, innocent = (runs[a.json()["run_id"]] for a in answers)
    assert big["tool_calls"][0]["arguments"]["a"] == "[unstorable: an integer beyond 64 bits]"
    assert big["tool_calls"][0]["arguments"]["b"] == 1  # the rest kept
    assert "nul\\u0000key" in nul["messages"][0]["content"][0]  # the key, escaped
    part = dollar["messages"][0]["content"][0]  # MongoDB 5+ takes it as it is; else escaped
    assert part.get("$where", part.get("\\u0024where")) == "1"
    assert innocent["tool_calls"][0]["arguments"] == {"a": 1, "b": 2}


async def test_deep_arguments_from_the_model_are_an_error_result_not_a_500(
    on_secantus: tuple[httpx.AsyncClient, TenantCredentials, Settings],
) -> None:
    http, acme, _ = on_secantus
    body = {"messages": [{"role": "user", "content": "deep"}]}
    response = await http.post("/chat", json=body, headers=acme.headers)
    assert response.status_code == 200, response.text
    [call] = response.json()["tool_calls"]
    assert call["status"] == "error" and "nested deeper than 32 levels" in call["error"]
    assert len(await _runs(http, acme, 1)) == 1


async def test_no_stored_record_breaks_reading_the_runs(
    on_secantus: tuple[httpx.AsyncClient, TenantCredentials, Settings],
) -> None:
    http, acme, settings = on_secantus
    deep: Any = []
    for _ in range(300):  # stored by hand, or by an older version: past what JSON writers take
        deep = [deep]
    now = datetime.now(UTC)
    good = {
        "run_id": "a" * 32,
        "started_at": now,
        "ended_at": now,
        "stop_reason": "completed",
        "iterations": 1,
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "tool_calls": [],
        "model": "m",
    }
    stored = [
        {**good, "run_id": "b" * 32, "messages": [{"role": "user", "content": deep}]},
        {**good, "run_id": "c" * 32, "stop_reason": "exploded", "usage": "n/a"},
        {"run_id": "d" * 32, "started_at": now},  # almost nothing
        good,
    ]
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongodb_url)
    try:
        # As the shared `runs` collection holds them: the tenant named, the run id as `_id`.
        await client[settings.mongodb_database]["runs"].insert_many(
            [{**doc, "_id": doc["run_id"], "tenant_id": "acme"} for doc in stored]
        )
    finally:
        await client.close()
    items = await _runs(http, acme, 4)
    assert {item["run_id"] for item in items} == {doc["run_id"] for doc in stored}
    for doc in stored:
        one = await http.get(f"/runs/{doc['run_id']}", headers=acme.headers)
        assert one.status_code == 200, one.text
    shown = {item["run_id"]: item for item in items}
    assert shown["a" * 32]["stop_reason"] == "completed" and "error" not in shown["a" * 32]
    assert "[unstorable: nested deeper" in orjson.dumps(shown["b" * 32]).decode()
    assert "cannot be shown whole" in shown["c" * 32]["error"]
