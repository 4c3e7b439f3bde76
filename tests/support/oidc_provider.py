"""A real OpenID provider: oidc-provider (npm, pinned), run by npm's node 22 (its supported
runtime; on node 20 it warns "Unsupported runtime"), both installed on first use into the
machine-wide cache of tests/support/npm_tools.py. Without node and npm (and without the cache)
the tests that need it skip, saying so."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.npm_tools import npm_install
from tests.support.prism import free_port
from tests.support.waiting import within_blocking

PACKAGES = ("node@22.23.3", "oidc-provider@9.13.3")
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
START_TIMEOUT_S = 60


@contextmanager
def oidc_provider() -> Iterator[str]:
    """The provider's issuer URL while it runs."""
    root, _ = npm_install(PACKAGES)
    node = root / "node_modules" / "node" / "bin" / "node"
    # Beside its node_modules, so `import "oidc-provider"` resolves to the pinned one.
    script = root / SCRIPT.name
    if not script.exists() or script.read_bytes() != SCRIPT.read_bytes():
        shutil.copyfile(SCRIPT, script)
    port = free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([str(node), str(script), str(port)], stdout=log, stderr=log)
        try:

            def ready() -> bool:
                log.seek(0)
                printed = log.read().decode(errors="replace")
                if process.poll() is not None:
                    raise RuntimeError(f"oidc-provider exited: {printed[-2000:]}")
                return "ready" in printed.splitlines()

            within_blocking(ready, START_TIMEOUT_S, every_s=0.1)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
