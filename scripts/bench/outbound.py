"""The outbound client alone, against one local upstream, in one process, CPU per request:
external tools' client (`app/http/client.py`, with the connect-time guard), one
shared aiohttp session (the client before issue 30's third round, without its guard), and one
shared httpx client through the same guard (the one before that). On uvloop, as the service runs.
Prints one JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp
import httpx
import uvloop

from app.http.client import OutboundClient
from app.http.netguard import OutboundPolicy


async def _client(url: str, count: int, concurrency: int) -> float:
    policy = OutboundPolicy(["127.0.0.1"])
    async with OutboundClient(policy, timeout_s=10, connect_timeout_s=5) as client:

        async def one() -> None:
            async with client.request("GET", url, query=[("city", "Oslo")]) as response:
                await response.read_capped(1_048_576)

        return await _timed(one, count, concurrency)


async def _aiohttp(url: str, count: int, concurrency: int) -> float:
    async with aiohttp.ClientSession(trust_env=False, auto_decompress=False) as session:

        async def one() -> None:
            async with session.get(url, params={"city": "Oslo"}) as response:
                await response.read()

        return await _timed(one, count, concurrency)


async def _httpx(url: str, count: int, concurrency: int) -> float:
    # httpx's own pool (no connect guard: the comparison is of the clients' request paths).
    async with httpx.AsyncClient(trust_env=False) as client:

        async def one() -> None:
            response = await client.get(url, params={"city": "Oslo"})
            response.read()

        return await _timed(one, count, concurrency)


async def _timed(one, count: int, concurrency: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(concurrency):
        await one()  # connections open
    todo = iter(range(count))

    async def worker() -> None:
        for _ in todo:
            await one()

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return 1000 * (time.process_time() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    figures = {
        name: uvloop.run(measure(args.url, args.requests, args.concurrency))
        for name, measure in (
            ("client_cpu_ms_per_request", _client),
            ("aiohttp_cpu_ms_per_request", _aiohttp),
            ("httpx_cpu_ms_per_request", _httpx),
        )
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
