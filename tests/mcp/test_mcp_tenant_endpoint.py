"""`/mcp/{tenant_id}`: the same MCP server with the tenant fixed by the path. Its 401 names the
tenant's RFC 9728 metadata, which names the tenant's authorization server; a credential of
another tenant is a 401; the URLs follow what a trusted proxy forwarded, and only then."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import functions
from tests.support.fixtures.identity import IdentityApp
from tests.support.issuer import Issuer

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
CLAIMS = {"user_id": "sub", "api_token": "tok"}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def client_token(identity: IdentityApp, tenant: Any, **body: Any) -> str:
    created = await identity.http.post(
        "/client-tokens", json={"name": "alice", **body}, headers=tenant.headers
    )
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


async def test_an_unauthenticated_request_leads_to_the_tenants_metadata(
    identity: IdentityApp,
) -> None:
    answer = await identity.http.post("/mcp/acme", json=LIST)
    assert answer.status_code == 401
    metadata = f"{identity.base}/.well-known/oauth-protected-resource/mcp/acme"
    assert answer.headers["www-authenticate"] == (
        f'Bearer realm="toolgate", resource_metadata="{metadata}"'
    )
    document = (await identity.http.get(metadata)).json()
    assert document["resource"] == f"{identity.base}/mcp/acme"
    # No identity provider: toolgate's own authorization server.
    assert document["authorization_servers"] == [f"{identity.base}/oauth"]
    assert document["bearer_methods_supported"] == ["header"]


async def test_the_metadata_names_the_tenants_issuer(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    url = f"{identity.base}/.well-known/oauth-protected-resource/mcp/acme"
    assert (await identity.http.get(url)).json()["authorization_servers"] == [issuer.issuer]
    other = f"{identity.base}/.well-known/oauth-protected-resource/mcp/globex"
    assert (await identity.http.get(other)).json()["authorization_servers"] == [
        f"{identity.base}/oauth"
    ]
    assert (
        await identity.http.delete("/identity", headers=identity.acme.headers)
    ).status_code == 204
    assert (await identity.http.get(url)).json()["authorization_servers"] == [
        f"{identity.base}/oauth"
    ]


async def test_a_jwt_lists_and_calls_with_its_claims_bound(
    identity: IdentityApp, issuer: Issuer
) -> None:
    await identity.trust(issuer, identity.acme, claims=CLAIMS)
    token = issuer.token(identity.resource("acme"), tok="from-the-idp")
    listed = await identity.http.post("/mcp/acme", json=LIST, headers=bearer(token))
    assert listed.status_code == 200, listed.text
    tools = {tool["name"]: tool for tool in listed.json()["result"]["tools"]}
    assert "get_profile" in tools
    assert "user_id" not in tools["get_profile"]["inputSchema"].get("properties", {})
    called = await identity.http.post(
        "/mcp/acme",
        json=call("get_profile", {"field": "email", "user_id": "mallory"}),
        headers=bearer(token),
    )
    assert called.status_code == 200, called.text
    assert functions.RECEIVED[-1] == {
        "user_id": "u-42",
        "api_token": "from-the-idp",
        "field": "email",
    }
    # The same token on /mcp (the tenant from its issuer and audience) works the same.
    shared = await identity.http.post("/mcp", json=LIST, headers=bearer(token))
    assert shared.status_code == 200, shared.text


async def test_a_token_of_tenant_a_on_tenant_bs_endpoint(
    identity: IdentityApp, issuer: Issuer
) -> None:
    """Every kind of credential of acme is a 401 on /mcp/globex, naming globex's metadata."""
    await identity.trust(issuer, identity.acme)
    await identity.trust(issuer, identity.globex)
    credentials = {
        "tenant key": identity.acme.api_key,
        "client token": await client_token(identity, identity.acme),
        "jwt": issuer.token(identity.resource("acme")),
    }
    for kind, credential in credentials.items():
        mine = await identity.http.post("/mcp/acme", json=LIST, headers=bearer(credential))
        assert mine.status_code == 200, (kind, mine.text)
        theirs = await identity.http.post("/mcp/globex", json=LIST, headers=bearer(credential))
        assert theirs.status_code == 401, (kind, theirs.text)
        assert "/oauth-protected-resource/mcp/globex" in theirs.headers["www-authenticate"]
        detail = theirs.json()["detail"]
        assert "tenant 'globex'" in detail or "audience" in detail, (kind, detail)


async def test_a_jwt_for_another_tenants_endpoint_is_refused(
    identity: IdentityApp, issuer: Issuer
) -> None:
    """The audience is the endpoint: acme's token, even from an issuer globex trusts too."""
    await identity.trust(issuer, identity.acme)
    await identity.trust(issuer, identity.globex)
    token = issuer.token(identity.resource("acme"))
    theirs = await identity.http.post("/mcp/globex", json=LIST, headers=bearer(token))
    assert theirs.status_code == 401
    assert f"its audience (`aud`) is not {identity.resource('globex')}" in theirs.json()["detail"]


