"""A tenant's identity provider (`PUT /identity`) and its JWTs on invoke: the claims it maps
reach the tool as context a request cannot override, and every refusal is its own 401 saying
why. The provider is real HTTP (tests/support/issuer.py); tokens are signed with PyJWT."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import pytest

from tests.support import functions
from tests.support.apps import ADMIN, create_tenant, http_client, make_settings, running_app
from tests.support.documents import external_tool
from tests.support.fixtures.identity import IdentityApp
from tests.support.issuer import Issuer

CLAIMS = {"user_id": "sub", "api_token": "tok"}


async def invoke(
    identity: IdentityApp, token: str, tool: str = "profile", **context: Any
) -> httpx.Response:
    arguments = {"d": 6} if tool == "rolldice" else {"field": "email"}
    body = {"arguments": arguments, "context_arguments": context}
    headers = {"Authorization": f"Bearer {token}"}
    return await identity.http.post(f"/tools/{tool}/invoke", json=body, headers=headers)


async def refused(identity: IdentityApp, token: str) -> str:
    """The 401's detail for `token` on invoke."""
    answer = await invoke(identity, token)
    assert answer.status_code == 401, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    detail: str = answer.json()["detail"]
    assert detail.startswith("The token is not accepted: "), detail
    return detail


async def accepted(identity: IdentityApp, token: str) -> None:
    """`token` runs the dice tool (which binds no context)."""
    answer = await invoke(identity, token, tool="rolldice")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "ok", answer.text


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], payload: dict[str, Any], key: bytes | None) -> str:
    """A JWS written by hand: the forms PyJWT refuses to make (`none`, an HMAC keyed with a
    public key), as an attacker would."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    if key is None:
        return signing_input + "."
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def claims_for(identity: IdentityApp, issuer: Issuer) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer.issuer, "aud": identity.resource("acme"), "sub": "u-42", "exp": now + 300}


async def test_a_jwt_runs_a_tool_with_its_claims_bound(
    identity: IdentityApp, issuer: Issuer
) -> None:
    await identity.trust(issuer, identity.acme, claims=CLAIMS)
    token = issuer.token(identity.resource("acme"), tok="from-the-idp")
    answer = await invoke(identity, token)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "ok"
    assert functions.RECEIVED[-1] == {
        "user_id": "u-42",
        "api_token": "from-the-idp",
        "field": "email",
    }
    # A request cannot override a bound value (the token's wins) nor set one it does not bind.
    overridden = await invoke(identity, token, user_id="mallory", api_token="mine")
    assert overridden.status_code == 200
    assert functions.RECEIVED[-1]["user_id"] == "u-42"
    assert functions.RECEIVED[-1]["api_token"] == "from-the-idp"
    partial = issuer.token(identity.resource("acme"))  # no `tok` claim: nothing bound for it
    unset = await invoke(identity, partial, api_token="mine")
    assert unset.status_code == 422
    assert unset.json()["errors"][0]["path"] == "$.context_arguments.api_token"


async def test_a_jwt_is_an_end_user_not_the_tenant(identity: IdentityApp, issuer: Issuer) -> None:
    """A disabled tool does not run for it (the tenant key runs it), and the CRUD routes are
    closed to it (403)."""
    await identity.trust(issuer, identity.acme, claims=CLAIMS)
    hidden = external_tool("draft", enabled=False)
    created = await identity.http.post("/tools/create", json=hidden, headers=identity.acme.headers)
    assert created.status_code == 201, created.text
    token = issuer.token(identity.resource("acme"), tok="t")
    assert (await invoke(identity, token, tool="draft")).status_code == 404
    by_key = await identity.http.post(
        "/tools/draft/invoke", json={"arguments": {}}, headers=identity.acme.headers
    )
    assert by_key.status_code == 200  # it ran (and failed: nothing answers at its URL)
    bearer = {"Authorization": f"Bearer {token}"}
    for method, path in (("GET", "/tools/ids"), ("GET", "/client-tokens"), ("GET", "/identity")):
        answer = await identity.http.request(method, path, headers=bearer)
        assert answer.status_code == 403, (path, answer.text)
        assert "end users' tokens" in answer.json()["detail"]


async def test_the_tenant_is_the_one_whose_issuer_and_audience_the_token_carries(
    identity: IdentityApp, issuer: Issuer
) -> None:
    await identity.trust(issuer, identity.acme, audience="api://acme", claims=CLAIMS)
    await identity.trust(issuer, identity.globex, audience="api://globex", claims=CLAIMS)
    for tenant in (identity.acme, identity.globex):
        token = issuer.token(f"api://{tenant.tenant_id}", tok="t")
        answer = await invoke(identity, token, tool="rolldice")
        assert answer.status_code == 200, answer.text
        run = answer.json()["run_id"]
        for owner in (identity.acme, identity.globex):  # the run is this tenant's only
            found = await identity.http.get(f"/runs/{run}", headers=owner.headers)
            assert found.status_code in ((200, 404) if owner is tenant else (404,)), found.text
    unknown = await refused(identity, issuer.token("api://nobody"))
    assert "no tenant trusts the issuer" in unknown


@pytest.mark.all_stores
async def test_a_pair_belongs_to_one_tenant(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme, audience="api://shared")
    body = {"issuer": issuer.issuer, "jwks_uri": issuer.jwks_uri, "audience": "api://shared"}
    taken = await identity.http.put("/identity", json=body, headers=identity.globex.headers)
    assert taken.status_code == 409
    assert "Another tenant already trusts this issuer" in taken.json()["detail"]
    # Without an audience each tenant's own endpoint is the audience: no clash.
    for tenant in (identity.acme, identity.globex):
        await identity.trust(issuer, tenant)
    # A tenant deleted frees its pair.
    assert (
        await identity.http.put("/identity", json=body, headers=identity.acme.headers)
    ).status_code == 200
    assert (await identity.http.delete("/tenants/acme", headers=ADMIN)).status_code == 204
    freed = await identity.http.put("/identity", json=body, headers=identity.globex.headers)
    assert freed.status_code == 200, freed.text


@pytest.mark.all_stores
async def test_put_get_delete(identity: IdentityApp, issuer: Issuer) -> None:
    headers = identity.acme.headers
    assert (await identity.http.get("/identity", headers=headers)).status_code == 404
    stored = await identity.trust(issuer, identity.acme, claims=CLAIMS, required_claims=["tok"])
    assert stored["jwks_uri"] == issuer.jwks_uri and stored["jwks_discovered"] is False
    assert stored["audience"] is None and stored["algorithms"] == ["RS256", "ES256"]
    assert (await identity.http.get("/identity", headers=headers)).json() == stored
    assert (
        await identity.http.get("/identity", headers=identity.globex.headers)
    ).status_code == 404
    assert (
        await identity.http.delete("/identity", headers=identity.globex.headers)
    ).status_code == 404
    token = issuer.token(identity.resource("acme"), tok="t")
    assert (await invoke(identity, token)).status_code == 200
    assert (await identity.http.delete("/identity", headers=headers)).status_code == 204
    assert "trusts the issuer" in await refused(identity, token)
    assert (await identity.http.delete("/identity", headers=headers)).status_code == 404


async def test_discovery_finds_the_jwks(identity: IdentityApp, issuer: Issuer) -> None:
    body = {"issuer": issuer.issuer, "claims": CLAIMS}
    answer = await identity.http.put("/identity", json=body, headers=identity.acme.headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["jwks_uri"] == issuer.jwks_uri and answer.json()["jwks_discovered"]
    assert issuer.discovery_requests == 1
    assert (
        await invoke(identity, issuer.token(identity.resource("acme"), tok="t"))
    ).status_code == 200
    # Another issuer's discovery document: refused, nothing stored.
    other = await identity.http.put(
        "/identity", json={"issuer": issuer.url + "/other"}, headers=identity.globex.headers
    )
    assert other.status_code == 422
    assert "OIDC discovery" in other.json()["errors"][0]["message"]


async def test_a_token_test_shows_what_it_binds_and_never_skips_the_signature(
    identity: IdentityApp, issuer: Issuer
) -> None:
    await identity.trust(issuer, identity.acme, claims=CLAIMS)
    token = issuer.token(identity.resource("acme"), tok="t-1")
    shown = await identity.http.post(
        "/identity/test", json={"token": token}, headers=identity.acme.headers
    )
    assert shown.status_code == 200
    assert shown.json()["accepted"] and shown.json()["context"] == {
        "user_id": "u-42",
        "api_token": "t-1",
    }
    assert shown.json()["subject"] == "u-42"
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged = f"{header}.{b64(json.dumps({**claims, 'sub': 'admin'}).encode())}.{signature}"
    tested = await identity.http.post(
        "/identity/test", json={"token": forged}, headers=identity.acme.headers
    )
    assert tested.json()["accepted"] is False
    assert "signature" in tested.json()["reason"]
    # On another tenant (no provider): refused, saying so.
    elsewhere = await identity.http.post(
        "/identity/test", json={"token": token}, headers=identity.globex.headers
    )
    assert "trusts no identity provider" in elsewhere.json()["reason"]


# Every refusal, its own test: a 401 whose detail says which.


async def test_expired(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    token = issuer.token(identity.resource("acme"), exp=int(time.time()) - 120)
    assert "expired" in await refused(identity, token)


async def test_expired_within_the_leeway_is_accepted(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    token = issuer.token(identity.resource("acme"), exp=int(time.time()) - 5)
    await accepted(identity, token)


async def test_not_yet_valid(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    token = issuer.token(identity.resource("acme"), nbf=int(time.time()) + 600)
    assert "not valid yet" in await refused(identity, token)


async def test_wrong_audience(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    other = issuer.token(identity.resource("acme") + "-not")
    assert "no tenant trusts the issuer" in await refused(identity, other)
    # An audience naming globex's endpoint is globex's alone, checked on globex's terms.
    await identity.trust(issuer, identity.globex, audience="api://globex")
    token = issuer.token(identity.resource("globex"))
    assert "its audience (`aud`) is not api://globex" in await refused(identity, token)


async def test_wrong_audience_on_a_fixed_tenant(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme, audience="api://acme")
    token = issuer.token("api://acme-not")
    tested = await identity.http.post(
        "/identity/test", json={"token": token}, headers=identity.acme.headers
    )
    assert "its audience (`aud`) is not api://acme" in tested.json()["reason"]


async def test_wrong_issuer(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    token = issuer.token(identity.resource("acme"), iss="https://evil.example")
    assert "no tenant trusts the issuer 'https://evil.example'" in await refused(identity, token)
    tested = await identity.http.post(
        "/identity/test", json={"token": token}, headers=identity.acme.headers
    )
    assert f"its issuer (`iss`) is not {issuer.issuer}" in tested.json()["reason"]


async def test_alg_none(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    token = hand_made({"alg": "none", "kid": "k1"}, claims_for(identity, issuer), None)
    assert "its algorithm 'none' is not allowed" in await refused(identity, token)


async def test_hs256_signed_with_the_public_key(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme, algorithms=["RS256"])
    header = {"alg": "HS256", "kid": "k1", "typ": "JWT"}
    token = hand_made(header, claims_for(identity, issuer), issuer.public_pem("k1"))
    assert "its algorithm 'HS256' is not allowed" in await refused(identity, token)


async def test_hmac_can_never_be_allowed(identity: IdentityApp, issuer: Issuer) -> None:
    for algorithms in (["HS256"], ["none"], ["RS256", "HS512"]):
        body = {"issuer": issuer.issuer, "jwks_uri": issuer.jwks_uri, "algorithms": algorithms}
        answer = await identity.http.put("/identity", json=body, headers=identity.acme.headers)
        assert answer.status_code == 422, algorithms


@pytest.mark.settings(jwks_refresh_interval_s=0)
async def test_unknown_kid_refreshes_once_then_is_refused(
    identity: IdentityApp, issuer: Issuer
) -> None:
    await identity.trust(issuer, identity.acme)
    await accepted(identity, issuer.token(identity.resource("acme")))
    assert issuer.jwks_requests == 1
    issuer.add_key("k9", serve=False)  # signs, but the JWKS does not list it
    token = issuer.token(identity.resource("acme"), kid="k9")
    assert "its key 'k9' is not in the issuer's JWKS" in await refused(identity, token)
    assert issuer.jwks_requests == 2  # one refresh for the unknown kid, no more


@pytest.mark.settings(jwks_refresh_interval_s=3600)
async def test_unknown_kids_refresh_at_most_once_per_interval(
    identity: IdentityApp, issuer: Issuer
) -> None:
    await identity.trust(issuer, identity.acme)
    await accepted(identity, issuer.token(identity.resource("acme")))
    for n in range(20):
        issuer.add_key(f"made-up-{n}", kind="EC", serve=False)
        token = issuer.token(identity.resource("acme"), kid=f"made-up-{n}")
        assert "is not in the issuer's JWKS" in await refused(identity, token)
    assert issuer.jwks_requests == 1  # the issuer was asked once, whatever the flood


@pytest.mark.settings(jwks_refresh_interval_s=0)
async def test_a_key_removed_from_the_jwks(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    old = issuer.token(identity.resource("acme"), kid="k1")
    await accepted(identity, old)
    issuer.add_key("k2")
    issuer.remove_key("k1")  # rotated: k1 withdrawn, perhaps compromised
    new = issuer.token(identity.resource("acme"), kid="k2")
    await accepted(identity, new)  # set fetched again
    assert "its key 'k1' is not in the issuer's JWKS" in await refused(identity, old)


async def test_a_jwks_inside_the_network(issuer: Issuer) -> None:
    """The operator opens nothing here: loopback is refused unless the tenant's list opens it,
    when the provider is written and again when its keys are fetched."""
    async with (
        running_app(make_settings(None, auth_cache_ttl_s=0), functions.registry) as app,
        http_client(app) as http,
    ):
        acme = await create_tenant(http, "acme")
        body = {"issuer": issuer.issuer, "jwks_uri": issuer.jwks_uri}
        written = await http.put("/identity", json=body, headers=acme.headers)
        assert written.status_code == 422
        assert "not a public address" in written.json()["errors"][0]["message"]
        opened = {"allow": ["127.0.0.1"], "force": True}
        assert (
            await http.put("/tenants/acme/outbound", json=opened, headers=ADMIN)
        ).status_code == 200
        assert (await http.put("/identity", json=body, headers=acme.headers)).status_code == 200
        closed = {"allow": []}
        assert (
            await http.put("/tenants/acme/outbound", json=closed, headers=ADMIN)
        ).status_code == 200
        token = issuer.token("http://test/mcp/acme")
        bearer = {"Authorization": f"Bearer {token}"}
        answer = await http.post(
            "/tools/rolldice/invoke", json={"arguments": {"d": 6}}, headers=bearer
        )
        assert answer.status_code == 401
        assert "cannot be fetched: its URL is not allowed" in answer.json()["detail"]
        assert issuer.jwks_requests == 0


@pytest.mark.settings(jwks_timeout_s=0.3)
async def test_a_jwks_that_answers_slowly(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    issuer.mode = "slow"
    detail = await refused(identity, issuer.token(identity.resource("acme")))
    assert "did not answer within 0.3 s (JWKS_TIMEOUT_S)" in detail


@pytest.mark.settings(jwks_max_bytes=65_536)
async def test_a_jwks_that_is_huge(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    issuer.mode = "huge"
    detail = await refused(identity, issuer.token(identity.resource("acme")))
    assert "larger than 65536 bytes (JWKS_MAX_BYTES)" in detail


async def test_a_jwks_that_drops_the_connection(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    issuer.mode = "dropped"
    detail = await refused(identity, issuer.token(identity.resource("acme")))
    assert "cannot be fetched: it cannot be reached" in detail


async def test_a_jwks_that_fails(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    issuer.mode = "broken"
    assert "answered HTTP 500" in await refused(identity, issuer.token(identity.resource("acme")))


async def test_missing_claims(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme, required_claims=["org_id"])
    assert "lacks the claim `org_id`" in await refused(
        identity, issuer.token(identity.resource("acme"))
    )
    nobody = issuer.token(identity.resource("acme"), sub=None, org_id="o")
    assert "lacks the claim `sub`" in await refused(identity, nobody)


async def test_a_claim_of_another_shape_is_not_bound(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme, claims={"user_id": "profile"})
    token = issuer.token(identity.resource("acme"), profile={"nested": {"deep": 1}})
    assert "claim `profile` is not a string, number, boolean or list of strings" in await refused(
        identity, token
    )


async def test_a_token_that_is_not_a_jwt(identity: IdentityApp, issuer: Issuer) -> None:
    await identity.trust(issuer, identity.acme)
    for junk in (
        "eyJ.e30.",
        "eyJub3QganNvbg.e30.e30",
        "eyJhbGciOiJSUzI1NiJ9." + "A" * 20_000 + ".x",
    ):
        answer = await invoke(identity, junk)
        assert answer.status_code == 401, junk[:40]


# Abuse of the configuration itself.


@pytest.mark.parametrize(
    "body",
    [
        {
            "issuer": "https://x.example",
            "jwks_uri": "https://x.example/k",
            "claims": {f"c{n}": "sub" for n in range(65)},
        },
        {"issuer": "https://x.example/" + "a" * 3000, "jwks_uri": "https://x.example/k"},
        {
            "issuer": "https://x.example",
            "jwks_uri": "https://x.example/k",
            "claims": {"user_id": {"deep": ["sub"]}},
        },
        {"issuer": "https://x.example", "jwks_uri": "https://x.example/k", "claims": ["sub"]},
        {"issuer": ["https://x.example"], "jwks_uri": "https://x.example/k"},
        {"issuer": "https://x.example", "jwks_uri": "ftp://x.example/k"},
        {
            "issuer": "https://x.example",
            "jwks_uri": "https://x.example/k",
            "claims": {"bad name!": "sub"},
        },
        {"issuer": "https://x.example", "jwks_uri": "https://x.example/k", "algorithms": []},
        {"issuer": "https://x.example", "jwks_uri": "https://x.example/k", "tenant_id": "globex"},
        {"issuer": "https://x.example", "jwks_uri": "http://10.0.0.7/keys"},
        {"issuer": "https://x.example", "jwks_uri": "http://169.254.169.254/keys"},
    ],
)
async def test_bad_configurations_are_422(identity: IdentityApp, body: dict[str, Any]) -> None:
    answer = await identity.http.put("/identity", json=body, headers=identity.acme.headers)
    assert answer.status_code == 422, answer.text
    assert (await identity.http.get("/identity", headers=identity.acme.headers)).status_code == 404


async def test_an_oversized_configuration_is_413(identity: IdentityApp) -> None:
    body = {
        "issuer": "https://x.example",
        "jwks_uri": "https://x.example/k",
        "pad": "x" * 2_000_000,
    }
    answer = await identity.http.put("/identity", json=body, headers=identity.acme.headers)
    assert answer.status_code == 413


async def test_a_token_to_test_is_bounded(identity: IdentityApp) -> None:
    answer = await identity.http.post(
        "/identity/test", json={"token": "eyJ" + "a" * 20_000}, headers=identity.acme.headers
    )
    assert answer.status_code == 422
    typed = await identity.http.post(
        "/identity/test", json={"token": 42}, headers=identity.acme.headers
    )
    assert typed.status_code == 422
