"""Each tenant's tools, loaded once and kept ready: API JSON and model schemas built once.

Loading a tenant's tools, validating them and building their schemas on every request was the
largest cost after the model call (profile in the performance issue). A snapshot is reused for
`ttl_s` (TOOL_CACHE_TTL_S; 0 turns caching off). Writes through this process invalidate the
tenant at once; another replica's writes are seen within `ttl_s`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from app.repositories.tools import ToolRepository
from app.schemas.tools import Tool
from app.tools.providers import incompatibilities
from app.tools.schema import PreparedTool


@dataclass(frozen=True)
class ToolSnapshot:
    """One tenant's tools, ordered by tool_id."""

    docs: list[dict[str, Any]]
    json_by_id: dict[str, bytes]
    enabled: list[PreparedTool] = field(default_factory=list)

    @classmethod
    def build(cls, docs: list[dict[str, Any]]) -> ToolSnapshot:
        return cls(
            docs=docs,
            json_by_id={
                doc["tool_id"]: shown_tool(doc).model_dump_json(exclude_none=True).encode()
                for doc in docs
            },
            enabled=[PreparedTool.from_doc(doc) for doc in docs if doc.get("enabled")],
        )


def shown_tool(doc: dict[str, Any]) -> Tool:
    """A stored tool as admins see it, with the providers that cannot express it."""
    return Tool.model_validate({**doc, "incompatible_providers": incompatibilities(doc) or None})


class ToolCatalog:
    def __init__(self, *, tools: ToolRepository, ttl_s: float) -> None:
        self._tools = tools
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, ToolSnapshot]] = {}
        self._generations: dict[str, int] = {}

    async def snapshot(self, *, tenant_id: str) -> ToolSnapshot:
        cached = self._entries.get(tenant_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        generation = self._generations.get(tenant_id, 0)
        snapshot = ToolSnapshot.build(await self._tools.all(tenant_id=tenant_id))
        # Store only if no write invalidated the tenant while we were reading.
        if self._ttl_s > 0 and self._generations.get(tenant_id, 0) == generation:
            self._entries[tenant_id] = (time.monotonic() + self._ttl_s, snapshot)
        return snapshot

    async def enabled(self, *, tenant_id: str) -> list[PreparedTool]:
        """The tenant's enabled tools with their model schemas, ordered by tool_id."""
        return (await self.snapshot(tenant_id=tenant_id)).enabled

    def invalidate(self, tenant_id: str) -> None:
        self._generations[tenant_id] = self._generations.get(tenant_id, 0) + 1
        self._entries.pop(tenant_id, None)
