"""Clocks the tests move by hand: for code that takes `clock=` (as `RateLimiter` does), and for
an event loop's timers."""

from __future__ import annotations

import time


class FakeClock:
    """Seconds that only `advance` moves: TTLs and windows pass without waiting. It starts at
    a plausible epoch time, since shared limits write it to the database."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class LoopClock:
    """An event loop's `time()`: the real clock plus what `advance` added. Timers fall due when
    it is moved; a bounded wait started after a move still measures real seconds. Set it with
    `monkeypatch.setattr(loop, "time", clock)` on the test's own loop."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
