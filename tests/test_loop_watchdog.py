"""The loop watchdog judges the stall of the loop itself: time its thread waited for a CPU (more
test workers than cores), as the service's probe measures it, is taken out; time it computed,
slept or waited for the GIL is not."""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from app.observe.metrics import Metrics, run_queue_wait
from tests.support.loop_watchdog import BOUND_S, _Watch, machine_stolen, process_sched
from tests.support.processes import _held_past

INTERVAL_S = 0.05  # the probe's sleep (app.observe.metrics.LAG_PROBE_INTERVAL_S)


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
    assert "up to 300 ms its threads waited for a CPU" in verdict
    assert _stalled(BOUND_S - 0.01, 0.0) is None


def test_another_thread_left_waiting_for_a_cpu_is_not_the_apps_stall() -> None:
    """On a loaded machine the thread holding the GIL the loop waits for may itself wait for a
    CPU: the process's other threads' run-queue wait over the sample is taken out too, but
    never so much that less than the CPU the process used meanwhile is counted."""
    sched = [(0.0, 0.0, 0.0)]

    def stall(ran: float, waited: float, stolen: float = 0.0) -> str | None:
        watch = _Watch(sched=lambda: sched[0])
        with watch.watching():
            watch.listen(time.monotonic(), 0.0, 0.0)  # a sample: the baseline is read
            sched[0] = (sched[0][0] + ran, sched[0][1] + waited, sched[0][2] + stolen)
            watch.listen(time.monotonic() + INTERVAL_S + 0.6, 0.6, 0.1)  # 0.1 s its own wait
        return watch.verdict()

    assert stall(ran=0.05, waited=0.5) is None  # the others waited 0.4 s: 100 ms of its own
    verdict = stall(ran=0.3, waited=0.5)  # yet the process computed 0.3 s meanwhile
    assert verdict is not None and "stalled 300 ms" in verdict
    verdict = stall(ran=0.05, waited=0.1)  # the others waited nothing: its own 500 ms
    assert verdict is not None and "stalled 500 ms" in verdict
    assert "the process computed 50 ms" in verdict and "its other threads 0 ms" in verdict


def test_time_the_hypervisor_took_is_not_the_apps_stall() -> None:
    """A virtual CPU the hypervisor did not run shows in no thread's run-queue wait, only in
    the machine's "steal"; it is taken out, never below the CPU the process used."""
    sched = [(0.0, 0.0, 0.0)]

    def stall(ran: float, stolen: float) -> str | None:
        watch = _Watch(sched=lambda: sched[0])
        with watch.watching():
            watch.listen(time.monotonic(), 0.0, 0.0)
            sched[0] = (sched[0][0] + ran, sched[0][1], sched[0][2] + stolen)
            watch.listen(time.monotonic() + INTERVAL_S + 0.5, 0.5, 0.0)
        return watch.verdict()

    assert stall(ran=0.02, stolen=0.4) is None  # 100 ms of its own
    verdict = stall(ran=0.02, stolen=0.1)  # 400 ms of its own
    assert verdict is not None and "stalled 400 ms" in verdict
    assert "the hypervisor took 100 ms" in verdict
    verdict = stall(ran=0.35, stolen=0.4)  # the process computed meanwhile: that counts
    assert verdict is not None and "stalled 350 ms" in verdict


def test_the_kernels_figure_is_read() -> None:
    first = run_queue_wait()
    assert 0.0 <= first <= run_queue_wait()  # the figure never goes back
    ran, waited, stolen = process_sched()
    later = process_sched()
    assert 0.0 <= ran <= later[0] and 0.0 <= waited <= later[1] and 0.0 <= stolen <= later[2]
    assert stolen <= machine_stolen()  # the machine's count never goes back


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
