"""A local MCP server over streamable HTTP for the benchmark's MCP-server row: the SDK's own
server (`MCPServer`, stateless, JSON answers) with one tool answering what the REST upstream
answers, served by uvicorn on uvloop. Its CPU is reported apart from the service's."""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server import MCPServer

ANSWER = '{"temperature_c": 21.5, "conditions": "clear", "city": "Oslo"}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # Quiet: the SDK logs every stateless request at INFO, and the benchmark reads no log.
    server = MCPServer("bench-weather", log_level="WARNING")

    @server.tool()
    def weather(city: str) -> str:
        """The weather in a city."""
        return ANSWER

    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        loop="uvloop",
        timeout_graceful_shutdown=1,  # the service keeps its connections open
    )


if __name__ == "__main__":
    main()
