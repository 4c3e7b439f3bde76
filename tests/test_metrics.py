"""toolgate_event_loop_lag_seconds and toolgate_event_loop_held_seconds: the probe's arithmetic
on a scripted clock, and the metric as a running service exposes it."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from prometheus_client import generate_latest

from app.observe.metrics import Metrics, probe_loop_lag
from tests.chat.test_observability import sample
from tests.support.waiting import within


async def test_the_probe_records_its_lateness_and_its_wait_for_a_cpu() -> None:
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


async def test_the_service_exposes_its_loop_lag(client: httpx.AsyncClient) -> None:
    async def sampled() -> bool:
        text = (await client.get("/metrics")).text
        return sample(text, "toolgate_event_loop_lag_seconds_count") >= 2

    await within(sampled, 5)
