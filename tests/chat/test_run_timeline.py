"""A chat's record places its model calls and tool calls on one time axis (the console's
waterfall), and GET /usage?by=model counts its model calls and tokens."""

from __future__ import annotations

import pytest

from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.waiting import runs_recorded


async def test_model_and_tool_calls_are_placed_from_the_runs_start(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(
        script.tool_calls(("roll_dice", {"d": 6}), ("roll_dice", {"d": 1})),
        script.text("rolled"),
    )
    assert (await chat.chat(parallel_tool_calls=False)).status_code == 200
    [run] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    first, second = run["model_calls"]
    one, two = run["tool_calls"]
    assert (first["status"], second["status"]) == ("ok", "ok")
    assert first["total_tokens"] == 15
    # In order on one axis: model, the tools one after the other, the model again.
    assert 0 <= first["started_ms"]
    assert first["started_ms"] + first["duration_ms"] <= one["started_ms"]
    assert one["started_ms"] + one["duration_ms"] <= two["started_ms"]
    assert two["started_ms"] + two["duration_ms"] <= second["started_ms"]
    assert (one["status"], two["status"]) == ("ok", "error")


async def test_a_failed_model_call_is_on_the_timeline(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(repeat=script.status(400))
    assert (await chat.chat()).status_code == 502
    [run] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    [failed] = run["model_calls"]
    assert failed["status"] == "error" and "total_tokens" not in failed


@pytest.mark.all_stores
async def test_usage_per_model_counts_model_calls_and_tokens(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(
        script.tool_calls(("roll_dice", {"d": 6})),
        script.text("rolled"),
        script.text("plain"),
        repeat=script.status(400),
    )
    for _ in range(3):
        await chat.chat()
    await runs_recorded(chat.http, chat.tenant.headers, 3)
    answer = await chat.http.get("/usage?by=model&bucket=1d", headers=chat.tenant.headers)
    assert answer.status_code == 200, answer.text
    usage = answer.json()
    [model] = usage["keys"]
    assert model["runs"] == 3 and model["calls"] == 4 and model["errors"] == 1
    assert model["total_tokens"] == 45 and model["prompt_tokens"] == 30
    assert model["error_rate"] == pytest.approx(1 / 3)
    assert usage["totals"]["runs"] == 3 and usage["totals"]["total_tokens"] == 45
    [line] = usage["series"]
    assert sum(line["total_tokens"]) == 45 and sum(line["calls"]) == 4
