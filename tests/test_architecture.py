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


# What a layer never imports, whatever the ranks allow: the API speaks HTTP and JSON-RPC and
# reaches the heart only through services (`app/services/toolbox.py` assembles every caller's
# tools); services reach the MCP hub only through the toolbox and the MCP server service.
NEVER = {
    "app.api": ("app.tools", "app.mcp", "app.repositories"),
}


def test_the_never_list() -> None:
    wrong = [
        f"{importer} imports {imported}"
        for importer, imported in _imports()
        for layer, forbidden in NEVER.items()
        if importer.startswith(layer) and imported.startswith(forbidden)
    ]
    assert wrong == []


def test_only_the_toolbox_assembles_tools() -> None:
    """No service outside the toolbox (and the MCP server service that owns the hub) touches
    the hub or the per-run MCP sessions, and no caller branches on a tool's kind."""
    hub_users = {
        importer
        for importer, imported in _imports()
        if imported in ("app.mcp.hub", "app.mcp.sessions") and importer.startswith("app.services")
    }
    assert hub_users <= {"app.services.toolbox", "app.services.mcp_servers"}
    kind_branches = []
    for path in sorted((APP / "services").rglob("*.py")) + sorted((APP / "api").rglob("*.py")):
        text = path.read_text()
        for needle in ("isinstance(tool, ExternalTool)", ".kind ==", "ChatSessions", ".hub."):
            if needle in text:
                kind_branches.append(f"{path.relative_to(APP)}: {needle}")
    assert kind_branches == []


def _longest_function(path: Path) -> tuple[int, str]:
    found = [(0, "")]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            found.append((node.end_lineno - node.lineno + 1, f"{path.name}:{node.name}"))
    return max(found)


def test_the_assembly_stays_small() -> None:
    """The layer above the heart stays readable: no service function reaches 50 lines, and the
    chat service and each module of the composition root stay under 350."""
    longest = max(_longest_function(path) for path in (APP / "services").rglob("*.py"))
    assert longest[0] < 50, longest
    for path in [APP / "services" / "chat.py", *(APP / "container").glob("*.py")]:
        assert len(path.read_text().splitlines()) < 350, path


def _own_private_names() -> set[str]:
    """Every `_name` app/ defines itself: functions, classes, attributes, slots, fields."""
    names: set[str] = set()
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # __slots__ entries
    return {name for name in names if name.startswith("_")}


# Names with a leading underscore that the standard library documents as public API.
_DOCUMENTED = frozenset({"_exit"})  # os._exit: end the process now (app/exit_deadline.py)


def test_no_private_module_or_attribute_of_a_library() -> None:
    """Libraries are used through their public API: no `from x._y import` (or `import x._y`),
    and no `obj._attr` whose name app/ does not define itself (a library's private attribute,
    such as `StreamReader._buffer` or a transport's `_pool`)."""
    own = _own_private_names()
    wrong = []
    for path in sorted(APP.rglob("*.py")):
        where = path.relative_to(APP.parent)
        for node in ast.walk(ast.parse(path.read_text())):
            modules: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] != "app" and any(part.startswith("_") for part in parts[1:]):
                    wrong.append(f"{where}: imports {module}")
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] not in ("app", "__future__"):
                    names = [alias.name for alias in node.names if alias.name.startswith("_")]
                    wrong += [f"{where}: imports {node.module}.{name}" for name in names]
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                if not node.attr.startswith("__") and node.attr not in own | _DOCUMENTED:
                    wrong.append(f"{where}:{node.lineno}: .{node.attr}")
    assert wrong == []
