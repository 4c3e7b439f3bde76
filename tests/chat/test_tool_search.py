"""Chats over large catalogs (issue 49): a few tools and `search_tools` at first, the tools a
search finds offered from the next model call on, every rule still applied, never more tools
than the provider takes in one request, on each model API."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.chat.test_model_apis import api, chat  # noqa: F401 - fixtures: each model API
from tests.support import fake_apis, functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.catalogs import large_catalog, store_catalog
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.secantus import SecantusServer
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED
from tests.support.waiting import runs_recorded

FORECAST_QUERY = "weather forecast for a city"


# Every test runs on each model API (the fixtures of test_model_apis), external tools allowed to
# reach the local upstream.
pytestmark = pytest.mark.settings(outbound_allow=["127.0.0.1"])


def offered(model_api: str, request: dict[str, Any]) -> list[str]:
    """The names of the tools a model request offered, in its API's format."""
    tools = request.get("tools") or []
    if model_api == "chat_completions":
        return [tool["function"]["name"] for tool in tools]
    return [tool["name"] for tool in tools]


async def test_a_search_reveals_the_one_forecast_tool_and_its_call_runs(
    chat: ChatClient,  # noqa: F811
    fake: FakeModel,
    upstream: ThreadedServer,
    api: str,  # noqa: F811
) -> None:
    await store_catalog(chat.app, "acme", large_catalog(150, f"{upstream.url}/echo"))
    steps = fake_apis.steps(api)
    fake.reset(
        steps.tool_calls(("search_tools", {"query": FORECAST_QUERY})),
        steps.tool_calls(("weather_forecast", {"city": "Oslo"})),
        steps.text("Sunny in Oslo."),
    )
    response = await chat.chat(messages=[{"role": "user", "content": "Weather in Oslo?"}])
    assert response.status_code == 200, response.text
    body = response.json()
    first, second = offered(api, fake.requests[0]), offered(api, fake.requests[1])
    assert "search_tools" in first and "weather_forecast" not in first
    assert len(first) <= 128
    assert "weather_forecast" in second and set(first) <= set(second)
    assert len(second) - len(first) <= 5  # TOOL_SEARCH_RESULTS
    search, forecast = body["tool_calls"]
    assert search["name"] == "search_tools" and search["status"] == "ok"
    assert "weather_forecast" in body["messages"][2]["content"]  # what the model read
    assert forecast["name"] == "weather_forecast" and forecast["status"] == "ok", forecast
    assert ["city", "Oslo"] in [list(pair) for pair in RECEIVED[-1]["query"]]
    [run] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    [searched] = run["searches"]
    assert searched["query"] == FORECAST_QUERY and "weather_forecast" in searched["revealed"]


async def test_a_small_catalog_is_offered_whole_without_search(
    chat: ChatClient,  # noqa: F811
    fake: FakeModel,
    api: str,  # noqa: F811
) -> None:
    fake.reset(fake_apis.steps(api).text("hi"))
    assert (await chat.chat()).status_code == 200
    names = offered(api, fake.requests[0])
    assert "search_tools" not in names and "add" in names


@pytest.mark.settings(tool_search_threshold=0)
async def test_with_search_off_more_tools_than_the_model_takes_is_a_clear_422(
    chat: ChatClient,  # noqa: F811
    fake: FakeModel,
    upstream: ThreadedServer,
    api: str,  # noqa: F811
) -> None:
    await store_catalog(chat.app, "acme", large_catalog(135, f"{upstream.url}/echo"))
    fake.reset()
    response = await chat.chat()
    assert response.status_code == 422, response.text
    assert "at most 128" in response.text and "TOOL_SEARCH_THRESHOLD" in response.text
    assert fake.requests == []  # never a provider's 400


async def test_explicit_tool_ids_past_the_limit_are_a_422_even_with_search(
    chat: ChatClient,  # noqa: F811
    fake: FakeModel,
    upstream: ThreadedServer,
    api: str,  # noqa: F811
) -> None:
    docs = large_catalog(135, f"{upstream.url}/echo")
    await store_catalog(chat.app, "acme", docs)
    fake.reset()
    response = await chat.chat(tool_ids=[doc["tool_id"] for doc in docs[:130]])
    assert response.status_code == 422 and "at most 128" in response.text


