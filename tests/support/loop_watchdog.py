"""The loop watchdog: a pytest plugin that fails a test during which the event loop of an app it
runs stalled longer than `BOUND_S` (registered in tests/conftest.py).

Every app the tests start runs the service's own lag probe in its lifespan
(`app.observe.metrics.probe_loop_lag`: a task that sleeps 50 ms and measures how late it wakes), on
whichever loop serves the app: the test's own (ASGITransport) or a server thread's (uvicorn in
a thread). The probe tells `app.observe.metrics.LAG_LISTENERS` every sample; this plugin listens and
keeps the part of each sample's lateness that falls inside the test's call phase: between
pytest-asyncio's runs of fixtures and of the test the loop is stopped, and a sleep across that
gap would otherwise look like a stall. A stall of S seconds shows as a lag between S - 50 ms
and S, so the bound catches any stall longer than `BOUND_S` + 50 ms.

The test process's garbage collector is held during each call phase and runs between tests
instead: a full collection of this process's heap (pytest, every test module and library it
imports) holds the GIL, and with it the loop of every app in the process, for 1-3 s on this
shared machine (measured: 1.5 s for the 210,000 objects of one app's process, under load). The
objects alive once the tests are collected are frozen (`gc.freeze`) so later collections skip
them. The service's own collections are in its metric.

Apps a test starts as a separate process are judged on the same bound from their own
`toolgate_event_loop_held_seconds` (`tests.support.processes.loop_stalls`, before they stop).

Not covered: the setup and teardown phases, an app's lifespan start and
end inside the call (`running_app`: it serves no request then, and a second app on the same
loop would see the first's start as a stall), and a threaded server from its `stop()` on (it
serves no request; its shutdown is its lifespan end).

Time the loop's thread spent runnable but not run is not the app's stall: with more test
workers than cores (`scripts/test -n`), the kernel leaves a thread waiting for a CPU now and
then. Each sample subtracts the loop thread's run-queue wait over its interval, as the probe
measures it (Linux's `/proc/thread-self/schedstat`; the service's own
`toolgate_event_loop_held_seconds`), so what is judged is the stall the loop would have had with
a CPU to itself: a callback that computes or blocks keeps all of its own time (blocked or
sleeping is not waiting for a CPU), and time spent waiting for the GIL another thread of the
process holds still counts, but for the time the process's other threads waited for a CPU over
the same interval (on a loaded machine the thread holding the GIL may be one the kernel left
waiting: the loop then waits on the scheduler, not on the app), and the time the hypervisor
took from the machine's CPUs meanwhile (Linux's "steal" in /proc/stat: a virtual CPU not given
to the machine runs none of its threads, and no thread's run-queue wait shows it), but never
less than the CPU time the process's threads used meanwhile. On a machine with a CPU to spare
no thread waits and nothing is stolen, and a thread that computes while holding the GIL keeps
all of its time. A failing verdict says how much of each was taken out.

A failing verdict names where the loop was: a sampler thread looks every 20 ms at each loop
whose probe is overdue by more than the bound and keeps the stack of that loop's thread (a stall
in C code that holds the GIL shows where it returned to Python).

`LagProbe` measures the same thing inside a test, on the test's loop, for tests that assert it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import pytest

from app.observe.metrics import LAG_LISTENERS, LAG_PROBE_INTERVAL_S, run_queue_wait

BOUND_S = 0.25
SAMPLE_EVERY_S = 0.02


class _Watch:
    """The worst stall inside the current test's call phase, from every app's probe."""

    def __init__(self, sched: Callable[[], tuple[float, float, float]] | None = None) -> None:
        self.process_sched = sched or process_sched
        self.since: float | None = None
        self.until: float | None = None
        self.worst = 0.0
        self.worst_at = 0.0  # when the worst stall ended (epoch seconds)
        self.reported = False
        self.beats: dict[int, float] = {}  # loop thread -> when its probe last woke
        self.stacks: dict[int, tuple[float, str]] = {}  # loop thread -> longest overdue stack
        self.stopping: set[int] = set()  # threads whose server is shutting down: not watched
        self.lifespans = 0  # apps starting or stopping inside the call: not watched meanwhile
        self.unscheduled = 0.0  # the longest run-queue wait taken out of a long lag, this call
        self.accounts = ""  # of the worst stall: what the process and the machine did meanwhile
        # loop thread -> the process's (CPU time, wait for a CPU) and the machine's stolen time,
        # at its previous sample
        self.sched: dict[int, tuple[float, float, float]] = {}
        self._accounted = ""  # of the sample being judged

    def listen(self, woke: float, lag: float, waited: float) -> None:  # from the loop's thread
        thread = threading.get_ident()
        if thread in self.stopping or self.lifespans:
            self.sched.pop(thread, None)  # unwatched meanwhile: no baseline carries over
            return
        self._accounted = ""
        self.beats[thread] = woke
        if self.since is None or self.until is not None:  # outside a call: nothing is judged
            self.sched.pop(thread, None)
        else:
            waited = self._unscheduled(thread, lag, waited)
        lag -= waited  # beyond the probe's own measure (the service's held-time metric)
        since, until = self.since, self.until
        if since is None:
            return
        # Only the lateness inside the call phase counts: a sleep that should have ended
        # before the call started (the loop stopped between fixture and test) counts from the
        # start of the call; one that ends after the call (the loop stopped when the test
        # returned) counts to its end.
        within = min(woke, until or woke) - max(woke - lag, since)
        if within > self.worst:
            self.worst = within
            self.worst_at = time.time() - (time.monotonic() - woke)  # the log lines' clock
            self.accounts = self._accounted

    def _unscheduled(self, thread: int, lag: float, waited: float) -> float:
        """What of a sample's lag the scheduler or the hypervisor, not the process, took: the
        loop's own wait for a CPU, as the probe measured it, the process's other threads' over
        the same interval (since this loop's previous sample) and the machine's stolen time;
        never so much that less is counted than the CPU the process used meanwhile (its own
        work, the GIL held while computing)."""
        now = self.process_sched()
        before = self.sched.get(thread)
        self.sched[thread] = now  # read as the probe's next sleep starts
        if lag <= BOUND_S:
            return waited
        if before is None:
            self.unscheduled = max(self.unscheduled, waited)
            self._accounted = f"; its loop's thread waited {waited * 1000:.0f} ms for a CPU"
            return waited
        own = lag - waited
        ran = now[0] - before[0]
        others = max(now[1] - before[1] - waited, 0.0)
        stolen = max(now[2] - before[2], 0.0)
        counted = max(own - others - stolen, min(ran, own))
        self.unscheduled = max(self.unscheduled, lag - counted)
        self._accounted = (
            f"; meanwhile the process computed {ran * 1000:.0f} ms, its loop's thread waited "
            f"{waited * 1000:.0f} ms for a CPU and its other threads {others * 1000:.0f} ms, and "
            f"the hypervisor took {stolen * 1000:.0f} ms of the machine's CPUs"
        )
        return lag - counted

    def sample(self) -> None:
        """Keeps the stack of every loop thread whose probe is overdue past the bound."""
        if self.since is None or self.until is not None or self.lifespans:
            return
        now = time.monotonic()
        frames = sys._current_frames()
        for thread, beat in list(self.beats.items()):
            if thread in self.stopping:
                continue
            # Only a loop whose probe woke during this call is watched: a loop that has ended
            # (an app of an earlier test on this thread) is not late, it is gone.
            if beat < self.since:
                continue
            overdue = now - beat - LAG_PROBE_INTERVAL_S
            frame = frames.get(thread)
            if frame is None or overdue <= BOUND_S:
                continue
            # One capture per stall, refreshed at most every 100 ms (formatting holds the GIL).
            if overdue > self.stacks.get(thread, (0.0, ""))[0] + 0.1:
                others = "".join(
                    f"  other thread {other}:\n" + "".join(traceback.format_stack(top)[-3:])
                    for other, top in frames.items()
                    if other not in (thread, threading.get_ident())
                )
                stack = "".join(traceback.format_stack(frame)[-8:])
                self.stacks[thread] = (overdue, f"{stack}{others}")

    def sampling(self) -> None:  # the sampler thread
        while True:
            time.sleep(SAMPLE_EVERY_S)
            self.sample()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        self.worst, self.worst_at, self.reported, self.until = 0.0, 0.0, False, None
        self.unscheduled, self.accounts = 0.0, ""
        self.stacks, self.sched = {}, {}
        self.since = time.monotonic()
        try:
            yield
        finally:
            self.until = time.monotonic()

    def verdict(self) -> str | None:
        """Why the test fails, once, when its loop stalled past the bound."""
        if self.reported or self.worst <= BOUND_S:
            return None
        self.reported = True
        where = "".join(
            f"\nloop thread {thread} overdue {overdue * 1000:.0f} ms at:\n{stack}"
            for thread, (overdue, stack) in self.stacks.items()
        )
        ended = datetime.fromtimestamp(self.worst_at, UTC).strftime("%H:%M:%S.%f")[:-3]
        return (
            f"the event loop of the app stalled {self.worst * 1000:.0f} ms, more than the "
            f"{BOUND_S * 1000:.0f} ms bound, ending at {ended} UTC (the log's clock), not "
            f"counting up to {self.unscheduled * 1000:.0f} ms its threads waited for a CPU or "
            f"the hypervisor took (tests/support/loop_watchdog.py){self.accounts}{where}"
        )


def process_sched() -> tuple[float, float, float]:
    """Seconds every thread of this process has run on a CPU, and waited, runnable, for one
    (Linux's scheduler statistics per thread), and seconds the hypervisor has taken from the
    machine's CPUs (`machine_stolen`); zeros where they cannot be read."""
    ran = waited = 0
    stolen = machine_stolen()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0, 0.0, stolen
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat", "rb") as stats:
                fields = stats.read().split()
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return ran / 1e9, waited / 1e9, stolen


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_stolen() -> float:
    """Seconds of "steal" summed over the machine's CPUs (/proc/stat's first line, eighth
    figure, in clock ticks): time a virtual CPU was runnable and the hypervisor ran something
    else. 0 where it cannot be read."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
        return int(fields[8]) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


_WATCH = _Watch()


@contextlib.contextmanager
def lifespan_unwatched() -> Iterator[None]:
    """While a test starts or stops an app (`running_app`): an app's lifespan serves no request
    (as outside the call phase), and with two apps on one loop (two replicas in one test) the
    start of one is not a stall of the other, which in a service has a process of its own."""
    _WATCH.lifespans += 1
    try:
        yield
    finally:
        _WATCH.lifespans -= 1
        if _WATCH.since is not None and _WATCH.until is None:
            _WATCH.since = max(_WATCH.since, time.monotonic())  # later lateness counts from here
            _WATCH.beats.clear()
            _WATCH.sched.clear()


@contextlib.contextmanager
def not_watching(thread: int | None) -> Iterator[None]:
    """While a threaded server shuts down (`ThreadedServer.stop`): its loop is not watched."""
    if thread is None:
        yield
        return
    _WATCH.stopping.add(thread)
    _WATCH.beats.pop(thread, None)
    try:
        yield
    finally:
        _WATCH.stopping.discard(thread)


def pytest_configure(config: pytest.Config) -> None:
    LAG_LISTENERS.append(_WATCH.listen)
    threading.Thread(target=_WATCH.sampling, name="loop-watchdog", daemon=True).start()


def pytest_unconfigure(config: pytest.Config) -> None:
    with contextlib.suppress(ValueError):
        LAG_LISTENERS.remove(_WATCH.listen)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()  # modules and collected tests live to the end: later collections skip them


@pytest.hookimpl(wrapper=True, trylast=True)  # innermost: the window is the test alone
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    gc.disable()  # no collection stalls the loop during the test; it runs after
    try:
        with _WATCH.watching():
            return (yield)
    finally:
        gc.enable()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """The call fails on a stall seen by its end; a stall seen only in teardown (the probe's
    sample in flight when the test returned) fails the teardown."""
    report = yield
    if call.when not in ("call", "teardown"):
        return report
    stalled = _WATCH.verdict()
    if stalled is not None:
        report.sections.append(("loop watchdog", stalled))
        if report.passed:
            report.outcome = "failed"
            report.longrepr = stalled
    return report


class LagProbe:
    """`async with LagProbe() as probe:` the worst lag of the current loop inside the block,
    measured as the watchdog does (a task sleeping 50 ms; the time the loop's thread only waited
    for a CPU, which a loaded machine adds to any test, taken off: `raw_worst` keeps it)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.raw_worst = 0.0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LagProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)  # the first sample starts now
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.sleep(LAG_PROBE_INTERVAL_S * 1.5)  # the sample in flight ends
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while True:
            start, queued = time.monotonic(), run_queue_wait()
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)
            lag = max(0.0, time.monotonic() - start - LAG_PROBE_INTERVAL_S)
            waited = min(max(run_queue_wait() - queued, 0.0), lag)
            self.raw_worst = max(self.raw_worst, lag)
            self.worst = max(self.worst, lag - waited)
            self.samples += 1
