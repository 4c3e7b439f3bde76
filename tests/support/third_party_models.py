"""Scripted model servers written by others, each behind one small interface, so the loop's
behaviours run unchanged on every API each of them speaks:

- `llm-mock-api` (PyPI): chat completions, the Responses API and Anthropic Messages; it parses
  each request into a normalised history (so it also checks what we send, in its own way).
- `fakellm` (PyPI): chat completions and Anthropic Messages, scripted by a YAML file of rules it
  reloads (`POST /_fakellm/reload`), turn by turn.

A script is a list of turns: `Text`, `Calls` or `Failure`; the last one repeats.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from tests.support.servers import ThreadedServer
from tests.support.waiting import within_blocking


@dataclass(frozen=True)
class Text:
    content: str


@dataclass(frozen=True)
class Calls:
    calls: list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Failure:
    status: int
    message: str


Turn = Text | Calls | Failure


class ScriptedModel(Protocol):
    name: str
    apis: tuple[str, ...]
    url: str  # the base URL, ending in /v1

    async def script(self, *turns: Turn) -> None: ...

    def tool_results(self, index: int) -> list[tuple[str, str]] | None:
        """(call id, content) of the tool results request `index` carried, as the server read
        them; None when the server cannot tell."""
        ...

    def stop(self) -> None: ...


class LlmMockApi:
    """llm-mock-api's `MockServer`, on its own thread and event loop."""

    name = "llm-mock-api"
    apis = ("chat_completions", "responses", "anthropic_messages")

    def __init__(self) -> None:
        from llm_mock_api import MockServer, MockServerOptions

        self._server = MockServer(MockServerOptions(host="127.0.0.1", port=0, log_level="error"))
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        within_blocking(self._listening, 60)  # generous: a loaded machine
        self.url = f"{self._server.url}/v1"

    def _listening(self) -> bool:
        try:
            return bool(self._server.url)
        except RuntimeError:
            return False

    def _run(self) -> None:
        async def main() -> None:
            await self._server.start()
            await self._stopped.wait()
            await self._server.stop()

        self._loop.run_until_complete(main())

    async def script(self, *turns: Turn) -> None:
        from llm_mock_api import ErrorReply, ReplyObject, ToolCall

        def reply(turn: Turn) -> Any:
            if isinstance(turn, Text):
                return ReplyObject(text=turn.content)
            if isinstance(turn, Calls):
                return ReplyObject(tools=[ToolCall(name=n, args=a) for n, a in turn.calls])
            return ReplyObject(error=ErrorReply(status=turn.status, message=turn.message))

        self._server.reset()
        self._server.when(lambda request: True).reply_sequence([reply(t) for t in turns])

    def tool_results(self, index: int) -> list[tuple[str, str]] | None:
        """As its history has them: a Responses `function_call` counts as a tool message too
        (the output comes later and wins), and an Anthropic user turn keeps only the id of its
        last `tool_result`."""
        recorded = self._server.history.at(index)
        assert recorded is not None, f"no request {index}"
        found: dict[str, str] = {}
        for message in recorded.request.messages:
            if message.tool_call_id and message.role != "assistant":
                found[message.tool_call_id] = message.content
        return list(found.items())

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)


class FakeLlm:
    """fakellm's app under uvicorn, scripted through its config file and reload endpoint."""

    name = "fakellm"
    apis = ("chat_completions", "anthropic_messages")

    def __init__(self, config: Path) -> None:
        self._config = config
        os.environ["FAKELLM_CONFIG"] = str(config)  # read by its reload endpoint
        from fakellm.server import app

        self._server = ThreadedServer(app).start()
        self.url = f"{self._server.url}/v1"

    async def script(self, *turns: Turn) -> None:
        rules = [self._rule(f"turn-{n}", {"turn": n}, t) for n, t in enumerate(turns[:-1], 1)]
        rules.append(self._rule("then", {"turn_in": [len(turns), 10_000]}, turns[-1]))
        self._config.write_text(yaml.safe_dump({"rules": rules}))
        async with httpx.AsyncClient(base_url=self._server.url) as client:
            for action in ("reload", "reset"):
                response = await client.post(f"/_fakellm/{action}")
                assert response.status_code == 200, response.text

    @staticmethod
    def _rule(name: str, when: dict[str, Any], turn: Turn) -> dict[str, Any]:
        if isinstance(turn, Text):
            respond: dict[str, Any] = {"content": turn.content}
        elif isinstance(turn, Calls):
            respond = {"tool_calls": [{"name": n, "arguments": a} for n, a in turn.calls]}
        else:
            respond = {"status": turn.status, "error": turn.message}
        return {"name": name, "when": when, "respond": respond}

    def tool_results(self, index: int) -> list[tuple[str, str]] | None:
        return None  # fakellm keeps no request bodies

    def stop(self) -> None:
        self._server.stop()
        os.environ.pop("FAKELLM_CONFIG", None)
