"""MCP fixtures (tests/support/fixtures/mcp.py)."""

from tests.support.fixtures.mcp import demo_http, demo_sse, mcp_chat

__all__ = ["demo_http", "demo_sse", "mcp_chat"]
