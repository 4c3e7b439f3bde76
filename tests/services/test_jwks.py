"""The key sets of tenants' identity providers (app/services/jwks.py) against a real JWKS over
HTTP, with an injected clock: when a set is fetched again (its TTL, an unknown `kid` at most once
per interval), what is served while the issuer is away, and which keys are ever used."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.http.client import OutboundClient
from app.http.netguard import OutboundPolicy
from app.repositories.database import Database
from app.repositories.tenants import TenantRepository
from app.services.jwks import MAX_STALE_S, IssuerDocuments, IssuerFetchError, JwksCache, usable_keys
from app.services.outbound import TenantOutbound
from tests.support.apps import make_settings
from tests.support.clock import FakeClock
from tests.support.issuer import Issuer

TTL_S = 600.0
INTERVAL_S = 30.0


@pytest.fixture
async def keys() -> AsyncIterator[tuple[JwksCache, FakeClock]]:
    """The cache on the real outbound stack (loopback allowed by the operator's policy)."""
    database = Database.from_settings(make_settings())
    outbound = TenantOutbound(
        tenants=TenantRepository(database),
        base=OutboundPolicy(["127.0.0.1"]),
        client_for=lambda policy: OutboundClient(policy, timeout_s=5, connect_timeout_s=5),
        ttl_s=0,
    )
    documents = IssuerDocuments(outbound=outbound, timeout_s=5, max_bytes=262_144)
    clock = FakeClock()
    cache = JwksCache(documents, ttl_s=TTL_S, refresh_interval_s=INTERVAL_S, clock=clock)
    yield cache, clock
    await cache.aclose()
    await outbound.aclose()


async def key_of(cache: JwksCache, issuer: Issuer, kid: str | None) -> Any:
    return await cache.key(issuer.jwks_uri, kid, "RS256", tenant_id="acme")


async def test_an_unknown_kid_fetches_again_once_per_interval(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, clock = keys
    assert (await key_of(cache, issuer, "k1")).key is not None
    issuer.add_key("k2")
    assert (await key_of(cache, issuer, "k2")).key is None  # fetched moments ago: not again
    assert issuer.jwks_requests == 1
    clock.advance(INTERVAL_S)
    assert (await key_of(cache, issuer, "k2")).key is not None  # now it may
    assert issuer.jwks_requests == 2
    for kid in ("k3", "k4", "k5"):
        assert (
            await key_of(cache, issuer, kid)
        ).problem == f"its key '{kid}' is not in the issuer's JWKS"
    assert issuer.jwks_requests == 2


async def test_a_set_past_its_ttl_is_fetched_again_and_a_removed_key_refused(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, clock = keys
    assert (await key_of(cache, issuer, "k1")).key is not None
    issuer.add_key("k2")
    issuer.remove_key("k1")
    clock.advance(TTL_S - 1)
    assert (await key_of(cache, issuer, "k1")).key is not None  # still within its TTL
    clock.advance(1)
    assert (await key_of(cache, issuer, "k1")).problem == "its key 'k1' is not in the issuer's JWKS"
    assert issuer.jwks_requests == 2


async def test_concurrent_tokens_share_one_fetch(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, _ = keys
    chosen = await asyncio.gather(*(key_of(cache, issuer, "k1") for _ in range(20)))
    assert all(choice.key is not None for choice in chosen)
    assert issuer.jwks_requests == 1


async def test_an_issuer_away_keeps_its_last_keys_for_a_while(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, clock = keys
    assert (await key_of(cache, issuer, "k1")).key is not None
    issuer.mode = "broken"
    clock.advance(TTL_S)
    assert (await key_of(cache, issuer, "k1")).key is not None  # the fetch failed: kept
    assert (await key_of(cache, issuer, "k1")).key is not None  # and not fetched again at once
    assert issuer.jwks_requests == 2
    clock.advance(MAX_STALE_S)
    with pytest.raises(IssuerFetchError, match="answered HTTP 500"):
        await key_of(cache, issuer, "k1")


async def test_a_failed_first_fetch_is_not_repeated_for_every_token(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, clock = keys
    issuer.mode = "broken"
    for _ in range(5):
        with pytest.raises(IssuerFetchError, match="answered HTTP 500"):
            await key_of(cache, issuer, "k1")
    assert issuer.jwks_requests == 1
    issuer.mode = "normal"
    clock.advance(INTERVAL_S)
    assert (await key_of(cache, issuer, "k1")).key is not None


async def test_a_token_without_kid_needs_a_single_key(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, clock = keys
    assert (await key_of(cache, issuer, None)).key is not None
    issuer.add_key("k2")
    clock.advance(TTL_S)
    assert "names no key" in str((await key_of(cache, issuer, None)).problem)


async def test_a_key_is_used_with_its_own_algorithm_only(
    keys: tuple[JwksCache, FakeClock], issuer: Issuer
) -> None:
    cache, _ = keys
    choice = await cache.key(issuer.jwks_uri, "k1", "ES256", tenant_id="acme")
    assert choice.key is None and "cannot verify ES256" in str(choice.problem)


def test_only_public_signing_keys_are_read() -> None:
    rsa = {"kty": "RSA", "kid": "r", "n": "xx", "e": "AQAB"}
    found = usable_keys(
        {
            "keys": [
                rsa,
                {"kty": "oct", "kid": "h", "k": "c2VjcmV0"},  # symmetric: never
                {**rsa, "kid": "e", "use": "enc"},  # for encryption: never
                "not a key",
            ]
        }
    )
    assert list(found) == ["r"]
    with pytest.raises(IssuerFetchError, match="no public signing key"):
        usable_keys({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})
    with pytest.raises(IssuerFetchError, match="more than 100"):
        usable_keys({"keys": [rsa] * 101})
    with pytest.raises(IssuerFetchError, match="not a JWKS"):
        usable_keys({"keys": "nope"})
