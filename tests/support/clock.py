"""A clock the tests move by hand, for code that takes `clock=` (as `RateLimiter` does)."""

from __future__ import annotations


class FakeClock:
    """Monotonic seconds that only `advance` moves: TTLs and windows pass without waiting."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
