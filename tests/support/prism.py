"""Prism (`@stoplight/prism-cli`, npm), a mock server that checks each request against an
OpenAPI document: found, or installed once into a cache, and started per document.

Which `prism` runs: PRISM_BIN, else one on PATH, else the pinned version installed with npm
into `$TOOLGATE_CACHE/prism-VERSION` (default `~/.cache/toolgate`), once per machine, under a
file lock so concurrent runs install it once. None only when node or npm is absent; a failed
install raises with npm's own words.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.support.waiting import within_blocking

# The newest that runs on node 20 (5.16 wants node >= 24.18); pinned so every run checks
# requests the same way.
PRISM_VERSION = "5.14.2"
INSTALL_TIMEOUT_S = 600
START_TIMEOUT_S = 180


def cache_dir() -> Path:
    return Path(os.environ.get("TOOLGATE_CACHE") or Path.home() / ".cache" / "toolgate")


def prism_program(given: str | None = None) -> str | None:
    """The `prism` program to run; installed into the cache when needed (None without npm)."""
    found = given or os.environ.get("PRISM_BIN") or shutil.which("prism")
    if found:
        return found
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    return str(install_prism(cache_dir() / f"prism-{PRISM_VERSION}"))


def install_prism(target: Path) -> Path:
    """`target/node_modules/.bin/prism`, npm-installed into a fresh directory that is then
    renamed into place (a killed install leaves nothing half-made behind)."""
    program = target / "node_modules" / ".bin" / "prism"
    if program.exists():
        return program
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f"{target.name}.lock"):
        if program.exists():  # another run installed it while this one waited
            return program
        staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
        try:
            done = subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--prefix",
                    str(staging),
                    f"@stoplight/prism-cli@{PRISM_VERSION}",
                ],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"npm could not install Prism: {done.stderr[-2000:]}")
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return program


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrismHost:
    """Prism mock servers for several documents in one node process (tests/support/
    prism_many.js runs Prism's own server per document, so node and Prism load once instead
    of once per document); its output kept in a file (a pipe could fill)."""

    process: subprocess.Popen[bytes]
    urls: dict[Path, str]
    log: IO[bytes]

    def wait_ready(self) -> None:
        """Until every server listens; RuntimeError with its output if it exits or is slow."""

        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"Prism exited: {self.output()[-2000:]}")
            # the line prism_many.js prints, not the word: "address already in use" holds it
            return "ready" in self.output().splitlines()

        try:
            within_blocking(ready, START_TIMEOUT_S, every_s=0.2)
        except AssertionError:
            self.stop()
            raise RuntimeError(f"Prism did not start in {START_TIMEOUT_S} s") from None

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


def serve(program: str, documents: list[Path], *, attempts: int = 3) -> PrismHost:
    """`prism mock` for each document, each on its own loopback port, ready. The ports are
    found free here and bound by node seconds later, when Prism has loaded: another process
    (a test worker's server) may take one in between, and then all are picked again."""
    for attempt in range(1, attempts + 1):
        host = _spawn(program, documents)
        try:
            host.wait_ready()
            return host
        except RuntimeError as exc:
            host.stop()
            if "EADDRINUSE" not in str(exc) or attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _spawn(program: str, documents: list[Path]) -> PrismHost:
    cli = Path(program).resolve().parents[1]  # @stoplight/prism-cli/dist/index.js
    if not (cli / "dist" / "util" / "createServer.js").exists():
        raise RuntimeError(f"{program} is not a Prism 5 install (no {cli}/dist/util)")
    node = shutil.which("node") or "node"
    urls = {document: f"http://127.0.0.1:{free_port()}" for document in documents}
    pairs = [f"{document.resolve()}={url.rsplit(':', 1)[1]}" for document, url in urls.items()]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [node, str(Path(__file__).with_name("prism_many.js")), str(cli), *pairs],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return PrismHost(process, urls, log)
