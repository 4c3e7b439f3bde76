"""An installation of the layout before shared collections, as that version wrote it
(tests/fixtures/legacy_layout/installation.json: made by commit f3bbec3 itself, see
make_fixture.py there), loaded into a fresh database of a real server."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from bson import json_util
from pymongo import AsyncMongoClient, IndexModel

from app.repositories.migration import LEGACY_RESOURCES

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_layout" / "installation.json"
MADE_AT = datetime(2026, 11, 28, 19, 25, 36, tzinfo=UTC)  # when the fixture was written
RESOURCES = LEGACY_RESOURCES


@cache
def installation() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(FIXTURE.read_text())
    return found


def documents(collection: str) -> list[dict[str, Any]]:
    """The documents of one of the installation's collections, with their BSON types back and
    their times moved to today (as if written a minute ago: nothing has expired)."""
    raw = installation()["collections"].get(collection, {"documents": []})["documents"]
    options = json_util.JSONOptions(tz_aware=True, tzinfo=UTC)
    loaded: list[dict[str, Any]] = json_util.loads(json.dumps(raw), json_options=options)
    shift = datetime.now(UTC) - timedelta(minutes=1) - MADE_AT
    return [
        {key: value + shift if isinstance(value, datetime) else value for key, value in doc.items()}
        for doc in loaded
    ]


def legacy_counts() -> Counter[tuple[str, str]]:
    """(tenant, resource) -> how many records the installation holds."""
    counts: Counter[tuple[str, str]] = Counter()
    for tenant in installation()["keys"]:
        for resource in RESOURCES:
            counts[tenant, resource] = len(documents(f"tenant.{tenant}.{resource}"))
    return counts


async def load_installation(url: str, database: str) -> None:
    """Every collection of the installation, with its indexes, into `database`."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        target = client[database]
        for name, spec in installation()["collections"].items():
            models = [
                IndexModel(
                    [(field, direction) for field, direction in index["key"]],
                    name=index["name"],
                    **{k: index[k] for k in ("unique", "expireAfterSeconds") if k in index},
                )
                for index in spec["indexes"]
                if index["name"] != "_id_"
            ]
            if models:
                await target[name].create_indexes(models)
            docs = documents(name)
            if docs:
                await target[name].insert_many(docs)
    finally:
        await client.close()


def headers(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {installation()['keys'][tenant]}"}
