"""RSS with many tenants touched once (issue 49): what the per-tenant caches cost, bounded.

    python scripts/bench/touched.py [--tenants 10000] [--out DIR]

Starts the service (in-memory store, production settings, limits off), creates `--tenants`
tenants (each seeded with the function tools), reads the service's RSS, then touches each
tenant once (`GET /tools/ids`: its key verified and cached, its tool snapshot built and cached)
and reads it again, then touches a second set as large (the caches must evict, not grow). The
difference is what the caches hold; the in-memory store's own data is in both readings.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import secrets
import sys
from pathlib import Path

import aiohttp
import uvloop

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import ROOT, Process, free_port  # noqa: E402

CONCURRENCY = 16


async def touch(session: aiohttp.ClientSession, base: str, keys: list[str]) -> None:
    todo = iter(keys)

    async def worker() -> None:
        for key in todo:
            async with session.get(
                f"{base}/tools/ids", headers={"Authorization": f"Bearer {key}"}
            ) as answer:
                assert answer.status == 200, await answer.text()

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def create(
    session: aiohttp.ClientSession, base: str, admin: str, names: list[str]
) -> list[str]:
    keys: list[str] = []
    todo = iter(names)

    async def worker() -> None:
        for name in todo:
            async with session.post(
                f"{base}/tenants",
                json={"tenant_id": name},
                headers={"Authorization": f"Bearer {admin}"},
            ) as created:
                assert created.status == 201, await created.text()
                keys.append((await created.json())["api_key"])

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return keys


async def measure(args: argparse.Namespace) -> dict[str, float]:
    admin, port = secrets.token_urlsafe(32), free_port()
    env = {
        "APP_ENV": "production",
        "ADMIN_API_KEY": admin,
        "API_KEY_SECRET": secrets.token_urlsafe(32),
        "SECRETS_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "MONGODB_URL": "",
        "ACCESS_LOG": "false",
        "RATE_LIMIT_WRITES_PER_MINUTE": "0",
        "LOG_LEVEL": "WARNING",
        **({"TOOL_CACHE_MAX_TENANTS": str(args.max_tenants)} if args.max_tenants else {}),
    }
    log = (Path(args.out) / "touched-service.log").open("a")
    service = Process([sys.executable, "-m", "app", "serve", "--port", str(port)], port, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
            first = await create(session, base, admin, [f"t{n}" for n in range(args.tenants)])
            second = await create(session, base, admin, [f"u{n}" for n in range(args.tenants)])
            created_mb = service.rss_mb()
            await touch(session, base, first)
            once_mb = service.rss_mb()
            await touch(session, base, second)
            twice_mb = service.rss_mb()
    finally:
        service.stop()
    return {
        "tenants": args.tenants,
        "rss_mb_created": created_mb,
        "rss_mb_touched_once": once_mb,
        "rss_mb_touched_twice_as_many": twice_mb,
        "cache_kb_per_tenant": 1024 * (once_mb - created_mb) / args.tenants,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--max-tenants", type=int, default=0, help="TOOL_CACHE_MAX_TENANTS")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    figures = uvloop.run(measure(args))
    (Path(args.out) / "touched.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
