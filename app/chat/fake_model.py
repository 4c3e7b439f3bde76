"""A minimal OpenAI-compatible model for demos, compose's demo profile and benchmarks.

When the last message is a user message and tools were offered, it calls a tool (`--tool`,
`--calls` times in one answer); once tool results are in, it answers in text. Optional fixed
latency per call. Run: `python -m app fake-model --port 9000` (or `scripts/run --fake-model`).
`/v1/responses` answers as OpenAI's Responses API, `/v1/messages` as Anthropic's Messages API,
any other path as `/v1/chat/completions` does; it is a development tool, never a model.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from typing import Any

import orjson
import uvicorn

_ids = itertools.count(1)


def _model_option(request: dict[str, Any], name: str, default: float) -> Any:
    """Options in the model name: "fake-calls-3-ms-200" asks for 3 tool calls after 200 ms."""
    parts = str(request.get("model", "")).split("-")
    for key, value in itertools.pairwise(parts):
        if key == name and value.replace(".", "", 1).isdigit():
            return type(default)(float(value))
    return default


SEARCH_TOOL = "search_tools"


def _last_call(messages: list[dict[str, Any]]) -> str | None:
    """The name of the last tool call an assistant message made."""
    for message in reversed(messages):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            return str(calls[-1].get("function", {}).get("name"))
    return None


class FakeModelApp:
    def __init__(self, *, tool: str, arguments: str, calls: int, latency_s: float) -> None:
        self.tool, self.arguments, self.calls, self.latency_s = tool, arguments, calls, latency_s
        self.served = 0

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages", [])
        offered = {t["function"]["name"] for t in request.get("tools") or []}
        message: dict[str, Any]
        calls = int(_model_option(request, "calls", self.calls))
        last = messages[-1].get("role") if messages else None
        # A chat over a large catalog: search first, then call the tool the search revealed.
        searched = last == "tool" and _last_call(messages) == SEARCH_TOOL
        if last == "user" and self.tool not in offered and SEARCH_TOOL in offered:
            query = orjson.dumps({"query": self.tool.replace("_", " ")}).decode()
            call = {"name": SEARCH_TOOL, "arguments": query}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{next(_ids)}", "type": "function", "function": call}],
            }
            finish = "tool_calls"
        elif (last == "user" or searched) and self.tool in offered:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{next(_ids)}",
                        "type": "function",
                        "function": {"name": self.tool, "arguments": self.arguments},
                    }
                    for _ in range(calls)
                ],
            }
            finish = "tool_calls"
        else:
            results = [m.get("content") for m in messages if m.get("role") == "tool"]
            text = f"Tool results: {', '.join(map(str, results))}" if results else "Hello!"
            message, finish = {"role": "assistant", "content": text}, "stop"
        return {
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
        }

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = orjson.loads(body) if body else {}
        api = _api_of(str(scope.get("path", "")))
        latency_s = _model_option(request, "ms", self.latency_s * 1000) / 1000
        if latency_s:
            await asyncio.sleep(latency_s)
        self.served += 1
        payload = orjson.dumps(_shaped(api, self.answer(_as_chat(api, request))))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _api_of(path: str) -> str:
    if path.endswith("/responses"):
        return "responses"
    return "anthropic_messages" if path.endswith("/messages") else "chat_completions"


def _as_chat(api: str, request: dict[str, Any]) -> dict[str, Any]:
    """A Responses or Messages request, read as the chat request `answer` understands."""
    if api == "chat_completions":
        return request
    tools = [{"function": {"name": t.get("name")}} for t in request.get("tools") or []]
    messages: list[dict[str, Any]] = []
    if api == "responses":
        for item in request.get("input") or []:
            if item.get("type") == "function_call_output":
                messages.append({"role": "tool", "content": item.get("output")})
            elif item.get("type") != "function_call":
                messages.append({"role": item.get("role", "user")})
    else:
        for message in request.get("messages") or []:
            blocks = message.get("content")
            results = (
                [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
                if isinstance(blocks, list)
                else []
            )
            if results:
                messages += [{"role": "tool", "content": b.get("content")} for b in results]
            else:
                messages.append({"role": message.get("role")})
    return {"model": request.get("model"), "messages": messages, "tools": tools}


def _shaped(api: str, completion: dict[str, Any]) -> dict[str, Any]:
    """A chat completion in the API's own shape."""
    if api == "chat_completions":
        return completion
    message = completion["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    if api == "responses":
        output: list[dict[str, Any]] = [
            {"type": "function_call", "call_id": c["id"], **c["function"]} for c in calls
        ]
        if message.get("content"):
            text = {"type": "output_text", "text": message["content"]}
            output.append({"type": "message", "role": "assistant", "content": [text]})
        usage = {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30}
        return {"id": completion["id"], "status": "completed", "output": output, "usage": usage}
    content: list[dict[str, Any]] = [
        {
            "type": "tool_use",
            "id": c["id"],
            "name": c["function"]["name"],
            "input": orjson.loads(c["function"]["arguments"]),
        }
        for c in calls
    ]
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    return {
        "id": completion["id"],
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "usage": {"input_tokens": 20, "output_tokens": 10},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app fake-model", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--tool", default="roll_dice")
    parser.add_argument("--arguments", default='{"d": 6}')
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    app = FakeModelApp(
        tool=args.tool, arguments=args.arguments, calls=args.calls, latency_s=args.latency_ms / 1000
    )
    print(f"fake model on http://{args.host}:{args.port}/v1 (calls {args.tool})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
