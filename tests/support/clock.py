"""A clock that moves only when the test moves it (pass `clock=clock` where code takes one)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start  # seconds since the epoch: shared limits write it to the database

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
