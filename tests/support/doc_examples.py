"""The docs' curl examples, run as written: a section's ```bash blocks, in order, each in bash
with `$BASE` and `$AUTH` set, every curl made to fail on a non-2xx answer (as the README tour)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def section_blocks(page: str, heading: str) -> list[str]:
    """The ```bash blocks of the section `heading` (a `## ` line) of docs/`page`."""
    text = (DOCS / page).read_text()
    assert f"\n{heading}\n" in text, f"{page} has no section {heading!r}"
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def run_blocks(blocks: list[str], *, base: str, api_key: str, timeout_s: float = 60) -> list[str]:
    """What each block wrote (curl's answers), in order; a failing block fails the test."""
    outputs = []
    for block in blocks:
        script = "\n".join(
            [
                "set -euo pipefail",
                f"BASE={base}",
                f'AUTH="Authorization: Bearer {api_key}"',
                'curl() { command curl --fail-with-body --max-time 30 "$@"; echo; }',
                block,
            ]
        )
        done = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=timeout_s
        )
        assert done.returncode == 0, f"{block}\n-> {done.stdout[-2000:]}{done.stderr[-2000:]}"
        outputs.append(done.stdout)
    return outputs
