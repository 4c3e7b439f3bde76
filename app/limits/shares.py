"""What a replica admits on its own while the database does not answer (LIMITS=shared).

Degrade to less, never to more. A replica that cannot reach the database admits at most its
share of each cap and rate, among the live replicas it last saw in the replicas document; the
shares of all replicas add up to the limit, never more. Its bucket holds its share of the tokens
it last saw left (never a full bucket on every replica) and refills at its share, and what it
admitted on its own is written into the shared counts when the database answers again: its runs
in its lease, its tokens charged to the shared bucket.

A database that answers too slowly (an operation sent and not answered in time; a server the
driver still sees but gets no answer from) is still counting for the replicas it answers, so a
slow replica takes only what the database already counts for it: the slots of its live lease
(at most its share) and no token it was not granted, however long it stays slow. Taking its
share there would add it on top of what the others are granted (measured: 5-6 chats in flight
against a cap of 4 with the database busy). Only a database that cannot be reached at all
(refused, reset: `Database.unreachable`) counts for no one, and there the shares apply.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.limits.local import MAX_TRACKED_KEYS

logger = logging.getLogger("app.limits.shared")

WARN_EVERY_S = 10.0


def share_of(limit: int, replicas: Sequence[str], replica: str) -> int:
    """This replica's share of `limit` among the live `replicas` (itself included): `limit // N`
    each, plus one for each of the first `limit % N` replicas in id order, so the shares add up
    to the limit exactly. With a limit below the number of replicas, `limit` replicas admit one
    and the others none."""
    ids = sorted({*replicas, replica})
    count, rank = len(ids), ids.index(replica)
    return limit // count + (1 if rank < limit % count else 0)


@dataclass
class ShareBucket:
    """A token bucket that starts empty: `per_minute` tokens a minute, at most `per_minute`."""

    per_minute: int
    updated: float
    tokens: float = 0.0

    def take(self, now: float) -> bool:
        if self.per_minute <= 0:
            return False
        self.tokens = min(
            float(self.per_minute), self.tokens + (now - self.updated) * self.per_minute / 60
        )
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def retry_after_s(self) -> float:
        if self.per_minute <= 0:
            return 60.0
        return (1 - self.tokens) * 60 / self.per_minute


class SeenTokens:
    """The tokens each tenant's shared bucket had left when this replica last saw it."""

    def __init__(self) -> None:
        self._tokens: OrderedDict[str, float] = OrderedDict()  # least recently seen first

    def remember(self, tenant_id: str, tokens: float) -> None:
        if tenant_id in self._tokens:
            self._tokens.move_to_end(tenant_id)
        elif len(self._tokens) >= MAX_TRACKED_KEYS:
            # Only reachable with that many tenants: the one seen least recently is forgotten
            # (it starts empty, the safe side), never all of them at once.
            self._tokens.popitem(last=False)
        self._tokens[tenant_id] = tokens

    def bucket(
        self, tenant_id: str, burst: int, share: Callable[[int], int], now: float
    ) -> ShareBucket:
        """This replica's share of a rate, holding its share of the tokens the shared bucket
        had left when it last saw it (none if it never did): never full on every replica."""
        left = int(max(0.0, self._tokens.get(tenant_id, 0.0)))
        return ShareBucket(share(burst), updated=now, tokens=float(share(left)))


class Alone:
    """When this replica counts on its own: for `window_s` after the database failed a check,
    without asking it again; the log says when it started and how long it lasted."""

    def __init__(
        self,
        *,
        window_s: float,
        clock: Callable[[], float],
        unreachable: Callable[[BaseException], bool],
    ) -> None:
        self._window_s = window_s
        self._clock = clock
        self._unreachable = unreachable
        self.since: float | None = None  # the first failure of this stretch
        self._until = 0.0
        self._warned_at = -math.inf
        self.admitted = 0  # runs and writes admitted on its own in this stretch
        self.slow = False  # the last failure was a slow answer, not an unreachable database

    @property
    def active(self) -> bool:
        return self._clock() < self._until

    def failed(self, exc: BaseException) -> None:
        now = self._clock()
        self._until = now + self._window_s
        self.slow = not self._unreachable(exc)
        if self.since is None:
            self.since, self.admitted = now, 0
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "shared limits: the database did not answer (%s); this replica counts on its "
                "own for the next %g s, %s",
                _why(exc),
                self._window_s,
                "taking only what the database already counts for it (it answers too slowly)"
                if self.slow
                else "at most its share of each limit (it cannot be reached)",
            )

    def for_s(self) -> float:
        """How long this stretch alone has lasted."""
        return 0.0 if self.since is None else self._clock() - self.since

    def answered(self) -> None:
        """The database answered: the shared counts apply again."""
        self._until = 0.0
        if self.since is None:
            return
        logger.warning(
            "shared limits: the database answers again; this replica counted on its own for "
            "%.1f s and admitted %d run(s) and write(s) alone (written into the shared counts)",
            self._clock() - self.since,
            self.admitted,
        )
        self.since = None


def _why(exc: BaseException) -> str:
    """The error's name, and the driver's under it (what an operator searches for)."""
    cause = exc.__cause__
    return type(exc).__name__ if cause is None else f"{type(exc).__name__}: {cause}"
