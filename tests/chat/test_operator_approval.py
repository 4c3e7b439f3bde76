"""Approvals a tenant can see and that its operators decide: `GET /approvals` lists the calls
waiting for a person (the tenant key: all of them; a client token: its own), and a tool or
category with `approval: "operator"` waits for the tenant key's decision
(`POST /approvals/{approval_id}/decisions`), never the end user's whose chat stopped. `/mcp`
serves the same setting as hints (`destructiveHint`, `readOnlyHint`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.test_approval import _deleter, _deletes
from tests.support import fake_model as script
from tests.support.apps import ADMIN, create_tenant
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED


async def _token(chat: ChatClient, name: str) -> dict[str, str]:
    made = await chat.http.post("/client-tokens", json={"name": name}, headers=chat.tenant.headers)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


async def _stop(chat: ChatClient, fake: FakeModel, headers: dict[str, str]) -> dict[str, Any]:
    fake.reset(script.tool_calls(("delete_everything", {"scope": "tmp"})), repeat=script.text("ok"))
    hello = {"messages": [{"role": "user", "content": "clean up"}]}
    response = await chat.http.post("/chat", json=hello, headers=headers)
    assert response.status_code == 200, response.text
    answer = dict(response.json())
    assert answer["stop_reason"] == "approval_required", answer
    return answer


async def _waiting(chat: ChatClient, headers: dict[str, str], **query: Any) -> dict[str, Any]:
    listed = await chat.http.get("/approvals", params=query, headers=headers)
    assert listed.status_code == 200, listed.text
    return dict(listed.json())


async def _decide(
    chat: ChatClient, approval_id: str, headers: dict[str, str], *decisions: dict[str, Any]
) -> Any:
    return await chat.http.post(
        f"/approvals/{approval_id}/decisions", json={"decisions": list(decisions)}, headers=headers
    )


async def test_approvals_lists_what_waits_the_tenant_all_a_token_its_own(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(_deleter(upstream))
    alice, bob = await _token(chat, "alice"), await _token(chat, "bob")
    stops = {
        who: await _stop(chat, fake, headers)
        for who, headers in (("alice", alice), ("bob", bob), ("key", chat.tenant.headers))
    }
    everything = await _waiting(chat, chat.tenant.headers)
    assert len(everything["items"]) == 3 and everything["next_offset"] is None
    item = next(i for i in everything["items"] if i["holder"] is None)
    [call] = item["calls"]
    pending = stops["key"]["pending_approvals"][0]
    assert call == {**pending, "decided_by": "caller", "decision": None}
    assert set(item) == {"approval_id", "holder", "calls", "held_at", "expires_at"}
    assert [i["calls"][0]["id"] for i in (await _waiting(chat, alice))["items"]] == [
        stops["alice"]["pending_approvals"][0]["id"]
    ]
    assert len((await _waiting(chat, bob))["items"]) == 1
    first = await _waiting(chat, chat.tenant.headers, limit=2)
    rest = await _waiting(chat, chat.tenant.headers, limit=2, offset=first["next_offset"])
    assert len(first["items"]) == 2 and len(rest["items"]) == 1
    ids = [i["approval_id"] for i in [*first["items"], *rest["items"]]]
    assert sorted(ids) == sorted(i["approval_id"] for i in everything["items"])

    # Decided, it is no longer listed.
    yes = {"call_id": stops["alice"]["pending_approvals"][0]["id"], "approved": True}
    body = {"messages": stops["alice"]["messages"], "approvals": [yes]}
    done = await chat.http.post("/chat", json=body, headers=alice)
    assert done.status_code == 200 and done.json()["stop_reason"] == "completed", done.text
    assert (await _waiting(chat, alice))["items"] == []
    assert len((await _waiting(chat, chat.tenant.headers))["items"]) == 2


async def test_an_operator_decides_what_an_end_user_cannot(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    """Issue 43: an end user's token approved its own risky call. With `approval:
    "operator"`, only the tenant key decides; the end user's chat then goes on."""
    await chat.add_tool(_deleter(upstream, approval="operator"))
    RECEIVED.clear()
    alice = await _token(chat, "alice")
    answer = await _stop(chat, fake, alice)
    [pending] = answer["pending_approvals"]
    assert pending["decided_by"] == "operator"
    yes = {"call_id": pending["id"], "approved": True}
    # The end user cannot decide it, neither in its continuation nor on the approvals route.
    own = await chat.http.post(
        "/chat", json={"messages": answer["messages"], "approvals": [yes]}, headers=alice
    )
    assert own.status_code == 422, own.text
    assert "an operator decides" in own.json()["errors"][0]["message"]
    early = await chat.http.post("/chat", json={"messages": answer["messages"]}, headers=alice)
    assert early.status_code == 409 and "waits for an operator" in early.text, early.text
    [item] = (await _waiting(chat, alice))["items"]
    refused = await _decide(chat, item["approval_id"], alice, yes)
    assert refused.status_code == 403, refused.text
    assert _deletes() == []

    decided = await _decide(chat, item["approval_id"], chat.tenant.headers, {**yes, "reason": "ok"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["calls"][0]["decision"] == {"approved": True, "reason": "ok"}
    again = await _decide(chat, item["approval_id"], chat.tenant.headers, yes)
    assert again.status_code == 409, again.text  # decided once

    fake.reset(script.text("deleted"))
    done = await chat.http.post("/chat", json={"messages": answer["messages"]}, headers=alice)
    assert done.status_code == 200, done.text
    assert done.json()["stop_reason"] == "completed" and len(_deletes()) == 1
    [record] = done.json()["tool_calls"]
    assert record["approval"] == {"approved": True, "reason": "ok"}
    assert (await _waiting(chat, chat.tenant.headers))["items"] == []


async def test_an_operator_refusal_reaches_the_model(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(_deleter(upstream, approval="operator"))
    RECEIVED.clear()
    alice = await _token(chat, "alice")
    answer = await _stop(chat, fake, alice)
    [item] = (await _waiting(chat, chat.tenant.headers))["items"]
    no = {"call_id": item["calls"][0]["id"], "approved": False, "reason": "not on Fridays"}
    assert (await _decide(chat, item["approval_id"], chat.tenant.headers, no)).status_code == 200
    fake.reset(script.text("understood"))
    done = await chat.http.post("/chat", json={"messages": answer["messages"]}, headers=alice)
    assert done.status_code == 200, done.text
    sent = fake.requests[0]["messages"][-1]["content"]
    assert sent == "Error: a person refused this call: not on Fridays" and _deletes() == []


async def test_a_category_may_require_the_operator(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    made = await chat.http.post(
        "/categories",
        json={"name": "danger", "approval": "operator"},
        headers=chat.tenant.headers,
    )
    assert made.status_code == 201, made.text
    assert made.json()["approval"] == "operator"
    await chat.add_tool(_deleter(upstream, category="danger"))
    alice = await _token(chat, "alice")
    assert (await _stop(chat, fake, alice))["pending_approvals"][0]["decided_by"] == "operator"
    # A tool's own setting wins over its category's.
    replaced = await chat.http.put(
        "/tools/delete-everything",
        json=_deleter(upstream, category="danger", approval="always"),
        headers=chat.tenant.headers,
    )
    assert replaced.status_code == 200, replaced.text
    assert (await _stop(chat, fake, alice))["pending_approvals"][0]["decided_by"] == "caller"


async def test_the_tenant_key_decides_its_own_chats_operator_calls(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    """The tenant key is the operator: a chat it started continues with its own decisions."""
    await chat.add_tool(_deleter(upstream, approval="operator"))
    answer = await _stop(chat, fake, chat.tenant.headers)
    [pending] = answer["pending_approvals"]
    assert pending["decided_by"] == "caller"
    yes = {"call_id": pending["id"], "approved": True}
    fake.reset(script.text("done"))
    done = await chat.chat(messages=answer["messages"], approvals=[yes])
    assert done.status_code == 200 and done.json()["stop_reason"] == "completed", done.text


async def test_another_tenant_sees_and_decides_nothing(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(_deleter(upstream, approval="operator"))
    await _stop(chat, fake, await _token(chat, "alice"))
    [item] = (await _waiting(chat, chat.tenant.headers))["items"]
    globex = await create_tenant(chat.http, "globex")
    assert (await _waiting(chat, globex.headers))["items"] == []
    yes = {"call_id": item["calls"][0]["id"], "approved": True}
    stolen = await _decide(chat, item["approval_id"], globex.headers, yes)
    assert stolen.status_code == 404, stolen.text
    [still] = (await _waiting(chat, chat.tenant.headers))["items"]
    assert still["calls"][0]["decision"] is None


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/approvals/nope", {"decisions": [{"call_id": "x", "approved": True}]}, 422),
        ("/approvals/{id}", {"decisions": []}, 422),
        ("/approvals/{id}", {"decisions": [{"call_id": "x", "approved": "yes"}]}, 422),
        ("/approvals/{id}", {"decisions": [{"call_id": "x", "approved": True}] * 300}, 422),
        ("/approvals/{id}", {"decisions": [{"call_id": "x" * 300, "approved": True}]}, 422),
        ("/approvals/{id}", {"decisions": [{"call_id": "ghost", "approved": True}]}, 422),
        ("/approvals/{id}", {"decisions": [{"call_id": "{call}", "approved": True}] * 2}, 422),
        (
            "/approvals/{id}",
            {"decisions": [{"call_id": "{call}", "approved": True, "reason": "r" * 3000}]},
            422,
        ),
        ("/approvals/{id}", {"decisions": [{"call_id": "{call}", "approved": True}], "x": 1}, 422),
        ("/approvals/{id}", [1, 2], 422),
        ("/approvals/" + "0" * 32, {"decisions": [{"call_id": "x", "approved": True}]}, 404),
    ],
)
async def test_bad_decisions_are_4xx_and_decide_nothing(
    chat: ChatClient,
    fake: FakeModel,
    upstream: ThreadedServer,
    path: str,
    body: Any,
    status: int,
) -> None:
    await chat.add_tool(_deleter(upstream, approval="operator"))
    await _stop(chat, fake, await _token(chat, "alice"))
    [item] = (await _waiting(chat, chat.tenant.headers))["items"]
    call_id = item["calls"][0]["id"]
    filled = path.replace("{id}", item["approval_id"]) + "/decisions"
    if isinstance(body, dict):
        body = {
            **body,
            "decisions": [
                {**d, "call_id": d["call_id"].replace("{call}", call_id)}
                for d in body.get("decisions", [])
            ],
        }
    response = await chat.http.post(filled, json=body, headers=chat.tenant.headers)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    [still] = (await _waiting(chat, chat.tenant.headers))["items"]
    assert still["calls"][0]["decision"] is None


@pytest.mark.parametrize("query", [{"limit": 0}, {"limit": 501}, {"offset": -1}, {"limit": "x"}])
async def test_bad_listing_queries_are_422(chat: ChatClient, query: dict[str, Any]) -> None:
    listed = await chat.http.get("/approvals", params=query, headers=chat.tenant.headers)
    assert listed.status_code == 422, listed.text


# --- `/mcp` hints: a client asks its user where a chat would ask a person -------------------

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


async def _served(chat: ChatClient, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    listed = await chat.http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**headers, **MCP_HEADERS},
    )
    assert listed.status_code == 200, listed.text
    return {t["name"]: t.get("annotations") or {} for t in listed.json()["result"]["tools"]}


async def test_hints_come_from_the_method_and_the_approval_setting(chat: ChatClient) -> None:
    """Issue 43: `/mcp` listed DELETE and approval-required tools without `destructiveHint`."""
    made = await chat.http.post(
        "/categories",
        json={"name": "guarded", "approval": "operator"},
        headers=chat.tenant.headers,
    )
    assert made.status_code == 201, made.text
    url = "https://api.example.com/things"
    tools = [
        external("read-things", url, "GET", properties={}),
        external("drop-things", url, "DELETE", properties={}),
        external("add-thing", url, "POST", properties={}),
        external("read-secrets", url, "GET", properties={}, approval="always"),
        external("read-guarded", url, "GET", properties={}, category="guarded"),
        external("read-freely", url, "GET", properties={}, category="guarded", approval="never"),
        external("own-hints", url, "POST", properties={}, annotations={"destructive_hint": False}),
    ]
    for tool in tools:
        await chat.add_tool(tool)
    served = await _served(chat, chat.tenant.headers)
    assert served["read_things"] == {"readOnlyHint": True}
    assert served["drop_things"] == {"readOnlyHint": False, "destructiveHint": True}
    assert served["add_thing"] == {"readOnlyHint": False}
    assert served["read_secrets"] == {"readOnlyHint": False, "destructiveHint": True}
    assert served["read_guarded"] == {"readOnlyHint": False, "destructiveHint": True}
    assert served["read_freely"] == {"readOnlyHint": True}
    assert served["own_hints"] == {"readOnlyHint": False, "destructiveHint": False}

    # Another tenant's settings change nothing here, and its own tools get their own hints.
    globex = await chat.http.post("/tenants", json={"tenant_id": "globex"}, headers=ADMIN)
    assert globex.status_code == 201, globex.text
    other = {"Authorization": f"Bearer {globex.json()['api_key']}"}
    created = await chat.http.post(
        "/tools/create", json=external("read-guarded", url, "GET", properties={}), headers=other
    )
    assert created.status_code == 201, created.text
    assert (await _served(chat, other))["read_guarded"] == {"readOnlyHint": True}
