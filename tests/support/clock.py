"""A clock the tests move by hand, for code that takes `clock=` (as `RateLimiter` does)."""

from __future__ import annotations


class FakeClock:
    """Seconds that only `advance` moves: TTLs and windows pass without waiting. It starts at
    a plausible epoch time, since shared limits write it to the database."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
