"""The outbound client alone: CPU per request of external tools' client (aiohttp, with the
connect-time guard), of one shared httpx client through the same guard, and of the model
client's pool (`app/chat/wire.py`) behind the same guard (the candidate issue 30 asks to measure
against aiohttp: it sends the same request as a POST without a body, since it only POSTs), against
one local upstream, in one process. Prints one JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx

from app.chat.wire import WirePool
from app.tools.netguard import (
    OutboundPolicy,
    guarded_transport,
    system_resolver,
    vetted_addresses,
)
from app.tools.outbound_client import OutboundClient


async def _aiohttp(url: str, count: int, concurrency: int) -> float:
    policy = OutboundPolicy(["127.0.0.1"])
    async with OutboundClient(policy, timeout_s=10, connect_timeout_s=5) as client:

        async def one() -> None:
            async with client.request("GET", url, query=[("city", "Oslo")]) as response:
                await response.read_capped(1_048_576)

        return await _timed(one, count, concurrency)


async def _httpx(url: str, count: int, concurrency: int) -> float:
    transport = guarded_transport(OutboundPolicy(["127.0.0.1"]), limits=httpx.Limits())
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:

        async def one() -> None:
            response = await client.get(url, params={"city": "Oslo"})
            response.read()

        return await _timed(one, count, concurrency)


async def _wire(url: str, count: int, concurrency: int) -> float:
    policy = OutboundPolicy(["127.0.0.1"])

    async def connect(host: str, port: int) -> list[str]:
        return [str(a) for a in await vetted_addresses(policy, system_resolver, host, port, 5)]

    pool = WirePool(f"{url}?city=Oslo", connect=connect)
    headers = {"User-Agent": "toolgate", "Accept-Encoding": "gzip, deflate"}

    async def one() -> None:
        response = await pool.post(b"", headers)
        assert response.status == 200, response.status

    try:
        return await _timed(one, count, concurrency)
    finally:
        await pool.close()


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
        "aiohttp_cpu_ms_per_request": asyncio.run(
            _aiohttp(args.url, args.requests, args.concurrency)
        ),
        "httpx_cpu_ms_per_request": asyncio.run(_httpx(args.url, args.requests, args.concurrency)),
        "wire_cpu_ms_per_request": asyncio.run(_wire(args.url, args.requests, args.concurrency)),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
