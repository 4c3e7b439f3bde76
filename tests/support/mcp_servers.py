"""The operator's MCP configuration the MCP suites use: the reference `mcp-server-time`, and
tests/support/mcp_demo.py over stdio, streamable HTTP and SSE."""

from __future__ import annotations

import sys
from typing import Any

from tests.support.processes import ROOT

CONTEXT = {"user_id": {"argument": "user_id"}, "x_user": {"header": "X-User"}}


def operator_servers(http_url: str, sse_url: str) -> dict[str, Any]:
    demo_stdio = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_demo", "stdio"],
        "cwd": str(ROOT),
        "context": {"user_id": {"argument": "user_id"}},
    }
    return {
        "mcpServers": {
            # the reference server from PyPI; type left out, as Claude-style configs do
            "time": {
                "command": sys.executable,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            },
            "demo": demo_stdio,
            "demo-http": {"type": "streamable-http", "url": http_url, "context": CONTEXT},
            "demo-sse": {"type": "sse", "url": sse_url, "context": CONTEXT},
            "globex-only": {**demo_stdio, "tenants": ["globex"]},
        }
    }
