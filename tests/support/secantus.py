"""A real MongoDB-wire-compatible server (SecantusDB) as a subprocess, for tests only."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import within_blocking

STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def executable() -> str | None:
    """The server script of the interpreter's own environment first (it may not be on PATH)."""
    beside = shutil.which("secantusd-py", path=str(Path(sys.executable).parent))
    return beside or shutil.which("secantusd-py")


class SecantusServer:
    """Start, kill -9 and restart a SecantusDB server on a fixed port and storage directory."""

    def __init__(self, storage: Path, port: int | None = None) -> None:
        self.storage = storage
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = storage.parent / f"secantus-{self.port}.log"

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    def start(self) -> None:
        command = executable()
        if command is None:
            raise RuntimeError("secantusd-py is not installed (pip install -e '.[dev]')")
        self.storage.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                command,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--storage-path",
                str(self.storage),
                "--standalone",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            within_blocking(self._listening, STARTUP_TIMEOUT_S)
        except AssertionError:
            self.stop()
            raise RuntimeError(f"SecantusDB did not listen within {STARTUP_TIMEOUT_S} s") from None

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"SecantusDB exited early; see {self.log_path}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.process = None
