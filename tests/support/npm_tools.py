"""Third-party MCP programs from npm, installed on first use into a cache shared by every
checkout on the machine: the MCP Inspector (its CLI needs node >= 22.19, so npm's `node@22`
package comes along and runs it) and the reference server `server-everything`.

The versions are pinned; the cache directory is named after them, so a new pin installs anew.
A first install takes about 30-45 s (measured here; docs/mcp.md), a cached one nothing. Only a
machine without node and npm (and without the cache) skips the tests that need these; a failed
install fails them.
`TOOLGATE_NPM_TOOLS` names another cache directory."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGES = (
    "node@22.23.3",
    "@modelcontextprotocol/inspector@2.12.0",
    "@modelcontextprotocol/server-everything@2026.8.31",
)
INSTALL_TIMEOUT_S = 300


@dataclass(frozen=True)
class NpmTools:
    root: Path  # the npm prefix: node_modules/ is in it
    install_s: float  # what the install cost this session (0 when cached)

    @property
    def node(self) -> str:
        return str(self.root / "node_modules" / "node" / "bin" / "node")

    @property
    def inspector(self) -> list[str]:
        """The Inspector's launcher, run by node 22."""
        launcher = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
        return [self.node, str(self.root / launcher)]

    @property
    def everything(self) -> list[str]:
        """server-everything over stdio, run by node 22."""
        index = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
        return [self.node, str(self.root / index), "stdio"]


def cache_dir(packages: tuple[str, ...] = PACKAGES) -> Path:
    given = os.environ.get("TOOLGATE_NPM_TOOLS")
    if given and packages == PACKAGES:
        return Path(given)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:12]
    return base / "toolgate-test-tools" / f"npm-{key}"


def npm_tools() -> NpmTools:
    """The installed tools, installing them first when the cache lacks them."""
    root, install_s = npm_install(PACKAGES)
    tools = NpmTools(root, install_s)
    if not Path(tools.node).exists():
        pytest.fail(f"npm install {' '.join(PACKAGES)} left no node 22 in {root}")
    return tools


def npm_install(packages: tuple[str, ...]) -> tuple[Path, float]:
    """The npm prefix holding `packages` (and what installing them cost this session: 0 when
    cached), installed first when the cache lacks them (under a lock: other checkouts' test runs
    may want them at the same time)."""
    root = cache_dir(packages)
    done = root / ".installed"
    if done.exists():  # everything is in the cache: no node or npm of the machine's is needed
        return root, 0.0
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed (apt-get install nodejs npm)")
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return root, 0.0
        started = time.perf_counter()
        result = subprocess.run(
            [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", *packages],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        install_s = time.perf_counter() - started
        if result.returncode != 0:
            pytest.fail(f"npm install {' '.join(packages)} failed:\n{result.stderr[-3000:]}")
        done.write_text(f"{install_s:.1f} s\n")
        return root, install_s
