"""Tool documents as a tenant sends them to `POST /tools/create`."""

from __future__ import annotations

from typing import Any


def external_tool(tool_id: str = "weather-api", **overrides: Any) -> dict[str, Any]:
    """A valid external tool document; overrides replace top-level fields."""
    return {
        "tool_id": tool_id,
        "type": "external",
        "function": {
            "name": tool_id.replace("-", "_"),
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                    "days": {
                        "type": "array",
                        "items": {"type": "string"},
                        "min_items": 1,
                        "max_items": 7,
                    },
                },
                "required": ["city"],
            },
            "url": "https://api.example.com/weather",
            "method": "GET",
        },
        "context_parameters": [{"name": "user_id", "type": "string"}],
        "tags": ["weather"],
        **overrides,
    }


def external(tool_id: str, url: str, method: str = "GET", **extra: Any) -> dict[str, Any]:
    """An external tool calling `url` (a real local API in the chat suites)."""
    properties = extra.pop(
        "properties",
        {"city": {"type": "string"}, "days": {"type": "array", "items": {"type": "integer"}}},
    )
    return {
        "tool_id": tool_id,
        "type": "external",
        "function": {
            "name": tool_id.replace("-", "_"),
            "description": "An upstream API.",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": extra.pop("required", []),
            },
            "url": url,
            "method": method,
        },
        **extra,
    }
