"""Service processes (`python -m app`) for tests on real processes: start, wait until ready,
kill -9, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Replica:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def start_replica(port: int, env: dict[str, str], log: Path) -> Replica:
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Replica(f"http://127.0.0.1:{port}", process, log)


def wait_ready(replica: Replica) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if replica.process.poll() is not None:
            break
        try:
            if httpx.get(f"{replica.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    replica.process.kill()
    pytest.fail(f"a replica did not become ready:\n{replica.log.read_text()[-3000:]}")


def kill_9(replica: Replica) -> None:
    """SIGKILL, as a crash or the OOM killer would."""
    os.killpg(replica.process.pid, signal.SIGKILL)
    replica.process.wait(10)


def stop_replicas(replicas: list[Replica]) -> None:
    """SIGTERM (a drain), then SIGKILL for any still running after 15 s."""
    for replica in replicas:
        if replica.process.poll() is None:
            os.killpg(replica.process.pid, signal.SIGTERM)
    for replica in replicas:
        try:
            replica.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(replica.process.pid, signal.SIGKILL)
