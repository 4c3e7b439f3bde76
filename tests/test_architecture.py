"""The package import order: api -> deps -> container -> services -> (repositories | chat -> mcp
-> tools) -> schemas -> the foundation modules. Only the HTTP layer knows the web framework."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"

# Lower rank imports nothing of a higher one; packages of equal rank do not import each other.
RANKS = {
    "app.main": 0,
    "app.asgi": -1,  # the ASGI entry point and the CLI start the app
    "app.__main__": -1,
    "app.api": 1,
    "app.deps": 2,
    "app.container": 3,
    "app.services": 4,
    "app.repositories": 5,
    "app.chat": 5,
    "app.mcp": 6,
    "app.tools": 7,
    "app.schemas": 8,
    "app.foundation": 9,  # config, errors, logs, metrics, limits, crypto, outbound
}
WEB_FRAMEWORKS = ("fastapi", "starlette")
# What the routers never import: they reach the heart (and the database) through services only.
API_NEVER_IMPORTS = ("app.tools",)
# Imports the toolbox rewrite of the MCP endpoint (issue 24, item 1) removes; then this is empty.
API_PENDING = {"app.api.mcp_endpoint imports app.tools.typed"}
FRAMEWORK_FREE = ("app.services", "app.repositories", "app.chat", "app.mcp", "app.tools")


def _layer(module: str) -> str:
    parts = module.split(".")
    package = ".".join(parts[:2])
    return package if package in RANKS else "app.foundation"


def _imports() -> list[tuple[str, str]]:
    """(importing module, imported module) for every import in app/."""
    found = []
    for path in sorted(APP.rglob("*.py")):
        relative = path.relative_to(APP.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((module, node.module))
            elif isinstance(node, ast.Import):
                found.extend((module, alias.name) for alias in node.names)
    return found


def test_packages_import_only_downwards() -> None:
    wrong = []
    for importer, imported in _imports():
        if not imported.startswith("app."):
            continue
        source, target = _layer(importer), _layer(imported)
        if source != target and RANKS[source] >= RANKS[target]:
            wrong.append(f"{importer} imports {imported}")
    assert wrong == []


def test_the_api_never_imports_the_heart() -> None:
    wrong = {
        f"{importer} imports {imported}"
        for importer, imported in _imports()
        if importer.startswith("app.api")
        and (imported + ".").startswith(tuple(f"{p}." for p in API_NEVER_IMPORTS))
    }
    assert wrong == API_PENDING


def test_the_heart_and_the_services_are_free_of_the_web_framework() -> None:
    wrong = [
        f"{importer} imports {imported}"
        for importer, imported in _imports()
        if importer.startswith(FRAMEWORK_FREE) and imported.split(".")[0] in WEB_FRAMEWORKS
    ]
    assert wrong == []


def test_the_rules_see_every_module() -> None:
    # A new top-level package must be placed in the order, not fall into the foundation.
    packages = {p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {f"app.{name}" for name in packages} <= set(RANKS)
    assert len(_imports()) > 300
