"""The loop watchdog judges the stall of the loop itself: time its thread waited for a CPU (more
test workers than cores) is taken out, time it computed, slept or waited for the GIL is not."""

from __future__ import annotations

import time

import pytest

from tests.support import loop_watchdog
from tests.support.loop_watchdog import BOUND_S, _Watch

INTERVAL_S = 0.05  # the probe's sleep (app.metrics.LAG_PROBE_INTERVAL_S)


class RunQueue:
    """The thread's run-queue wait as the kernel would report it, set by the test."""

    def __init__(self) -> None:
        self.waited = 10.0  # whatever the thread waited before the test

    def __call__(self) -> float:
        return self.waited


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> RunQueue:
    queue = RunQueue()
    monkeypatch.setattr(loop_watchdog, "_run_queue_wait", queue)
    return queue


def _stalled(queue: RunQueue, lag: float, waited_for_cpu: float) -> str | None:
    """One probe sample `lag` late after a punctual one, the thread `waited_for_cpu` of it."""
    watch = _Watch()
    with watch.watching():
        start = time.monotonic()
        watch.listen(start, 0.0)
        queue.waited += waited_for_cpu
        watch.listen(start + INTERVAL_S + lag, lag)
    return watch.verdict()


def test_a_stall_of_the_loops_own_fails_the_test(queue: RunQueue) -> None:
    verdict = _stalled(queue, 0.4, 0.0)
    assert verdict is not None and "stalled 400 ms" in verdict


def test_waiting_for_a_cpu_is_not_the_apps_stall(queue: RunQueue) -> None:
    assert _stalled(queue, 0.4, 0.3) is None  # 100 ms of its own
    verdict = _stalled(queue, 0.7, 0.3)  # 400 ms of its own: still past the bound
    assert verdict is not None and "stalled 400 ms" in verdict
    assert "up to 300 ms its thread waited for a CPU" in verdict
    assert _stalled(queue, BOUND_S - 0.01, 0.0) is None


def test_only_the_probes_own_previous_reading_is_subtracted_from(queue: RunQueue) -> None:
    """A reading from long before (the thread id of an ended loop, reused) is not used."""
    watch = _Watch()
    with watch.watching():
        start = time.monotonic()
        watch.listen(start - 5.0, 0.0)  # an earlier thread with this id, 5 s ago
        queue.waited += 0.3
        watch.listen(start + INTERVAL_S + 0.4, 0.4)
    verdict = watch.verdict()
    assert verdict is not None and "stalled 400 ms" in verdict


def test_the_kernels_figure_is_read() -> None:
    first = loop_watchdog._run_queue_wait()
    assert 0.0 <= first <= loop_watchdog._run_queue_wait()  # the figure never goes back
