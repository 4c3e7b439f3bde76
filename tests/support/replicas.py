"""Service processes (`python -m app`) for tests on real processes: start, wait until ready,
kill -9, stop."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.loop_watchdog import BOUND_S
from tests.support.processes import loop_stalls, start_app, wait_serving


@dataclass
class Replica:
    url: str
    process: subprocess.Popen[str]
    log: Path


def start_replica(port: int, settings: dict[str, str], log: Path) -> Replica:
    """`python -m app` on `port` with exactly `settings` (tests/support/processes.py: no
    developer `.env`, no exported setting), its output in `log`."""
    with log.open("ab") as out:
        process = start_app("--port", str(port), output=out, new_session=True, **settings)
    return Replica(f"http://127.0.0.1:{port}", process, log)


def wait_ready(replica: Replica) -> None:
    wait_serving(replica.process, f"{replica.url}/readyz", bound_s=60, log=replica.log)


def kill_9(replica: Replica) -> None:
    """SIGKILL, as a crash or the OOM killer would."""
    os.killpg(replica.process.pid, signal.SIGKILL)
    replica.process.wait(10)


def stop_replicas(replicas: list[Replica]) -> None:
    """SIGTERM (a drain), then SIGKILL for any still running after 15 s; then fails if the loop
    of any that was still running had stalled past the loop watchdog's bound."""
    stalls = []
    for replica in replicas:
        if replica.process.poll() is None:
            try:
                stalls.append(loop_stalls(replica.url, BOUND_S))
            except httpx.HTTPError as exc:  # stopped all the same
                stalls.append(f"{replica.url}/metrics could not be read: {exc!r}")
    for replica in replicas:
        if replica.process.poll() is None:
            os.killpg(replica.process.pid, signal.SIGTERM)
    for replica in replicas:
        try:
            replica.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(replica.process.pid, signal.SIGKILL)
    assert not any(stalls), "; ".join(filter(None, stalls))
