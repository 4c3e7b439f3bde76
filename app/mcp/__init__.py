"""MCP as a tool source: server configuration, the client, the hub of sessions, the executor."""
