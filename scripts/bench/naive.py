"""The naive baseline: the tool loop a developer writes without toolgate.

`AsyncOpenAI` with default settings and a dict of handlers, same scripted chat as the service.
Prints one JSON line: CPU seconds spent in the run, model calls made, per-chat latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from typing import Any

from openai import AsyncOpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "roll_dice",
            "description": "Roll a fair die and return the number it shows.",
            "parameters": {
                "type": "object",
                "properties": {
                    "d": {
                        "type": "integer",
                        "description": "Number of sides of the die (2 or more).",
                    }
                },
                "required": ["d"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "current_time",
            "description": "Return the current date and time.",
            "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
]
HANDLERS = {
    "roll_dice": lambda d: random.randint(1, d),
    "current_time": lambda timezone="UTC": time.strftime("%Y-%m-%dT%H:%M:%S"),
    "calculate": lambda expression: 0,
}


async def one_chat(client: AsyncOpenAI, model: str) -> int:
    messages: list[Any] = [{"role": "user", "content": "Roll a six-sided die."}]
    calls = 0
    while True:
        response = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        calls += 1
        message = response.choices[0].message
        if not message.tool_calls:
            return calls
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = HANDLERS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="fake-calls-1")
    parser.add_argument("--chats", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--cpus", default="", help="run on these CPUs (comma-separated)")
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})
    client = AsyncOpenAI(base_url=args.base_url, api_key="bench")
    await one_chat(client, args.model)  # warm-up: connections, imports
    latencies: list[float] = []
    calls = 0
    queue = iter(range(args.chats))

    async def worker() -> None:
        nonlocal calls
        for _ in queue:
            started = time.perf_counter()
            made = await one_chat(
                client, args.model
            )  # not `calls += await ...`: that loses updates
            calls += made
            latencies.append(time.perf_counter() - started)

    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    print(
        json.dumps(
            {
                "cpu_s": time.process_time() - cpu,
                "wall_s": time.perf_counter() - wall,
                "model_calls": calls,
                "latencies": latencies,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
