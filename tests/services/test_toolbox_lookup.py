"""A selection of ids (or names) is looked up in the snapshot's indexes rather than searched for
among all the tenant's tools: it must choose what the listing-based definition chooses (kept
here as the reference: the code before the lookup), for every kind of selection."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app.errors import AppError
from app.mcp.config import server_of
from app.services import toolbox as toolbox_module
from app.services.catalog import ToolSnapshot
from app.services.client_tokens import ClientToken
from app.services.toolbox import Selection, Toolbox


def _tool(tool_id: str, name: str, *, enabled: bool = True, **more: Any) -> dict[str, Any]:
    return {
        "tool_id": tool_id,
        "type": "function",
        "enabled": enabled,
        "tags": more.pop("tags", []),
        "category": more.pop("category", "default"),
        "context_parameters": [],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "function": {"name": name, "parameters": {"properties": {}, "required": []}},
    }


DOCS = [
    _tool("plain", "plain"),
    _tool("off", "off", enabled=False),
    _tool("hidden-cat", "hidden_cat", category="ops"),
    _tool("shown-cat", "shown_cat", category="web"),
    _tool("tagged", "tagged", tags=["red"]),
    _tool("gh__search", "gh__search"),  # a stored tool with a server-shaped id and name
    _tool("named", "other_name"),  # id and name differ
    {"tool_id": "broken", "type": "function"},  # unreadable
]
CATEGORIES = [
    {"name": "ops", "enabled": False},
    {"name": "web", "enabled": True},
]
WANTED = [
    "plain",
    "off",
    "hidden-cat",
    "hidden_cat",
    "shown-cat",
    "shown_cat",
    "tagged",
    "gh__search",
    "named",
    "other_name",
    "broken",
    "nowhere",
    "srv__tool",
]
TOKENS = [
    None,
    ClientToken(
        "t1", "acme", {}, tool_ids=frozenset({"plain", "named"}), tags=None, expires_at=None
    ),
    ClientToken("t2", "acme", {}, tool_ids=None, tags=frozenset({"red"}), expires_at=None),
]


class _Catalog:
    def __init__(self, snapshot: ToolSnapshot) -> None:
        self.value = snapshot

    async def snapshot(self, *, tenant_id: str) -> ToolSnapshot:
        return self.value


def _toolbox() -> Toolbox:
    snapshot = ToolSnapshot.build(DOCS, category_docs=CATEGORIES)
    return Toolbox(catalog=_Catalog(snapshot), mcp=None, hub=None, secrets=None, outbound=None)  # type: ignore[arg-type]


def _reference(snapshot: ToolSnapshot, selection: Selection, token: ClientToken | None) -> Any:
    """What `_stored_tools` chose when it listed the tenant's tools to pick from them."""
    categories = snapshot.categories
    pool: list[Any] = (
        [entry.tool for entry in snapshot.entries if entry.tool is not None]
        if selection.admin
        else [
            tool
            for tool in snapshot.enabled
            if toolbox_module.category_on(tool.category, categories)
        ]
    )
    if token is not None:
        pool = [tool for tool in pool if token.selects(tool)]
    assert selection.tool_ids is not None

    def key(tool: Any) -> str:
        return str(tool.name if selection.by_name else tool.tool_id)

    known = {key(tool) for tool in pool}
    wanted: list[str] = []
    picked: dict[str, set[str]] = {}
    for tool_id in selection.tool_ids:
        server = server_of(tool_id)
        if tool_id in known or server is None:
            wanted.append(tool_id)
        else:
            picked.setdefault(server, set()).add(tool_id)
    chosen = [tool for tool in pool if key(tool) in set(wanted)]
    missing = sorted(set(wanted) - {key(tool) for tool in chosen})
    if missing and selection.admin:
        for tool_id in missing:
            entry = snapshot.by_id.get(tool_id)
            if entry is not None and entry.tool is None:
                return ("refused", "ConflictError")
    if missing:
        return ("refused", "UnavailableToolsError")
    tags = selection.tags
    if tags is not None:
        chosen = [tool for tool in chosen if not set(tags).isdisjoint(tool.tags)]
    return ([tool.tool_id for tool in chosen], picked)


async def _chosen(box: Toolbox, selection: Selection, token: ClientToken | None) -> Any:
    try:
        tools, picked, _, _ = await box._stored_tools("acme", selection, token)
    except AppError as exc:
        return ("refused", type(exc).__name__)
    return ([tool.tool_id for tool in tools], picked)


SELECTIONS = [
    *[[wanted] for wanted in WANTED],
    ["plain", "named"],
    ["named", "plain"],
    ["plain", "plain"],
    ["other_name", "named", "plain"],
    ["plain", "nowhere"],
    ["srv__tool", "plain"],
    ["srv__tool", "srv__other", "gh__search"],
    ["hidden-cat", "shown-cat"],
]


@pytest.mark.parametrize(
    ("admin", "by_name", "tags"),
    list(itertools.product([False, True], [False, True], [None, [], ["red"]])),
)
async def test_a_looked_up_selection_is_the_one_the_listing_chose(
    admin: bool, by_name: bool, tags: list[str] | None
) -> None:
    box = _toolbox()
    snapshot = ToolSnapshot.build(DOCS, category_docs=CATEGORIES)
    for tool_ids, token in itertools.product(SELECTIONS, TOKENS):
        selection = Selection(tool_ids=tool_ids, admin=admin, by_name=by_name, tags=tags)
        expected = _reference(snapshot, selection, token)
        assert await _chosen(box, selection, token) == expected, (
            tool_ids,
            token and token.token_id,
        )


async def test_the_plain_calls_choose_their_tool() -> None:
    """Not a vacuous equality: the common calls find their tool, in the tenant's order."""
    box = _toolbox()
    by_id = Selection(tool_ids=["named"], admin=True, strict=True)
    by_name = Selection(tool_ids=["other_name"], by_name=True, strict=True)
    assert await _chosen(box, by_id, None) == (["named"], {})
    assert await _chosen(box, by_name, None) == (["named"], {})
    both = Selection(tool_ids=["named", "plain"])  # listed in the tenant's order, not the ask's
    assert await _chosen(box, both, None) == (["plain", "named"], {})
    off = Selection(tool_ids=["hidden_cat"], by_name=True)
    assert await _chosen(box, off, None) == ("refused", "UnavailableToolsError")
