"""The suite's hooks: hermetic settings, the store parametrization, the skip summary."""

from __future__ import annotations

import os
from typing import Any

import pytest

from app.config import ENV_FILE_VARIABLE, Settings

# The inner loop (-m "not slow") runs every store-parametrized suite on the in-memory store.
STORES = [
    "memory",
    pytest.param("secantus", marks=[pytest.mark.processes, pytest.mark.slow]),
    pytest.param("mongod", marks=[pytest.mark.processes, pytest.mark.slow]),
]


def pytest_configure(config: pytest.Config) -> None:
    """Hermetic settings: neither a developer's `.env` nor an exported setting reaches a test,
    nor a service process a test starts (they inherit this environment)."""
    fields = {name.lower() for name in Settings.model_fields}
    for variable in list(os.environ):
        if variable.lower() in fields:
            del os.environ[variable]
    os.environ[ENV_FILE_VARIABLE] = ""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Suites marked all_stores run once per backend; everything else uses the in-memory store.
    if "store" in metafunc.fixturenames and metafunc.definition.get_closest_marker("all_stores"):
        metafunc.parametrize("store", STORES)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whatever runs on the shared SecantusDB server is outside the inner loop.
    for item in items:
        if "secantus_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.processes)
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per distinct skip reason, with how many tests it covers."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "skipped"
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items()):
        terminalreporter.write_line(f"SKIPPED {count} test(s): {reason}")
