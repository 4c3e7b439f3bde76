"""A local REST API for the benchmark's external-tool rows: one small JSON answer per request,
on aiohttp (its own CPU is measured and reported apart from the service's)."""

from __future__ import annotations

import argparse

from aiohttp import web

ANSWER = b'{"temperature_c": 21.5, "conditions": "clear", "city": "Oslo"}'


async def weather(request: web.Request) -> web.Response:
    return web.Response(body=ANSWER, content_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", weather)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
