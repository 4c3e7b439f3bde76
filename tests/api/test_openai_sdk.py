"""The official `openai` SDK (sync, async, streaming) and the OpenAI Agents SDK against `/v1`,
changing only `base_url` and `api_key`: the tenant's tools run server-side and the SDKs get
the final answer, in their own types. The service runs in uvicorn on 127.0.0.1 (real HTTP)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.main import create_app
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, make_settings
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.npm_tools import npm_install
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED

ANSWER = "It is sunny in Paris."
JS_SDK = ("openai@7.59.0",)  # npm's `openai`, installed on first use (tests/support/npm_tools.py)
JS_CLIENT = """
const { OpenAI } = require(process.argv[2]);
(async () => {
  const client = new OpenAI({ baseURL: process.argv[3], apiKey: process.argv[4], maxRetries: 0 });
  const ask = [{ role: "user", content: "Weather in Paris?" }];
  const whole = await client.chat.completions.create({ model: "default", messages: ask });
  let streamed = "";
  const stream = await client.chat.completions.create(
    { model: "default", messages: ask, stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  const response = await client.responses.create({ model: "default", input: "Weather in Paris?" });
  console.log(JSON.stringify({
    whole: whole.choices[0].message.content, streamed, responses: response.output_text,
  }));
})().catch((error) => { console.error(error); process.exit(1); });
"""


@dataclass
class Served:
    url: str
    key: str  # the tenant's API key
    fake: FakeModel

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def script(self) -> None:
        """The model calls the tenant's tool, then answers."""
        self.fake.reset(script.tool_calls(("weather", {"city": "Paris"})), script.text(ANSWER))

    def client(self, **overrides: Any) -> openai.OpenAI:
        return openai.OpenAI(**{"base_url": self.base_url, "api_key": self.key, **overrides})

    def async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.key)


@pytest.fixture(scope="module")
def served(
    fake_model_server: tuple[FakeModel, ThreadedServer], upstream: ThreadedServer
) -> Iterator[Served]:
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        model_timeout_s=5.0,
        outbound_allow=["127.0.0.1"],
        run_store_messages=True,
        rate_limit_chat_per_minute=0,
    )
    server = ThreadedServer(create_app(settings, registry=functions.registry), lifespan="on")
    server.start()
    try:
        with httpx.Client(base_url=server.url) as http:
            made = http.post("/tenants", json={"tenant_id": "acme"}, headers=ADMIN)
            assert made.status_code == 201, made.text
            key = made.json()["api_key"]
            tool = external("weather", f"{upstream.url}/echo", "GET")
            added = http.post(
                "/tools/create", json=tool, headers={"Authorization": f"Bearer {key}"}
            )
            assert added.status_code == 201, added.text
        yield Served(server.url, key, fake_model_server[0])
    finally:
        server.stop()


def _ran_the_tool(served: Served, *, only: bool = False) -> None:
    """The model was offered the tenant's tool (`only` it), asked for it, read its result."""
    first, second = served.fake.requests[0], served.fake.requests[1]
    offered = [tool["function"]["name"] for tool in first["tools"]]
    assert offered == ["weather"] if only else "weather" in offered
    assert second["messages"][-1]["role"] == "tool"
    assert "Paris" in second["messages"][-1]["content"]
    assert ("city", "Paris") in RECEIVED[-1]["query"]  # type: ignore[operator]


def test_chat_completions_with_the_sync_sdk(served: Served) -> None:
    served.script()
    completion = served.client().chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        extra_body={"toolgate": {"tool_ids": ["weather"]}},  # the extension: one tool only
    )
    assert isinstance(completion, openai.types.chat.ChatCompletion)
    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == 30
    assert completion.id.startswith("chatcmpl-")
    _ran_the_tool(served, only=True)


async def test_chat_completions_streamed_with_the_async_sdk(served: Served) -> None:
    served.script()
    async with served.async_client() as client:
        stream = await client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 30
    _ran_the_tool(served)


def test_responses_whole_streamed_and_continued(served: Served) -> None:
    client = served.client()
    served.script()
    response = client.responses.create(model="default", input="Weather in Paris?")
    assert isinstance(response, openai.types.responses.Response)
    assert response.output_text == ANSWER
    assert response.status == "completed" and response.usage is not None
    _ran_the_tool(served)
    served.script()
    with client.responses.stream(model="default", input="Weather in Paris?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == ANSWER and final.output_text == ANSWER
    # A later turn continues the conversation the first response's record kept.
    served.fake.reset(script.text("Still sunny."))
    later = _eventually(
        lambda: client.responses.create(
            model="default", input="And tomorrow?", previous_response_id=response.id
        )
    )
    assert later.output_text == "Still sunny."
    sent = served.fake.requests[-1]["messages"]
    assert [m["role"] for m in sent][-5:] == ["user", "assistant", "tool", "assistant", "user"]


def _eventually(call: Any) -> Any:
    """The previous response's record is written just after its answer: a 404 before it."""
    from tests.support.waiting import within_blocking

    found: list[Any] = []

    def attempt() -> bool:
        try:
            found.append(call())
        except openai.NotFoundError:
            return False
        return True

    within_blocking(attempt, 10, every_s=0.05)
    return found[-1]


def test_models_and_errors_in_openai_shape(served: Served) -> None:
    client = served.client(max_retries=0)
    assert [model.id for model in client.models.list()] == ["gpt-4o-mini"]
    with pytest.raises(openai.AuthenticationError) as refused:
        served.client(api_key="tg_not-a-key-0123456789").models.list()
    assert refused.value.body["type"] == "authentication_error"  # type: ignore[index]
    tools = [{"type": "function", "function": {"name": "mine", "parameters": {}}}]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}], tools=tools
        )
    assert bad.value.param == "tools" and "client-side" in bad.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model="default", messages=[])
    assert empty.value.code is None and empty.value.param == "messages"


async def test_the_agents_sdk_over_both_apis(served: Served) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is a dev dependency")
    agents.set_tracing_disabled(True)  # its traces would go to OpenAI's servers
    async with served.async_client() as client:
        for model in (
            agents.OpenAIChatCompletionsModel(model="default", openai_client=client),
            agents.OpenAIResponsesModel(model="default", openai_client=client),
        ):
            served.script()
            agent = agents.Agent(name="weather", instructions="Be brief.", model=model)
            result = await agents.Runner.run(agent, "Weather in Paris?")
            assert result.final_output == ANSWER
            _ran_the_tool(served)


@pytest.mark.slow
def test_the_js_sdk_from_npm(served: Served, tmp_path: Path) -> None:
    """The official JS SDK (npm `openai`, run by the machine's node): whole, streamed and
    Responses, changing only baseURL and apiKey."""
    root, _ = npm_install(JS_SDK)
    script_path = tmp_path / "client.cjs"
    script_path.write_text(JS_CLIENT)
    steps = [script.tool_calls(("weather", {"city": "Paris"})), script.text(ANSWER)]
    served.fake.reset(*steps, *steps, *steps)
    package = str(root / "node_modules" / "openai")
    ran = subprocess.run(
        ["node", str(script_path), package, served.base_url, served.key],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout) == {"whole": ANSWER, "streamed": ANSWER, "responses": ANSWER}
    assert len(served.fake.requests) == 6  # three chats, each calling the tool