@pytest.mark.settings(outbound_allow=["127.0.0.1"], model_tool_search="native")
async def test_the_native_search_forms_reveal_the_tool_and_its_call_runs(
    chat: ChatClient,  # noqa: F811
    fake: FakeModel,
    upstream: ThreadedServer,
    api: str,  # noqa: F811
) -> None:
    """Responses: a client-executed `tool_search`, answered with a `tool_search_output` that
    carries the tools found; Anthropic: the found tools sent with `defer_loading` and the
    search's result their `tool_reference` blocks. Chat completions has no native form: the
    function."""
    await store_catalog(chat.app, "acme", large_catalog(150, f"{upstream.url}/echo"))
    steps = fake_apis.steps(api)
    first = (
        fake_apis.responses_tool_search(FORECAST_QUERY)
        if api == "responses"
        else steps.tool_calls(("search_tools", {"query": FORECAST_QUERY}))
    )
    fake.reset(first, steps.tool_calls(("weather_forecast", {"city": "Oslo"})), steps.text("ok"))
    response = await chat.chat(messages=[{"role": "user", "content": "Weather in Oslo?"}])
    assert response.status_code == 200, response.text
    search, forecast = response.json()["tool_calls"]
    assert search["name"] == "search_tools" and forecast["status"] == "ok", forecast
    opening, after = fake.requests[0], fake.requests[1]
    if api == "responses":
        assert {"type": "tool_search", "execution": "client"}.items() <= opening["tools"][
            -1
        ].items()
        assert all(tool.get("name") != "weather_forecast" for tool in after["tools"])
        [output] = [i for i in after["input"] if i.get("type") == "tool_search_output"]
        assert "weather_forecast" in [tool["name"] for tool in output["tools"]]
        [asked] = [i for i in after["input"] if i.get("type") == "tool_search_call"]
        assert asked["call_id"] == output["call_id"] == search["id"]
        assert asked["arguments"] == {"query": FORECAST_QUERY}
    elif api == "anthropic_messages":
        deferred = [tool for tool in after["tools"] if tool.get("defer_loading")]
        assert "weather_forecast" in [tool["name"] for tool in deferred]
        results = [
            block
            for message in after["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
        references = results[0]["content"]
        assert {"type": "tool_reference", "tool_name": "weather_forecast"} in references
    else:
        assert "weather_forecast" in offered(api, after)


@pytest.fixture
async def big_chat(
    secantus_server: SecantusServer,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    api: str,  # noqa: F811
) -> AsyncIterator[ChatClient]:
    """A tenant of 2,000 tools on a real MongoDB-wire server (the embedded store writes a
    catalog that large slowly), on each model API."""
    settings = make_settings(
        secantus_server.url,
        mongodb_database=f"big_{secrets.token_hex(4)}",
        mongodb_timeout_ms=30_000,  # SecantusDB reads 2,000 documents slowly on a busy machine
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        model_api=api,
        model_timeout_s=10.0,
        model_max_retries=0,
        outbound_allow=["127.0.0.1"],
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        yield ChatClient(app, http, await create_tenant(http, "acme"))


@pytest.mark.slow
async def test_a_chat_over_two_thousand_tools_finds_the_forecast_among_them(
    big_chat: ChatClient,
    fake: FakeModel,
    upstream: ThreadedServer,
    api: str,  # noqa: F811
) -> None:
    """Done when (issue 49): the first request carries at most 128 tools, one of them
    `search_tools`; the search reveals the one forecast tool among 2,000; its call runs."""
    await store_catalog(big_chat.app, "acme", large_catalog(2000, f"{upstream.url}/echo"))
    steps = fake_apis.steps(api)
    fake.reset(
        steps.tool_calls(("search_tools", {"query": FORECAST_QUERY})),
        steps.tool_calls(("weather_forecast", {"city": "Oslo"})),
        steps.text("Sunny."),
    )
    response = await big_chat.chat(messages=[{"role": "user", "content": "Weather in Oslo?"}])
    assert response.status_code == 200, response.text
    first = offered(api, fake.requests[0])
    assert len(first) <= 128 and "search_tools" in first
    assert "weather_forecast" in offered(api, fake.requests[1])
    assert response.json()["tool_calls"][1]["status"] == "ok"


async def test_a_revealed_tool_waits_for_approval_and_runs_when_the_chat_is_sent_back(
    chat: ChatClient,  # noqa: F811
    fake: FakeModel,
    upstream: ThreadedServer,
    api: str,  # noqa: F811
) -> None:
    """Approval applies to a tool a search revealed, and the continuation (a new request
    without the search) offers it again, so the approved call runs."""
    docs = large_catalog(150, f"{upstream.url}/echo")
    for doc in docs:
        if doc["tool_id"] == "weather-forecast":
            doc["approval"] = "always"
    await store_catalog(chat.app, "acme", docs)
    steps = fake_apis.steps(api)
    fake.reset(
        steps.tool_calls(("search_tools", {"query": FORECAST_QUERY})),
        steps.tool_calls(("weather_forecast", {"city": "Oslo"})),
    )
    stopped = (await chat.chat(messages=[{"role": "user", "content": "Oslo?"}])).json()
    assert stopped["stop_reason"] == "approval_required", stopped
    [pending] = stopped["pending_approvals"]
    fake.reset(steps.text("Sunny."))
    decision = {
        "call_id": pending["id"],
        "approved": True,
        "tool": "weather_forecast",
        "arguments": {"city": "Oslo"},
    }
    done = await chat.chat(messages=stopped["messages"], approvals=[decision])
    assert done.status_code == 200, done.text
    [ran] = done.json()["tool_calls"]
    assert ran["name"] == "weather_forecast" and ran["status"] == "ok", ran
