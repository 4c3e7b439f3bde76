"""Tenants' own model providers: CRUD, chats through them, and what nobody else may reach."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.support import fake_apis, functions
from tests.support import fake_model as script
from tests.support.apps import (
    ADMIN,
    TenantCredentials,
    create_tenant,
    http_client,
    make_settings,
    running_app,
)
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.logs import JsonLines
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded

TENANT_KEY = "sk-ant-tenant-acme-5c1e0f9a77d2b4"
OPERATOR_KEY = "sk-operator-key"


@pytest.fixture
async def chat(
    request: pytest.FixtureRequest,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> AsyncIterator[ChatClient]:
    """acme on an app whose operator model (chat completions) and acme's providers are the
    fake; 127.0.0.1 is open to tenants only through their own allow list."""
    marker = request.node.get_closest_marker("settings")
    overrides: dict[str, Any] = {
        "openai_base_url": f"{fake_model_server[1].url}/v1",
        "openai_api_key": OPERATOR_KEY,
        "model_timeout_s": 5.0,
        "model_max_retries": 0,
        **(marker.kwargs if marker else {}),
    }
    settings = make_settings(None, **overrides)
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        acme = await create_tenant(http, "acme")
        await allow_loopback(http, "acme")
        await http.put("/secrets/model-key", json={"value": TENANT_KEY}, headers=acme.headers)
        yield ChatClient(app, http, acme)


async def allow_loopback(http: Any, tenant_id: str, allow: bool = True) -> None:
    response = await http.put(
        f"/tenants/{tenant_id}/outbound",
        json={"allow": ["127.0.0.1"] if allow else [], "force": True},
        headers=ADMIN,
    )
    assert response.status_code == 200, response.text


def provider(fake_url: str, **overrides: Any) -> dict[str, Any]:
    return {
        "api": "anthropic_messages",
        "base_url": f"{fake_url}/v1",
        "api_key_secret": "model-key",
        "default_model": "claude-test",
        "allowed_models": ["claude-other"],
        "max_retries": 0,
        **overrides,
    }


async def put(
    chat: ChatClient, name: str, body: dict[str, Any], who: TenantCredentials | None = None
) -> Any:
    headers = (who or chat.tenant).headers
    return await chat.http.put(f"/model-providers/{name}", json=body, headers=headers)


def sent_with(fake: FakeModel, index: int) -> str:
    return fake.raw_requests[index].decode(errors="replace")


async def test_crud_never_shows_the_key(
    chat: ChatClient, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    url = fake_model_server[1].url
    created = await put(chat, "claude", provider(url, default=True))
    assert created.status_code == 201, created.text
    shown = created.json()
    assert shown["api_key_secret"] == "model-key" and shown["default"] is True
    assert shown["allowed_models"] == ["claude-test", "claude-other"]
    replaced = await put(chat, "claude", provider(url, default_model="claude-other"))
    assert replaced.status_code == 200 and replaced.json()["allowed_models"] == ["claude-other"]
    listed = await chat.http.get("/model-providers", headers=chat.tenant.headers)
    assert [p["name"] for p in listed.json()] == ["claude"]
    one = await chat.http.get("/model-providers/claude", headers=chat.tenant.headers)
    assert one.json()["default_model"] == "claude-other"
    for response in (created, replaced, listed, one):
        assert TENANT_KEY not in response.text
    deleted = await chat.http.delete("/model-providers/claude", headers=chat.tenant.headers)
    assert deleted.status_code == 204
    gone = await chat.http.get("/model-providers/claude", headers=chat.tenant.headers)
    assert gone.status_code == 404


async def test_a_tenant_chats_through_its_provider_while_another_uses_the_operators(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url, default=True))).is_success
    globex = await create_tenant(chat.http, "globex")
    steps = fake_apis.steps("anthropic_messages")
    fake.reset(steps.tool_calls(("add", {"a": 1, "b": 2})), steps.text("3"), script.text("hi"))
    mine = await chat.chat(model="claude-other")
    assert mine.status_code == 200, mine.text
    assert mine.json()["message"]["content"] == "3"
    theirs = await chat.http.post(
        "/chat", json={"messages": [{"role": "user", "content": "hi"}]}, headers=globex.headers
    )
    assert theirs.status_code == 200 and theirs.json()["message"]["content"] == "hi"
    # acme's two calls went to the Messages API with its own key; globex's with the operator's.
    assert fake.requests[0]["model"] == "claude-other" and "max_tokens" in fake.requests[0]
    assert TENANT_KEY in sent_with(fake, 0) and TENANT_KEY in sent_with(fake, 1)
    assert OPERATOR_KEY in sent_with(fake, 2) and TENANT_KEY not in sent_with(fake, 2)
    assert fake.requests[2]["model"] == "gpt-4o-mini" and "messages" in fake.requests[2]
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert (record["provider"], record["model"]) == ("claude", "claude-other")
    [other] = await runs_recorded(chat.http, globex.headers, 1)
    assert (other.get("provider"), other["model"]) == (None, "gpt-4o-mini")


async def test_another_tenant_can_neither_read_nor_use_a_provider(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url))).is_success
    globex = await create_tenant(chat.http, "globex")
    await allow_loopback(chat.http, "globex")
    read = await chat.http.get("/model-providers/claude", headers=globex.headers)
    assert read.status_code == 404
    listed = await chat.http.get("/model-providers", headers=globex.headers)
    assert listed.json() == []
    deleted = await chat.http.delete("/model-providers/claude", headers=globex.headers)
    assert deleted.status_code == 404
    used = await chat.http.post(
        "/chat",
        json={"messages": [{"role": "user", "content": "hi"}], "provider": "claude"},
        headers=globex.headers,
    )
    assert used.status_code == 422 and used.json()["errors"][0]["path"] == "$.provider"
    # acme's secret is not globex's: naming it registers nothing.
    borrowed = await put(chat, "claude", provider(fake_model_server[1].url), who=globex)
    assert borrowed.status_code == 422
    assert borrowed.json()["errors"][0]["path"] == "$.api_key_secret"
    assert fake.requests == []


async def test_chats_name_only_allowed_models_and_existing_providers(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url))).is_success
    refused = await chat.chat(provider="claude", model="gpt-5")
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "$.model"
    unknown = await chat.chat(provider="nope")
    assert unknown.status_code == 422 and "nope" in unknown.text
    await chat.http.delete("/secrets/model-key", headers=chat.tenant.headers)
    keyless = await chat.chat(provider="claude")
    assert keyless.status_code == 422 and "model-key" in keyless.text
    assert fake.requests == []


async def test_the_key_never_reaches_an_answer_a_record_or_a_log(
    chat: ChatClient,
    fake: FakeModel,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    json_logs: JsonLines,
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url))).is_success
    echoed = {"type": "error", "error": {"type": "invalid", "message": f"bad key {TENANT_KEY}"}}
    fake.reset(lambda request: script.Reply(400, orjson.dumps(echoed)))
    response = await chat.chat(provider="claude")
    assert response.status_code == 502 and TENANT_KEY not in response.text
    assert "bad key [redacted]" in response.json()["detail"]
    fake.reset(fake_apis.error("anthropic_messages", 401))
    rejected = await chat.chat(provider="claude")
    assert "secret 'model-key' of model provider 'claude'" in rejected.json()["detail"]
    records = await runs_recorded(chat.http, chat.tenant.headers, 2)
    assert all(TENANT_KEY not in str(record) for record in records)
    assert not [line for line in json_logs.lines if TENANT_KEY in line]


async def test_base_urls_the_tenants_policy_refuses_are_422(
    chat: ChatClient, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    globex = await create_tenant(chat.http, "globex")  # no allow list: public hosts only
    await chat.http.put("/secrets/model-key", json={"value": "k"}, headers=globex.headers)
    for url in (
        fake_model_server[1].url,
        "http://169.254.169.254/latest",
        "http://localhost:8080/v1",
        "http://[::1]/v1",
        "http://2130706433/v1",
        "file:///etc/passwd",
    ):
        response = await put(chat, "p", provider(url), who=globex)
        assert response.status_code == 422, (url, response.text)
        assert response.json()["errors"][0]["path"] == "$.base_url"


async def test_the_policy_is_checked_again_at_every_connection(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url))).is_success
    await allow_loopback(chat.http, "acme", allow=False)  # the operator closes loopback again
    fake.reset(fake_apis.steps("anthropic_messages").text("should not be asked"))
    response = await chat.chat(provider="claude")
    assert response.status_code == 502 and "Cannot reach" in response.json()["detail"]
    assert fake.requests == []


@pytest.mark.slow  # 2 s or more in the inner loop
@pytest.mark.settings(openai_base_url=None, openai_api_key=None)
async def test_without_an_operator_model_a_provider_still_chats(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await chat.chat()).status_code == 503
    body = provider(fake_model_server[1].url, api="responses", default=True)
    assert (await put(chat, "openai", body)).is_success
    fake.reset(fake_apis.steps("responses").text("hello"))
    response = await chat.chat()
    assert response.status_code == 200 and response.json()["message"]["content"] == "hello"
    assert "input" in fake.requests[0]


ABUSE = [
    pytest.param({"base_url": "http://a/" + "x" * 3000}, id="oversized-url"),
    pytest.param({"api": 5}, id="type-confused-api"),
    pytest.param({"api": "gemini"}, id="unknown-api"),
    pytest.param({"allowed_models": ["m"] * 65}, id="too-many-models"),
    pytest.param({"default_model": {"a": [[[]]]}}, id="nested-model"),
    pytest.param({"api_key_secret": "../other"}, id="bad-secret-name"),
    pytest.param({"timeout_s": 1e9}, id="huge-timeout"),
    pytest.param({"api_key": "sk-inline"}, id="inline-key"),
]


@pytest.mark.parametrize("change", ABUSE)
async def test_malformed_providers_are_422(
    chat: ChatClient, fake_model_server: tuple[FakeModel, ThreadedServer], change: dict[str, Any]
) -> None:
    response = await put(chat, "p", {**provider(fake_model_server[1].url), **change})
    assert response.status_code == 422, response.text
    assert "sk-inline" not in response.text


async def test_bad_provider_names_in_paths_and_chats_are_422(chat: ChatClient) -> None:
    response = await chat.http.get("/model-providers/" + "x" * 65, headers=chat.tenant.headers)
    assert response.status_code == 422
    assert (await chat.chat(provider={"a": 1})).status_code == 422
    assert (await chat.chat(provider="../x")).status_code == 422


async def test_a_client_token_limited_to_providers_and_models(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url))).is_success
    issued = await chat.http.post(
        "/client-tokens",
        json={"name": "widget", "providers": ["claude"], "models": ["claude-test"]},
        headers=chat.tenant.headers,
    )
    assert issued.status_code == 201, issued.text
    shown = issued.json()
    assert (shown["providers"], shown["models"]) == (["claude"], ["claude-test"])
    token = {"Authorization": f"Bearer {shown['token']}"}
    hello = [{"role": "user", "content": "hi"}]
    fake.reset(fake_apis.steps("anthropic_messages").text("hello"))
    allowed = await chat.http.post(
        "/chat", json={"messages": hello, "provider": "claude"}, headers=token
    )
    assert allowed.status_code == 200, allowed.text
    for body, says in (
        ({"messages": hello}, "the operator's model"),
        ({"messages": hello, "provider": "claude", "model": "claude-other"}, "claude-other"),
    ):
        refused = await chat.http.post("/chat", json=body, headers=token)
        assert refused.status_code == 403 and says in refused.json()["detail"]
    assert len(fake.requests) == 1


async def test_deleting_a_tenant_deletes_its_providers(
    chat: ChatClient, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    assert (await put(chat, "claude", provider(fake_model_server[1].url))).is_success
    assert (await chat.http.delete("/tenants/acme", headers=ADMIN)).status_code == 204
    again = await create_tenant(chat.http, "acme")
    listed = await chat.http.get("/model-providers", headers=again.headers)
    assert listed.status_code == 200 and listed.json() == []


async def test_an_international_host_name_goes_on_the_wire_as_ascii(chat: ChatClient) -> None:
    from app.http.wire import WirePool

    assert WirePool("https://bücher.example/v1/messages").host_header == "xn--bcher-kva.example"
    body = provider("https://bücher.example", max_retries=0)
    assert (await put(chat, "idn", body)).status_code == 201


INJECTING_KEY = "sk-ant-x\r\nX-Injected: 1\r\n\r\nPOST /v1/messages HTTP/1.1"


@pytest.mark.parametrize("api", ["anthropic_messages", "chat_completions", "responses"])
async def test_a_key_a_header_cannot_carry_is_refused_on_every_path(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer], api: str
) -> None:
    """A secret with CR/LF used as a provider's key: 422 naming the secret when the provider is
    written, and, once the secret is changed under a provider, on every chat (whole and
    streamed) before anything is sent: the model server never sees the extra header."""
    url = fake_model_server[1].url
    headers = chat.tenant.headers
    await chat.http.put("/secrets/bad-key", json={"value": INJECTING_KEY}, headers=headers)
    refused = await put(chat, "p", provider(url, api=api, api_key_secret="bad-key"))
    assert refused.status_code == 422, refused.text
    assert "secret 'bad-key' holds a character a header cannot carry" in refused.text
    assert (await put(chat, "p", provider(url, api=api, default=True))).status_code == 201
    await chat.http.put("/secrets/model-key", json={"value": INJECTING_KEY}, headers=headers)
    fake.reset(script.text("never"))
    for stream in (False, True):
        answered = await chat.chat(stream=stream)
        assert answered.status_code == 422, answered.text
        assert "secret 'model-key' holds a character a header cannot carry" in answered.text
        assert "X-Injected" not in answered.text
    assert fake.raw_requests == []


async def test_a_header_rule_guards_the_wire_itself(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    """Whatever builds a request, its head is checked where it is written: a model client
    with such a key cannot be made, and a pool sends nothing with such a header."""
    from app.chat.http_model_client import HTTPModelClient
    from app.config import Settings
    from app.http.wire import HeaderError, WirePool

    url = fake_model_server[1].url
    with pytest.raises(HeaderError, match="control character"):
        HTTPModelClient(base_url=url, api_key=INJECTING_KEY, timeout_s=1, max_retries=0)
    with pytest.raises(ValueError, match="openai_api_key"):
        Settings(openai_api_key=INJECTING_KEY)
    pool = WirePool(f"{url}/v1/chat/completions")
    fake.reset(script.text("never"))
    for name, value in (("X-Key", "a\r\nX-Injected: 1"), ("X-Key", "a\nb"), ("X Key", "a")):
        with pytest.raises(HeaderError):
            await pool.post(b"{}", {name: value})
    await pool.close()
    assert fake.raw_requests == []
