"""The README's tour runs as written: its shell blocks, in order, in one bash session, against
the service that its first block starts (`scripts/run --fake-model`). Every curl must get a
2xx answer (a curl wrapper adds --fail-with-body), and the answers are checked afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import service_env
from tests.support.secantus import free_port

pytestmark = [pytest.mark.processes, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def tour_blocks() -> list[str]:
    tour = README.split("## A tour with curl", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", tour, flags=re.S)


def _one_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def test_readme_first_screen_is_the_two_commands() -> None:
    first = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[0] for line in first] == ["scripts/run", "scripts/test"]
    assert len(README.splitlines()) <= 160
    screen = "\n".join(README.splitlines()[:20])
    assert [line for line in screen.splitlines() if "`/console`" in line], screen


def test_readme_tour_runs_top_to_bottom(tmp_path: Path) -> None:
    blocks = tour_blocks()
    assert blocks[0].startswith("scripts/run --fake-model > toolgate.log 2>&1 &")
    assert 'kill "$TOOLGATE"' in blocks[-1]
    port, model_port = free_port(), free_port()
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",  # a failed step stops the service
            # Every curl of the tour must succeed; the body of a failure is shown. Nothing is
            # added to what it prints: the terminal below is the one a reader sees.
            'curl() { command curl --fail-with-body "$@"; }',
            *(
                block.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace(
                    "scripts/run ", f"{ROOT}/scripts/run "
                )
                for block in blocks
            ),
            "wait",  # the service stops on `kill "$TOOLGATE"`
        ]
    )
    env = service_env(
        PORT=str(port),
        FAKE_MODEL_PORT=str(model_port),
        # The interpreter running the tests has the project installed: use its environment.
        TOOLGATE_VENV=sys.prefix,
    )
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,  # where the tour's toolgate.log goes
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, output[-4000:]
    # The service logs to its file: the terminal holds the tour's answers only.
    assert '"logger"' not in output, output[-4000:]
    assert '"Uvicorn running' in (tmp_path / "toolgate.log").read_text()

    answers = output
    lines = [line for line in answers.splitlines() if line.strip()]
    # Each answer ends its own line (`-w '\n'`): none runs into the next one or into the
    # prompt. Each line is one JSON answer, a status code, or a line of the streamed chat.
    stream_lines = ("event: ", "data: ", ": ")
    run_together = [
        line
        for line in lines
        if not line.startswith(stream_lines) and not line.isdigit() and not _one_json(line)
    ]
    assert run_together == [], answers[-4000:]
    assert answers.endswith("\n")
    ids = next(json.loads(line) for line in lines if line.startswith('[{"tool_id"'))
    assert {"rolldice", "current-time", "calculator"} <= {t["tool_id"] for t in ids}
    assert '"tool_id":"weather-api"' in answers.replace(" ", "")
    imported = json.loads(next(line for line in lines if line.startswith('{"dry_run"')))
    [shop] = imported["tools"]
    assert shop["tool_id"] == "shop_getOrder" and imported["skipped"] == []
    assert shop["function"]["url"] == "https://shop.example.com/orders/{order_id}"
    invoked = next(json.loads(line) for line in lines if line.startswith('{"run_id"'))
    assert invoked["status"] == "ok" and 1 <= int(invoked["content"]) <= 20
    chat = next(json.loads(line) for line in lines if '"stop_reason"' in line)
    assert chat["stop_reason"] == "completed" and chat["tool_calls"][0]["name"] == "roll_dice"
    assert "event: done" in answers  # the streamed chat
    assert "u-42" not in json.dumps(chat)  # the context value never reaches the caller
    mcp = json.loads(next(line for line in lines if line.startswith('{"jsonrpc"')))
    assert mcp["result"]["isError"] is False and 1 <= int(mcp["result"]["content"][0]["text"]) <= 6
    assert any(line.startswith('{"items":') and "next_cursor" in line for line in lines)  # runs
    assert lines[-2] == "204" and '"api_key":"tg_' in lines[-1]  # tool deleted, key rotated
    # no process of the tour is left: `kill "$TOOLGATE"` stopped the service and the model
    leftovers = subprocess.run(
        ["pgrep", "-f", f"--port {port}"], capture_output=True, text=True
    ).stdout
    assert leftovers == ""


def test_the_tours_wait_shows_why_a_service_cannot_start(tmp_path: Path) -> None:
    """Something already on the port (the first screen's `scripts/run`, say): the wait ends
    with the log's bind error on the terminal, rather than waiting on the other service. Pasted
    into a script (no job control: `kill -0 %1` never failed there, and the wait never ended)."""
    port, model_port = free_port(), free_port()
    first = tour_blocks()[0].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    first = first.replace("scripts/run ", f"{ROOT}/scripts/run ")
    env = service_env(PORT=str(port), FAKE_MODEL_PORT=str(model_port), TOOLGATE_VENV=sys.prefix)
    script = tmp_path / "tour.sh"
    script.write_text(f"set -euo pipefail\n{first}\nwait || true\n")
    with socket.create_server(("127.0.0.1", port)):
        completed = subprocess.run(
            ["bash", str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )
    assert "address already in use" in completed.stdout, completed.stdout + completed.stderr
