"""toolgate's own authorization server, request by request: connect links, consent, PKCE,
refresh rotation, revocation (of a grant, and of the client token it stands for), the access
token's resource, registration and its abuse. The SDK's client drives the whole flow in
tests/mcp/test_mcp_oauth.py."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.apps import ADMIN, TenantCredentials
from tests.support.fixtures.identity import IdentityApp
from tests.support.oauth_clients import CALLBACK, HandFlow, answer_of, connect_link

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


async def link_for(identity: IdentityApp, tenant: TenantCredentials, **body: Any) -> dict[str, Any]:
    return await connect_link(identity.http, tenant.headers, **body)


async def code_for(identity: IdentityApp) -> tuple[HandFlow, str]:
    """A registered client's authorization code, allowed with a link of acme's."""
    link = await link_for(identity, identity.acme)
    flow = HandFlow(identity.http)
    await flow.register()
    allowed = await flow.consent(await flow.sign_in(identity.resource("acme")), link["url"])
    return flow, answer_of(allowed.json()["redirect_to"]).code


async def flow_with_tokens(
    identity: IdentityApp,
) -> tuple[HandFlow, dict[str, Any], dict[str, Any]]:
    link = await link_for(identity, identity.acme)
    flow = HandFlow(identity.http)
    await flow.register()
    return flow, link, await flow.tokens(identity.resource("acme"), link["url"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_metadata(identity: IdentityApp) -> None:
    answer = await identity.http.get("/.well-known/oauth-authorization-server/oauth")
    assert answer.status_code == 200
    document = answer.json()
    base = identity.base
    assert document["issuer"] == f"{base}/oauth"
    assert document["authorization_endpoint"] == f"{base}/oauth/authorize"
    assert document["token_endpoint"] == f"{base}/oauth/token"
    assert document["registration_endpoint"] == f"{base}/oauth/register"
    assert document["revocation_endpoint"] == f"{base}/oauth/revoke"
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert document["client_id_metadata_document_supported"] is True
    assert document["authorization_response_iss_parameter_supported"] is True
    # The origin's own addresses still say there is no server for /mcp.
    assert (await identity.http.get("/.well-known/oauth-authorization-server")).status_code == 404


async def test_an_access_token_opens_its_tenants_endpoint_only(identity: IdentityApp) -> None:
    _, _, tokens = await flow_with_tokens(identity)
    access = bearer(tokens["access_token"])
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 3600
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=access)).status_code == 200
    elsewhere = await identity.http.post("/mcp/globex", json=LIST, headers=access)
    assert elsewhere.status_code == 401
    shared = await identity.http.post("/mcp", json=LIST, headers=access)
    assert shared.status_code == 401 and "for /mcp/acme only" in shared.json()["detail"]
    chat = await identity.http.post("/chat", json={"messages": []}, headers=access)
    assert chat.status_code == 401
    assert (await identity.http.get("/tools/ids", headers=access)).status_code == 403


async def test_revoking_the_client_token_ends_access_at_once(identity: IdentityApp) -> None:
    flow, link, tokens = await flow_with_tokens(identity)
    access = bearer(tokens["access_token"])
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=access)).status_code == 200
    revoked = await identity.http.delete(
        f"/client-tokens/{link['token_id']}", headers=identity.acme.headers
    )
    assert revoked.status_code == 204
    after = await identity.http.post("/mcp/acme", json=LIST, headers=access)
    assert after.status_code == 401
    assert "not valid" in after.json()["detail"] or "revoked" in after.json()["detail"]
    refreshed = await flow.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


async def test_a_key_rotation_ends_the_grants_of_the_tokens_it_revokes(
    identity: IdentityApp,
) -> None:
    """Rotating the tenant key revokes its client tokens (their records gone, no grant touched):
    the access token stands for a token that is no more."""
    flow, _, tokens = await flow_with_tokens(identity)
    assert (await identity.http.post("/tenants/acme/keys", headers=ADMIN)).status_code == 200
    after = await identity.http.post("/mcp/acme", json=LIST, headers=bearer(tokens["access_token"]))
    assert after.status_code == 401
    assert "client token was revoked" in after.json()["detail"]
    refreshed = await flow.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert refreshed.status_code == 400


@pytest.mark.all_stores
async def test_refresh_tokens_rotate_and_a_replay_ends_the_grant(identity: IdentityApp) -> None:
    flow, _, tokens = await flow_with_tokens(identity)
    first = await flow.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert first.status_code == 200, first.text
    rotated = first.json()
    assert rotated["refresh_token"] != tokens["refresh_token"]
    assert rotated["access_token"] != tokens["access_token"]
    new_access = bearer(rotated["access_token"])
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=new_access)).status_code == 200
    replay = await flow.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    # The replay may be a thief's: the whole grant ends, the rotated tokens too.
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=new_access)).status_code == 401
    again = await flow.token(grant_type="refresh_token", refresh_token=rotated["refresh_token"])
    assert again.status_code == 400


async def test_revocation_ends_the_grant(identity: IdentityApp) -> None:
    flow, _, tokens = await flow_with_tokens(identity)
    revoked = await identity.http.post(
        "/oauth/revoke",
        data={
            "token": tokens["refresh_token"],
            "client_id": flow.client_id,
            "client_secret": flow.client_secret,
        },
    )
    assert revoked.status_code == 200
    access = bearer(tokens["access_token"])
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=access)).status_code == 401


async def test_a_connect_link_works_once(identity: IdentityApp) -> None:
    flow, link, _ = await flow_with_tokens(identity)
    again = await flow.consent(await flow.sign_in(identity.resource("acme")), link["url"])
    assert again.status_code == 422
    assert "unknown, used already or expired" in again.json()["errors"][0]["message"]


async def test_a_link_of_one_tenant_for_another_tenants_endpoint(identity: IdentityApp) -> None:
    link = await link_for(identity, identity.acme)
    flow = HandFlow(identity.http)
    await flow.register()
    request_id = await flow.sign_in(identity.resource("globex"))
    refused = await flow.consent(request_id, link["url"])
    assert refused.status_code == 422
    assert "the link is for http://test/mcp/acme" in refused.json()["errors"][0]["message"]
    # The sign-in is still there: the right link allows it.
    right = await link_for(identity, identity.globex)
    assert (await flow.consent(request_id, right["url"])).status_code == 200


async def test_a_denied_sign_in_goes_back_with_access_denied(identity: IdentityApp) -> None:
    flow = HandFlow(identity.http)
    await flow.register()
    request_id = await flow.sign_in(identity.resource("acme"))
    denied = await flow.consent(request_id, "", allow=False)
    assert denied.status_code == 200
    back = parse_qs(urlsplit(denied.json()["redirect_to"]).query)
    assert back == {"error": ["access_denied"], "state": ["st-1"], "iss": ["http://test/oauth"]}
    assert (await identity.http.get(f"/oauth/requests/{request_id}")).status_code == 404


async def test_the_consent_page_reads_the_sign_in(identity: IdentityApp) -> None:
    flow = HandFlow(identity.http)
    await flow.register(client_name="Claude")
    request_id = await flow.sign_in(identity.resource("acme"))
    shown = (await identity.http.get(f"/oauth/requests/{request_id}")).json()
    assert shown["client_name"] == "Claude"
    assert shown["redirect_host"] == "127.0.0.1:9"
    assert shown["resource"] == "http://test/mcp/acme"
    for unknown in ("tgoq_nope", "x" * 128):
        assert (await identity.http.get(f"/oauth/requests/{unknown}")).status_code == 404
    assert (await identity.http.get(f"/oauth/requests/{'x' * 200}")).status_code == 422


async def test_pkce_is_required_and_checked(identity: IdentityApp) -> None:
    link = await link_for(identity, identity.acme)
    flow = HandFlow(identity.http)
    await flow.register()
    for params in ({"code_challenge_method": "plain"}, {"code_challenge": ""}):
        query = {
            "response_type": "code",
            "client_id": flow.client_id,
            "redirect_uri": CALLBACK,
            "code_challenge": "x" * 43,
            "state": "s",
            **params,
        }
        if not query["code_challenge"]:
            del query["code_challenge"]
        sent = await identity.http.get("/oauth/authorize", params=query, follow_redirects=False)
        assert sent.status_code == 302 and "error=invalid_request" in sent.headers["location"]
    allowed = await flow.consent(await flow.sign_in(identity.resource("acme")), link["url"])
    code = answer_of(allowed.json()["redirect_to"]).code
    wrong = await flow.token(
        grant_type="authorization_code", code=code, redirect_uri=CALLBACK, code_verifier="x" * 43
    )
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"


async def test_a_code_is_used_once(identity: IdentityApp) -> None:
    flow, code = await code_for(identity)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK}
    first = await flow.token(**form, code_verifier=flow.verifier)
    assert first.status_code == 200
    second = await flow.token(**form, code_verifier=flow.verifier)
    assert second.status_code == 400 and second.json()["error"] == "invalid_grant"


async def test_another_clients_code_is_not_exchanged(identity: IdentityApp) -> None:
    flow, code = await code_for(identity)
    thief = HandFlow(identity.http)
    await thief.register()
    stolen = await thief.token(
        grant_type="authorization_code",
        code=code,
        redirect_uri=CALLBACK,
        code_verifier=flow.verifier,
    )
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"


async def test_a_connect_link_is_the_tenants_own(identity: IdentityApp) -> None:
    created = await identity.http.post(
        "/client-tokens", json={"name": "a"}, headers=identity.acme.headers
    )
    token_id = created.json()["token_id"]
    theirs = await identity.http.post(
        f"/client-tokens/{token_id}/connect-link", headers=identity.globex.headers
    )
    assert theirs.status_code == 404
    bad = await identity.http.post(
        "/client-tokens/ct_nope/connect-link", headers=identity.acme.headers
    )
    assert bad.status_code == 422
    by_token = await identity.http.post(
        f"/client-tokens/{token_id}/connect-link", headers=bearer(created.json()["token"])
    )
    assert by_token.status_code == 403


@pytest.mark.all_stores
async def test_a_tenant_deleted_takes_its_grants(identity: IdentityApp) -> None:
    _, _, tokens = await flow_with_tokens(identity)
    assert (await identity.http.delete("/tenants/acme", headers=ADMIN)).status_code == 204
    access = bearer(tokens["access_token"])
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=access)).status_code == 401
    grants = identity.app.state.services.database.collection("oauth_grants")
    assert await grants.count_documents({"tenant_id": "acme"}) == 0


async def test_registration_is_bounded(identity: IdentityApp) -> None:
    big = {"client_name": "x" * 20_000, "redirect_uris": [CALLBACK]}
    answer = await identity.http.post("/oauth/register", json=big)
    assert answer.status_code == 400 and "larger than" in answer.json()["error_description"]
    for junk in (b"not json", b"[]", b'{"redirect_uris": "nope"}', b'{"redirect_uris": []}'):
        refused = await identity.http.post(
            "/oauth/register", content=junk, headers={"Content-Type": "application/json"}
        )
        assert refused.status_code == 400, junk
    private = await identity.http.post(
        "/oauth/register",
        json={"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "private_key_jwt"},
    )
    assert private.status_code == 400


@pytest.mark.settings(oauth_rate_limit_per_minute=5)
async def test_anonymous_requests_are_limited_per_client_address(identity: IdentityApp) -> None:
    answers = []
    for _ in range(7):
        body = {"client_name": "flood", "redirect_uris": [CALLBACK]}
        answers.append((await identity.http.post("/oauth/register", json=body)).status_code)
    assert answers[:5] == [201] * 5 and answers[5:] == [429, 429]
    limited = await identity.http.post("/oauth/register", json={"redirect_uris": [CALLBACK]})
    assert "this client address" in limited.json()["detail"]
    assert "Retry-After" in limited.headers


@pytest.mark.parametrize(
    "decision",
    [
        {"request": "tgoq_x", "link": "tgl_" + "a" * 5000, "allow": True},  # oversized
        {"request": "x" * 500, "link": "", "allow": False},
        {"request": "tgoq_x", "link": "", "allow": "yes"},  # type-confused
        {"request": {"nested": {"deep": ["tgoq_x"]}}, "link": "", "allow": True},
        {"request": "tgoq_x", "allow": True, "tenant_id": "globex"},  # no tenant selector
        {"link": "tgl_x", "allow": True},
        [],
    ],
)
async def test_bad_consent_decisions_are_422(identity: IdentityApp, decision: Any) -> None:
    answer = await identity.http.post("/oauth/consent", json=decision)
    assert answer.status_code == 422, answer.text


async def test_a_consent_for_no_sign_in_is_404(identity: IdentityApp) -> None:
    link = await link_for(identity, identity.acme)
    for request_id in ("tgoq_" + "a" * 43, "anything"):
        answer = await identity.http.post(
            "/oauth/consent", json={"request": request_id, "link": link["url"], "allow": True}
        )
        assert answer.status_code == 404
        assert "start again from your MCP client" in answer.json()["detail"]
    # The link was not spent by those.
    flow = HandFlow(identity.http)
    await flow.register()
    assert (await flow.consent(await flow.sign_in(None), link["url"])).status_code == 200


@pytest.mark.parametrize(
    "form",
    [
        {},
        {"grant_type": "password", "username": "a", "password": "b"},
        {"grant_type": "authorization_code", "code": "tgoc_x"},
        {"grant_type": "refresh_token", "refresh_token": "x" * 10_000},
        {"grant_type": "client_credentials"},
    ],
)
async def test_bad_token_requests_are_oauth_errors(
    identity: IdentityApp, form: dict[str, str]
) -> None:
    flow = HandFlow(identity.http)
    await flow.register()
    answer = await flow.token(**form)
    assert answer.status_code in (400, 401), answer.text
    assert answer.json()["error"] in (
        "invalid_request",
        "unsupported_grant_type",
        "invalid_grant",
        "invalid_client",
    )


async def test_a_sign_in_without_a_resource_takes_the_links_tenant(identity: IdentityApp) -> None:
    """Clients that send no RFC 8707 resource are bound to the link's tenant's endpoint."""
    link = await link_for(identity, identity.globex)
    flow = HandFlow(identity.http)
    await flow.register()
    tokens = await flow.tokens(None, link["url"])
    access = bearer(tokens["access_token"])
    assert (await identity.http.post("/mcp/globex", json=LIST, headers=access)).status_code == 200
    assert (await identity.http.post("/mcp/acme", json=LIST, headers=access)).status_code == 401


async def test_a_sign_in_for_something_else_than_an_mcp_endpoint(identity: IdentityApp) -> None:
    flow = HandFlow(identity.http)
    await flow.register()
    query = {
        "response_type": "code",
        "client_id": flow.client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": "x" * 43,
        "state": "s",
        "resource": "https://elsewhere.example/api",
    }
    sent = await identity.http.get("/oauth/authorize", params=query, follow_redirects=False)
    assert sent.status_code == 302 and "error=invalid_target" in sent.headers["location"]