async def test_an_endpoint_of_no_tenant(identity: IdentityApp) -> None:
    for path in ("/mcp/NOT_A_TENANT", "/mcp/a", "/mcp/acme/extra"):
        answer = await identity.http.post(path, json=LIST, headers=identity.acme.headers)
        assert answer.status_code == 404, path
    ghost = await identity.http.post("/mcp/ghost", json=LIST, headers=identity.acme.headers)
    assert ghost.status_code == 401  # acme's key is not ghost's
    metadata = "/.well-known/oauth-protected-resource/mcp/NOT_A_TENANT"
    assert (await identity.http.get(metadata)).status_code == 404


@pytest.mark.settings(trusted_proxies=["127.0.0.0/8"])
async def test_urls_follow_a_trusted_proxys_forwarded_headers(identity: IdentityApp) -> None:
    """The in-process client is 127.0.0.1: a trusted proxy here."""
    public = "https://tools.example.com"
    for headers in (
        {"Forwarded": 'for=203.0.113.9;proto=https;host="tools.example.com"'},
        {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "tools.example.com"},
    ):
        answer = await identity.http.post("/mcp/acme", json=LIST, headers=headers)
        metadata = f"{public}/.well-known/oauth-protected-resource/mcp/acme"
        assert f'resource_metadata="{metadata}"' in answer.headers["www-authenticate"]
        path = "/.well-known/oauth-protected-resource/mcp/acme"
        document = (await identity.http.get(path, headers=headers)).json()
        assert document["resource"] == f"{public}/mcp/acme"
        assert document["authorization_servers"] == [f"{public}/oauth"]
        shared = (
            await identity.http.get("/.well-known/oauth-protected-resource/mcp", headers=headers)
        ).json()
        assert shared["resource"] == f"{public}/mcp"


async def test_forwarded_headers_of_an_untrusted_peer_are_ignored(identity: IdentityApp) -> None:
    headers = {
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "evil.example",
        "Forwarded": "host=evil.example",
    }
    answer = await identity.http.post("/mcp/acme", json=LIST, headers=headers)
    assert "evil.example" not in answer.headers["www-authenticate"]
    assert f'resource_metadata="{identity.base}/' in answer.headers["www-authenticate"]
    document = (
        await identity.http.get("/.well-known/oauth-protected-resource/mcp/acme", headers=headers)
    ).json()
    assert document["resource"] == f"{identity.base}/mcp/acme"


PUBLIC = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "tools.example.com"}


async def public_url_answers(
    identity: IdentityApp, issuer: Issuer
) -> tuple[httpx.Response, httpx.Response]:
    """/mcp and invoke answers to a token for the public URL, sent through a "proxy"."""
    await identity.trust(issuer, identity.acme)
    headers = {**bearer(issuer.token("https://tools.example.com/mcp/acme")), **PUBLIC}
    listed = await identity.http.post("/mcp/acme", json=LIST, headers=headers)
    invoked = await identity.http.post(
        "/tools/rolldice/invoke", json={"arguments": {"d": 6}}, headers=headers
    )
    return listed, invoked


async def test_a_jwt_for_the_public_url_is_refused_from_an_untrusted_proxy(
    identity: IdentityApp, issuer: Issuer
) -> None:
    """The service does not know that URL as its own."""
    listed, invoked = await public_url_answers(identity, issuer)
    assert listed.status_code == 401 and invoked.status_code == 401
    assert "its audience (`aud`) is not http://test/mcp/acme" in listed.json()["detail"]


@pytest.mark.settings(trusted_proxies=["127.0.0.1"])
async def test_a_jwt_for_the_public_url_behind_a_trusted_proxy(
    identity: IdentityApp, issuer: Issuer
) -> None:
    listed, invoked = await public_url_answers(identity, issuer)
    assert listed.status_code == 200, listed.text
    assert invoked.status_code == 200, invoked.text


async def test_the_endpoint_answers_posts_only(identity: IdentityApp) -> None:
    answer = await identity.http.get("/mcp/acme", headers=identity.acme.headers)
    assert answer.status_code == 405
    unknown: httpx.Response = await identity.http.post(
        "/mcp/acme",
        content=b"{",
        headers={**identity.acme.headers, "Content-Type": "application/json"},
    )
    assert unknown.status_code in (200, 400)


async def test_metrics_label_the_endpoint_by_its_template(identity: IdentityApp) -> None:
    await identity.http.post("/mcp/acme", json=LIST)
    await identity.http.post("/mcp/acme", json=LIST, headers=identity.acme.headers)
    text = (await identity.http.get("/metrics")).text
    route = 'toolgate_http_requests_total{method="POST",route="/mcp/{tenant_id}",status='
    assert f'{route}"401"}}' in text and f'{route}"200"}}' in text
    assert 'toolgate_mcp_requests_total{method="tools/list",status="200"}' in text
    assert "acme" not in text
