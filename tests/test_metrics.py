"""toolgate_event_loop_lag_seconds: the probe's arithmetic on a scripted clock, and the metric as
a running service exposes it."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from prometheus_client import generate_latest

from app.metrics import Metrics, probe_loop_lag
from tests.chat.test_observability import sample
from tests.support.waiting import within


async def test_the_probe_records_how_late_the_loop_woke_it() -> None:
    metrics = Metrics()
    # Asleep 0.05 s each time: woke 0.4 s late, then 1 ms late; then the third sleep starts.
    times = iter([100.0, 100.45, 200.0, 200.051, 300.0])
    heard: list[tuple[float, float]] = []

    def hear(woke: float, lag: float, waited: float) -> None:
        heard.append((woke, lag))
        if len(heard) == 2:
            probe.cancel()  # at the probe's next sleep

    probe = asyncio.create_task(
        probe_loop_lag(
            metrics,
            interval_s=0.05,
            clock=lambda: next(times),
            cpu_wait=lambda: 0.0,
            listeners=[hear],
        )
    )
    with contextlib.suppress(asyncio.CancelledError):
        await probe
    assert [woke for woke, _ in heard] == [100.45, 200.051]
    assert [round(lag, 6) for _, lag in heard] == [0.4, 0.001]
    text = generate_latest(metrics.registry).decode()
    assert sample(text, "toolgate_event_loop_lag_seconds_bucket", le="0.25") == 1
    assert sample(text, "toolgate_event_loop_lag_seconds_bucket", le="0.5") == 2
    assert sample(text, "toolgate_event_loop_lag_seconds_count") == 2


async def test_the_service_exposes_its_loop_lag(client: httpx.AsyncClient) -> None:
    async def sampled() -> bool:
        text = (await client.get("/metrics")).text
        return sample(text, "toolgate_event_loop_lag_seconds_count") >= 2

    await within(sampled, 5)
