"""Service processes the tests start (`python -m app ...`), hermetic by construction.

Every process gets `service_env()`: this environment without any setting in it, no dotenv file
(`TOOLGATE_ENV_FILE` empty) and this checkout's `app` first on the path, so neither a
developer's `.env` in the working directory nor an exported setting reaches it, whatever the
caller's environment holds (tests/test_hermetic.py starts them from a hostile directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from app.config import ENV_FILE_VARIABLE, Settings
from tests.support.waiting import within_blocking

ROOT = Path(__file__).resolve().parents[2]
APP = (sys.executable, "-m", "app")


def service_env(**overrides: str) -> dict[str, str]:
    """The environment of a process a test starts; `overrides` are the settings it gets."""
    fields = {name.lower() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.lower() not in fields}
    env[ENV_FILE_VARIABLE] = ""
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **overrides}


def run_app(
    *args: str, cwd: Path = ROOT, timeout_s: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """`python -m app ARGS` to completion, its output captured."""
    return subprocess.run(
        [*APP, *args],
        cwd=cwd,
        env=service_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def start_app(
    *args: str,
    cwd: Path = ROOT,
    output: IO[Any] | int = subprocess.PIPE,
    new_session: bool = False,
    **env: str,
) -> subprocess.Popen[str]:
    """`python -m app ARGS` in the background; stderr goes with stdout into `output`."""
    return subprocess.Popen(
        [*APP, *args],
        cwd=cwd,
        env=service_env(**env),
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=new_session,
    )


def wait_serving(
    process: subprocess.Popen[str], url: str, *, bound_s: float = 60, log: Path | None = None
) -> None:
    """Until GET `url` answers 200; a process that exits or stays silent fails the test with
    what it printed (its pipe, or the `log` file it writes to)."""
    try:
        within_blocking(lambda: process.poll() is not None or _answers(url), bound_s, every_s=0.1)
        if process.poll() is None:
            return
    except AssertionError:
        process.kill()
    output = log.read_text()[-3000:] if log else process.communicate()[0]
    pytest.fail(f"the service did not start ({url}):\n{output}")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def child_processes() -> list[int]:
    """This process's live children. Read from each process's `stat` (its parent and state):
    `/proc/self/task/*/children` costs the kernel a walk of every process per thread, which in
    a long suite (hundreds of threads) held the test's event loop about 0.5 s a call."""
    me = os.getpid()
    children: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            children.append(int(entry.name))
    return children


def connections_to(port: int) -> int:
    """Established TCP connections from this process to 127.0.0.1:`port` (either direction
    shows up once per end; only the client end has `port` as its remote port)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01":
                count += 1
    return count


def loop_stalls(url: str, bound_s: float) -> str | None:
    """The loop watchdog's verdict on an app a test runs as a process (`python -m app`), from its
    `/metrics`: how many of its lag probe's samples, less the time its loop's thread waited for
    a CPU (`toolgate_event_loop_held_seconds`), passed `bound_s` (one of the metric's buckets)
    since it started. None when none did."""
    past, count = _held_past(httpx.get(f"{url}/metrics", timeout=10).text, bound_s)
    if not past:
        return None
    return (
        f"the event loop of the service at {url} stalled longer than {bound_s * 1000:.0f} ms "
        f"in {past} of its {count} lag samples (toolgate_event_loop_held_seconds; its log "
        "has what it was doing)"
    )


def _held_past(text: str, bound_s: float) -> tuple[int, int]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("toolgate_event_loop_held_seconds_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    count = int(values["toolgate_event_loop_held_seconds_count"])
    within = int(values[f'toolgate_event_loop_held_seconds_bucket{{le="{bound_s}"}}'])
    return count - within, count
