"""The loop watchdog judges the stall of the loop itself: time its thread waited for a CPU (more
test workers than cores), as the service's probe measures it, is taken out; time it computed,
slept or waited for the GIL is not."""

from __future__ import annotations

import asyncio
import contextlib
import time

from prometheus_client import generate_latest

from app.metrics import Metrics, probe_loop_lag, run_queue_wait
from tests.chat.test_observability import sample
from tests.support.loop_watchdog import BOUND_S, _Watch
from tests.support.processes import _held_past

INTERVAL_S = 0.05  # the probe's sleep (app.metrics.LAG_PROBE_INTERVAL_S)


def _stalled(lag: float, waited_for_cpu: float) -> str | None:
    """One probe sample `lag` late, the thread `waited_for_cpu` of it."""
    watch = _Watch()
    with watch.watching():
        watch.listen(time.monotonic() + INTERVAL_S + lag, lag, waited_for_cpu)
    return watch.verdict()


def test_a_stall_of_the_loops_own_fails_the_test() -> None:
    verdict = _stalled(0.4, 0.0)
    assert verdict is not None and "stalled 400 ms" in verdict


def test_waiting_for_a_cpu_is_not_the_apps_stall() -> None:
    assert _stalled(0.4, 0.3) is None  # 100 ms of its own
    verdict = _stalled(0.7, 0.3)  # 400 ms of its own: still past the bound
    assert verdict is not None and "stalled 400 ms" in verdict
    assert "up to 300 ms its thread waited for a CPU" in verdict
    assert _stalled(BOUND_S - 0.01, 0.0) is None


async def test_the_probe_takes_the_cpu_wait_of_its_own_sleep_off_the_held_time() -> None:
    """Asleep 0.05 s each time: 0.4 s late of which 0.3 s waiting for a CPU, then 0.3 s late
    with a wait that began before the sleep did (not this sample's), then punctual."""
    metrics = Metrics()
    times = iter([100.0, 100.45, 200.0, 200.35, 300.0, 300.05, 400.0])
    queue = iter([10.0, 10.3, 11.0, 11.0, 12.0, 12.0, 13.0])
    heard: list[tuple[float, float, float]] = []

    def hear(woke: float, lag: float, waited: float) -> None:
        heard.append((woke, round(lag, 6), round(waited, 6)))
        if len(heard) == 3:
            probe.cancel()  # at the probe's next sleep

    probe = asyncio.create_task(
        probe_loop_lag(
            metrics,
            interval_s=0.05,
            clock=lambda: next(times),
            cpu_wait=lambda: next(queue),
            listeners=[hear],
        )
    )
    with contextlib.suppress(asyncio.CancelledError):
        await probe
    assert heard == [(100.45, 0.4, 0.3), (200.35, 0.3, 0.0), (300.05, 0.0, 0.0)]
    text = generate_latest(metrics.registry).decode()
    assert sample(text, "toolgate_event_loop_lag_seconds_bucket", le="0.25") == 1
    assert sample(text, "toolgate_event_loop_held_seconds_bucket", le="0.05") == 1  # 0
    assert sample(text, "toolgate_event_loop_held_seconds_bucket", le="0.25") == 2  # 0.1
    assert sample(text, "toolgate_event_loop_held_seconds_count") == 3


def test_the_kernels_figure_is_read() -> None:
    first = run_queue_wait()
    assert 0.0 <= first <= run_queue_wait()  # the figure never goes back


def test_a_service_process_is_judged_by_its_held_time() -> None:
    """Apps a test runs as processes are judged from their /metrics, on the same bound."""
    metrics = Metrics()
    for held in (0.01, 0.2, 0.4):
        metrics.loop_held.observe(held)
    text = generate_latest(metrics.registry).decode()
    assert _held_past(text, BOUND_S) == (1, 3)
    metrics = Metrics()
    metrics.loop_held.observe(0.2)
    assert _held_past(generate_latest(metrics.registry).decode(), BOUND_S) == (0, 1)
