"""The outage circuit: one shared "database down since T" state for the whole process.

Before it, each part that needs the database found an outage out on its own, each waiting a
driver timeout: an idle tenant's first chat waited on the key cache, the tool catalog, the
allow list and the model providers in turn, then on the limit check (8.6 s measured with the
defaults). Now the health check (`app/services/health.py`, every second, bounded) and any
repository call that finds no server at all open the circuit; while it is open every repository
call raises `DatabaseUnavailable` at once, carrying how long the outage has lasted, so:

- a cache serves what it knew for the first CACHE_STALE_IF_ERROR_S of the outage, whatever the
  entry's age (app/cache.py), and a key or tool never loaded is a 503 at once;
- the limit check takes this replica's share without waiting (app/services/shared_limits.py);
- run records wait in their queue and journal, retried with backoff.

A successful health check closes it. A repository call that answered too slowly does not open
it: a slow operation says little about the next one; the health check's small ping decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from app.errors import DatabaseUnavailable

logger = logging.getLogger(__name__)


class Circuit:
    """Open (the database is down) or closed; opened by failures, closed by the health check."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.down_since: float | None = None  # when this outage was first seen
        self.unreachable = False  # no server could be reached (not merely too slow)
        self.reason = ""

    @property
    def is_open(self) -> bool:
        return self.down_since is not None

    def outage_s(self) -> float | None:
        """How long the database has been down, or None when it is not."""
        return None if self.down_since is None else self._clock() - self.down_since

    def open(self, reason: str, *, unreachable: bool) -> None:
        """The database failed a check (or could not be reached by a call)."""
        self.unreachable = unreachable
        self.reason = reason
        if self.down_since is None:
            self.down_since = self._clock()
            logger.warning(
                "database down (%s): database calls fail at once until it answers a check",
                reason,
            )

    def close(self) -> None:
        """The database answered a check."""
        if self.down_since is not None:
            logger.warning(
                "database answers again after %.1f s: the circuit is closed",
                self._clock() - self.down_since,
            )
        self.down_since = None
        self.unreachable = False
        self.reason = ""

    def refuse(self) -> None:
        """Raise `DatabaseUnavailable` at once while the circuit is open."""
        if self.down_since is not None:
            raise DatabaseUnavailable(
                unreachable=self.unreachable, outage_s=self._clock() - self.down_since
            )
