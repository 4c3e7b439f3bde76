"""Large catalogs for tests: thousands of external tools written straight into a tenant's
collection (creating them one by one through the API would take minutes on the embedded store,
whose unique indexes are checked by scanning), among them look-alikes of the tool a test finds.
"""

from __future__ import annotations

import itertools
from typing import Any

from fastapi import FastAPI

from app.repositories.database import utc_now

SERVICES = [
    "crm", "mail", "billing", "calendar", "storage", "chat", "maps", "music", "news", "hr",
    "tickets", "shop", "ads", "analytics", "video", "photos", "notes", "tasks", "wiki", "vpn",
]  # fmt: skip
ACTIONS = [
    ("create", "Create a new", "POST"),
    ("list", "List every", "GET"),
    ("get", "Get one", "GET"),
    ("update", "Update a", "PATCH"),
    ("delete", "Delete a", "DELETE"),
    ("archive", "Archive a", "POST"),
    ("export", "Export each", "GET"),
    ("count", "Count the", "GET"),
    ("share", "Share a", "POST"),
    ("restore", "Restore a", "POST"),
]
THINGS = [
    "contact", "invoice", "event", "file", "message", "place", "playlist", "article", "employee",
    "ticket", "order", "campaign", "report", "clip", "album", "page", "item", "document", "user",
    "group", "comment", "label", "folder", "account", "device",
]  # fmt: skip
WEATHER_LOOKALIKES = [
    ("weather_current", "Current weather conditions observed at a station."),
    ("weather_alerts", "Severe weather alerts for a region."),
    ("weather_history", "Historical weather observations for a day in the past."),
    ("weather_stations", "Weather stations near a point."),
    ("air_quality_forecast", "Air quality forecast for the next three days."),
]


def tool_document(
    tool_id: str, name: str, description: str, url: str, **extra: Any
) -> dict[str, Any]:
    now = utc_now()
    return {
        "tool_id": tool_id,
        "type": "external",
        "enabled": True,
        "tags": [],
        "category": "default",
        "context_parameters": [],
        "function": {
            "name": name,
            "description": description,
            "url": url,
            "method": extra.pop("method", "GET"),
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city's name"}},
                "required": [],
            },
        },
        "created_at": now,
        "updated_at": now,
        **extra,
    }


def filler(count: int, url: str) -> list[dict[str, Any]]:
    """`count` tools of made-up services, each a distinct action on a thing."""
    made: list[dict[str, Any]] = []
    for service, (verb, phrase, method), thing in itertools.product(SERVICES, ACTIONS, THINGS):
        if len(made) == count:
            break
        name = f"{service}_{verb}_{thing}"
        description = f"{phrase} {thing} in the {service} service."
        made.append(tool_document(name.replace("_", "-"), name, description, url, method=method))
    return made


async def store_catalog(app: FastAPI, tenant_id: str, docs: list[dict[str, Any]]) -> None:
    """Write `docs` into the tenant's tool collection at once, then mark its snapshot stale (as
    a write through the API does)."""
    services = app.state.services
    await services.database.tools(tenant_id).insert_many(
        [{"_id": doc["tool_id"], **doc} for doc in docs]  # `_id` is the tool id
    )
    services.catalog.mark_stale(tenant_id)


def large_catalog(count: int, url: str) -> list[dict[str, Any]]:
    """`count` tools: look-alikes of a weather forecast, the forecast tool, and filler."""
    docs = [
        tool_document(name.replace("_", "-"), name, description, url)
        for name, description in WEATHER_LOOKALIKES
    ]
    docs.append(
        tool_document(
            "weather-forecast",
            "weather_forecast",
            "Daily weather forecast for a city, up to 16 days ahead.",
            url,
        )
    )
    return docs + filler(count - len(docs), url)
