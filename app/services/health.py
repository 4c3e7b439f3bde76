"""What the probes report: the store in use and whether it answers."""

from __future__ import annotations

from typing import Literal

from app.repositories.database import Database

StoreKind = Literal["memory", "mongodb"]


class HealthService:
    def __init__(self, *, database: Database, ready_timeout_s: float = 2.0) -> None:
        self._database = database
        self._ready_timeout_s = ready_timeout_s

    @property
    def store(self) -> StoreKind:
        return "memory" if self._database.in_memory else "mongodb"

    async def ready(self) -> bool:
        """The database answers within the readiness timeout."""
        return await self._database.ping(timeout_s=self._ready_timeout_s)
