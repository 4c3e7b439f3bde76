"""Run records: one per chat, tenant-scoped, paged, filtered, aggregated in the database."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import fake_model as script
from tests.support.apps import create_tenant
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.waiting import runs_recorded

CANARY = "CANARY-run-3e9a77"


async def wait_for_runs(chat: ChatClient, count: int, query: str = "") -> list[dict[str, Any]]:
    """Records are written off the response path: wait (bounded) until they are there."""
    return await runs_recorded(chat.http, chat.tenant.headers, count, f"/runs?limit=500{query}")


async def test_every_chat_is_recorded(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(
        script.tool_calls(("roll_dice", {"d": 6})),
        script.text("rolled"),
        script.tool_calls(("explode", {"reason": "x"})),
        script.text("sorry"),
        script.text("plain"),
        repeat=script.status(500),
    )
    ok = await chat.chat(context_arguments={"api_token": CANARY})
    failed_tool = await chat.chat()
    plain = await chat.chat()
    model_down = await chat.chat()
    assert [r.status_code for r in (ok, failed_tool, plain, model_down)] == [200, 200, 200, 502]
    assert ok.headers["x-run-id"] == ok.json()["run_id"]

    runs = await wait_for_runs(chat, 4)
    assert len(runs) == 4
    newest_first = [run["stop_reason"] for run in runs]
    assert newest_first == ["error", "completed", "completed", "completed"]
    first = runs[-1]
    assert first["run_id"] == ok.json()["run_id"] and first["iterations"] == 2
    assert first["tool_calls"][0] | {"duration_ms": 0, "started_ms": 0} == {
        "id": ok.json()["tool_calls"][0]["id"],
        "name": "roll_dice",
        "tool_id": "rolldice",
        "status": "ok",
        "duration_ms": 0,
        "started_ms": 0,
        "arguments": {"d": 6},
    }
    assert first["usage"]["total_tokens"] == 30 and "messages" not in first
    assert runs[0]["error"].startswith("The model endpoint answered HTTP 500")
    assert CANARY not in str(runs)

    one = await chat.http.get(f"/runs/{first['run_id']}", headers=chat.tenant.headers)
    assert one.status_code == 200 and one.json()["run_id"] == first["run_id"]
    assert (
        await chat.http.get("/runs/" + "0" * 32, headers=chat.tenant.headers)
    ).status_code == 404

    only_errors = await wait_for_runs(chat, 1, "&status=error")
    assert [r["run_id"] for r in only_errors] == [runs[0]["run_id"]]
    with_dice = await wait_for_runs(chat, 1, "&tool_id=rolldice")
    assert [r["run_id"] for r in with_dice] == [first["run_id"]]
    by_name = await wait_for_runs(chat, 1, "&tool_name=explode")
    assert [r["run_id"] for r in by_name] == [runs[2]["run_id"]]


async def test_runs_are_paged_by_cursor(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(repeat=script.text("hi"))
    ids = [(await chat.chat()).json()["run_id"] for _ in range(5)]
    await wait_for_runs(chat, 5)
    seen: list[str] = []
    cursor = ""
    while True:
        page = (await chat.http.get(f"/runs?limit=2{cursor}", headers=chat.tenant.headers)).json()
        seen += [run["run_id"] for run in page["items"]]
        if not page["next_cursor"]:
            break
        cursor = f"&cursor={page['next_cursor']}"
    assert seen == list(reversed(ids))
    bad = await chat.http.get("/runs?cursor=not-a-cursor", headers=chat.tenant.headers)
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query.cursor"


async def test_tool_stats(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(repeat=script.tool_calls(("roll_dice", {"d": 6}), ("roll_dice", {"d": 1})))
    for _ in range(3):
        await chat.chat(max_iterations=2)
    await wait_for_runs(chat, 3)
    stats = (await chat.http.get("/tools/rolldice/stats", headers=chat.tenant.headers)).json()
    assert stats["calls"] == 6 and stats["errors"] == 3 and stats["error_rate"] == 0.5
    assert 0 <= stats["p50_ms"] <= stats["p95_ms"]
    quiet = (await chat.http.get("/tools/adder/stats", headers=chat.tenant.headers)).json()
    assert quiet["calls"] == 0 and quiet["p50_ms"] is None
    past = await chat.http.get(
        "/tools/rolldice/stats?until=2020-01-01T00:00:00Z", headers=chat.tenant.headers
    )
    assert past.json()["calls"] == 0
    missing = await chat.http.get("/tools/nope/stats", headers=chat.tenant.headers)
    assert missing.status_code == 404


async def test_runs_are_tenant_scoped(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(repeat=script.text("hi"))
    run_id = (await chat.chat()).json()["run_id"]
    await wait_for_runs(chat, 1)
    other = await create_tenant(chat.http, "globex")
    assert (await chat.http.get(f"/runs/{run_id}", headers=other.headers)).status_code == 404
    assert (await chat.http.get("/runs", headers=other.headers)).json()["items"] == []
    assert (await chat.http.get("/runs")).status_code == 401


@pytest.mark.settings(run_store_messages=True)
async def test_messages_are_kept_only_when_configured(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.text("hi there"))
    await chat.chat(messages=[{"role": "user", "content": "hello"}])
    [run] = await wait_for_runs(chat, 1)
    assert [m["content"] for m in run["messages"]] == ["hello", "hi there"]
