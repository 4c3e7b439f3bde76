"""A one-tool selection is looked up (`_one_tool`) rather than searched for: it must choose what
the general path chooses, for every kind of selection, or leave the decision to it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app.errors import AppError
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


async def _chosen(box: Toolbox, selection: Selection, token: ClientToken | None) -> Any:
    try:
        tools, picked, _ = await box._stored_tools("acme", selection, token)
    except AppError as exc:
        return ("refused", type(exc).__name__, exc.message)
    return ([tool.tool_id for tool in tools], picked)


@pytest.mark.parametrize(
    ("admin", "by_name", "tags"),
    list(itertools.product([False, True], [False, True], [None, [], ["red"]])),
)
async def test_a_looked_up_tool_is_the_one_the_search_finds(
    monkeypatch: pytest.MonkeyPatch, admin: bool, by_name: bool, tags: list[str] | None
) -> None:
    box = _toolbox()
    for wanted, token in itertools.product(WANTED, TOKENS):
        selection = Selection(tool_ids=[wanted], admin=admin, by_name=by_name, tags=tags)
        fast = await _chosen(box, selection, token)
        with monkeypatch.context() as patched:
            patched.setattr(toolbox_module, "_one_tool", lambda *_: None)
            searched = await _chosen(box, selection, token)
        assert fast == searched, (wanted, token and token.token_id)


async def test_the_lookup_answers_the_common_calls_itself() -> None:
    """Not a vacuous equality: the plain cases do not fall through to the search."""
    snapshot = ToolSnapshot.build(DOCS, category_docs=CATEGORIES)
    by_id = Selection(tool_ids=["named"], admin=True, strict=True)
    by_name = Selection(tool_ids=["other_name"], by_name=True, strict=True)
    assert [t.tool_id for t in toolbox_module._one_tool(snapshot, by_id, None) or []] == ["named"]
    assert [t.tool_id for t in toolbox_module._one_tool(snapshot, by_name, None) or []] == ["named"]
    off = Selection(tool_ids=["hidden_cat"], by_name=True)
    assert toolbox_module._one_tool(snapshot, off, None) is None  # category off: the search says
