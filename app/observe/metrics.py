"""Prometheus metrics, one registry per app (GET /metrics; METRICS_TOKEN protects it)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ITERATION_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50, 100)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
LAG_PROBE_INTERVAL_S = 0.05
# Also told every lag sample, as (time.monotonic() when the probe woke, lag, the part of the lag
# the loop's thread waited for a CPU, in seconds), from whichever thread runs the loop: the test
# suite's loop watchdog listens here (tests/support/loop_watchdog.py). Listeners must be quick
# and must not raise.
LagListener = Callable[[float, float, float], None]
LAG_LISTENERS: list[LagListener] = []
_SCHEDSTAT = "/proc/thread-self/schedstat"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.requests = Counter(
            "toolgate_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            "toolgate_http_request_duration_seconds",
            "Time to the end of the response, by route template.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.chats = Counter(
            "toolgate_chats", "Chats run, by how they ended.", ["stop_reason"], registry=registry
        )
        self.chat_iterations = Histogram(
            "toolgate_chat_iterations",
            "Model turns per chat.",
            buckets=ITERATION_BUCKETS,
            registry=registry,
        )
        self.model_seconds = Histogram(
            "toolgate_model_call_duration_seconds",
            "Model calls, to the end of the answer (streamed or not).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tool_seconds = Histogram(
            "toolgate_tool_call_duration_seconds",
            "Tool calls, by tool type (function, external, mcp).",
            ["type"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tool_errors = Counter(
            "toolgate_tool_errors",
            "Tool calls that failed, by tool type and kind of failure.",
            ["type", "kind"],
            registry=registry,
        )
        self.active_chats = Gauge(
            "toolgate_active_chats", "Chats running now, all tenants.", registry=registry
        )
        self.mcp_sessions = Gauge(
            "toolgate_mcp_open_sessions", "Open MCP sessions held by chats.", registry=registry
        )
        self.mcp_skips = Counter(
            "toolgate_mcp_listing_skips",
            "MCP servers a listing went on without, by source (operator, tenant) and reason: "
            "timeout (past MCP_LIST_DEADLINE_S), unavailable (failed), down (skipped untried "
            "during the backoff after a failure).",
            ["source", "reason"],
            registry=registry,
        )
        self.mcp_down = Gauge(
            "toolgate_mcp_servers_down",
            "MCP server entries marked down now (listings skip them until their backoff ends).",
            registry=registry,
        )
        self.mcp_pooled = Gauge(
            "toolgate_mcp_pooled_sessions",
            "MCP sessions held in the pool (per tenant and server), in use or idle.",
            registry=registry,
        )
        self.mcp_server_calls = Counter(
            "toolgate_mcp_server_calls",
            "Tool calls on upstream MCP servers, by server (an operator server's name; every "
            "tenant server counts as 'tenant') and outcome (ok, error: an isError result, "
            "failed: the call itself failed, timed out or was abandoned).",
            ["server", "outcome"],
            registry=registry,
        )
        self.mcp_server_seconds = Histogram(
            "toolgate_mcp_server_call_duration_seconds",
            "Tool calls on upstream MCP servers, by server (as toolgate_mcp_server_calls).",
            ["server"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.mcp_requests = Counter(
            "toolgate_mcp_requests",
            "Requests to /mcp by JSON-RPC method (tools/list, tools/call, ...; batch, other) "
            "and HTTP status.",
            ["method", "status"],
            registry=registry,
        )
        self.loop_lag = Histogram(
            "toolgate_event_loop_lag_seconds",
            "How much later than asked the event loop woke a task sleeping 50 ms: the time "
            "the loop was held by other work.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.loop_held = Histogram(
            "toolgate_event_loop_held_seconds",
            "The same lag less the time the loop's thread waited for a CPU (Linux): what this "
            "process's own work held the loop. A machine short of CPU raises the lag, not this.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        # python_gc_*: the collector's runs and what they found, per generation (app/kit/heap.py).
        GCCollector(registry=registry)
        self.run_records_lost = Counter(
            "toolgate_run_records_lost",
            "Run records lost: memory and journal full or failing, or refused by the database.",
            registry=registry,
        )
        self.run_records_held = Gauge(
            "toolgate_run_records_held",
            "Run records in memory not yet in the database.",
            registry=registry,
        )
        self.run_journal_bytes = Gauge(
            "toolgate_run_journal_bytes",
            "Bytes of run records in this process's local journal, not yet known stored.",
            registry=registry,
        )
        self.spans_dropped = Counter(
            "toolgate_trace_spans_dropped",
            "Spans the OTLP exporter could not deliver (tracing on); each batch logs an ERROR.",
            registry=registry,
        )
        self.database_reachable = Gauge(
            "toolgate_database_reachable",
            "1 while the database answered its last check (GET /healthz says since when not).",
            registry=registry,
        )

        # Labelled children looked up once: `labels()` takes a lock and builds a key each call.
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._tool_children: dict[str, Any] = {}
        self._error_children: dict[tuple[str, str], Any] = {}
        self._chat_children: dict[str, Any] = {}
        self._mcp_children: dict[tuple[str, int], Any] = {}

    def request_done(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children[key] = (
                self.requests.labels(method, route, str(status)),
                self.request_seconds.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def tool_done(self, tool_type: str, seconds: float, error_kind: str | None) -> None:
        child = self._tool_children.get(tool_type)
        if child is None:
            child = self._tool_children[tool_type] = self.tool_seconds.labels(tool_type)
        child.observe(seconds)
        if error_kind is not None:
            key = (tool_type, error_kind)
            errors = self._error_children.get(key)
            if errors is None:
                errors = self._error_children[key] = self.tool_errors.labels(*key)
            errors.inc()

    def chat_done(self, stop_reason: str, iterations: int) -> None:
        child = self._chat_children.get(stop_reason)
        if child is None:
            child = self._chat_children[stop_reason] = self.chats.labels(stop_reason)
        child.inc()
        self.chat_iterations.observe(iterations)

    def mcp_listing_skipped(self, source: str, reason: str) -> None:
        self.mcp_skips.labels(source, reason).inc()

    def mcp_server_call_done(self, server: str, seconds: float, outcome: str) -> None:
        self.mcp_server_calls.labels(server, outcome).inc()
        self.mcp_server_seconds.labels(server).observe(seconds)

    def mcp_request_done(self, method: str, status: int) -> None:
        key = (method, status)  # the method is a bounded label (`method_label`)
        child = self._mcp_children.get(key)
        if child is None:
            child = self._mcp_children[key] = self.mcp_requests.labels(method, str(status))
        child.inc()

    def track(
        self, *, active_chats: Callable[[], float], mcp_sessions: Callable[[], float]
    ) -> None:
        """Gauges read at scrape time from the objects that own the numbers."""
        self.active_chats.set_function(active_chats)
        self.mcp_sessions.set_function(mcp_sessions)

    def track_mcp(self, *, down: Callable[[], float], pooled: Callable[[], float]) -> None:
        self.mcp_down.set_function(down)
        self.mcp_pooled.set_function(pooled)

    def track_records(
        self, *, held: Callable[[], float], journal_bytes: Callable[[], float]
    ) -> None:
        self.run_records_held.set_function(held)
        self.run_journal_bytes.set_function(journal_bytes)

    def track_database(self, *, reachable: Callable[[], float]) -> None:
        self.database_reachable.set_function(reachable)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def run_queue_wait() -> float:
    """Seconds the calling thread has waited, runnable, for a CPU (Linux's scheduler statistics;
    0 where they cannot be read, so nothing is taken off the lag)."""
    try:
        with open(_SCHEDSTAT, "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def probe_loop_lag(
    metrics: Metrics,
    *,
    interval_s: float = LAG_PROBE_INTERVAL_S,
    clock: Callable[[], float] = time.monotonic,
    cpu_wait: Callable[[], float] = run_queue_wait,
    listeners: Sequence[LagListener] = LAG_LISTENERS,
) -> None:
    """Forever: sleep `interval_s` and record how much later than that the loop woke us, and
    how much of that the loop's thread only waited for a CPU. Time waiting for the GIL, held by
    another thread of the process, is not waiting for a CPU: it counts as held."""
    while True:
        start, queued = clock(), cpu_wait()
        await asyncio.sleep(interval_s)
        woke = clock()
        lag = max(0.0, woke - start - interval_s)
        waited = min(max(cpu_wait() - queued, 0.0), lag)
        metrics.loop_lag.observe(lag)
        metrics.loop_held.observe(lag - waited)
        for listener in listeners:
            listener(woke, lag, waited)


@contextlib.asynccontextmanager
async def loop_lag_probe(metrics: Metrics) -> AsyncIterator[None]:
    """The lag probe running on the current loop while the context is open (the lifespan)."""
    task = asyncio.create_task(probe_loop_lag(metrics), name="toolgate-loop-lag")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
