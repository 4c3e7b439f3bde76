"""Tenants' identity providers' signing keys (JWKS) and discovery documents, fetched through the
tenant's outbound policy and kept in memory.

- **Fetched like any tenant URL**: the written-URL rule (`url_problems`) and the connect-time
  guard of the tenant's HTTP client (`TenantOutbound`): a JWKS inside the network is refused
  unless the tenant's allow list opens it. One deadline for the whole fetch (JWKS_TIMEOUT_S,
  however slowly the answer drips) and a size cap (JWKS_MAX_BYTES); no redirect is followed.
- **Cached** per (tenant, URL) for JWKS_CACHE_TTL_S. A token naming a key (`kid`) the cached set
  lacks fetches the set again, at most once per JWKS_REFRESH_INTERVAL_S per set (a flood of
  made-up `kid`s costs the issuer one request per interval), then is refused; so is a key the
  issuer removed, once the set is fetched again. Concurrent fetches of one set share one request.
- **Only public keys that sign**: `oct` (symmetric) keys and keys whose `use` is not `sig` are
  never used, and a key is used only with the algorithm it names (when it names one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from app.http.client import OutboundError, OutboundTimeoutError
from app.http.netguard import OutboundBlockedError, OutboundPolicy, url_problems
from app.services.outbound import TenantOutbound

logger = logging.getLogger(__name__)
MAX_KEY_SETS = 10_000  # (tenant, URL) pairs kept; the least recently used is dropped first
MAX_KEYS = 100  # keys of one set that are read; a set of more is refused
MAX_STALE_S = 3600.0  # a set that cannot be fetched again is still used this long past its TTL


class IssuerFetchError(Exception):
    """An identity provider's document could not be had; the message says why, for a person."""


@dataclass(slots=True)
class _KeySet:
    keys: dict[str | None, list[dict[str, Any]]]  # JWKs by kid (None: keys without one)
    fetched_at: float
    built: dict[tuple[int, str], PyJWK] = field(default_factory=dict)  # (id(jwk), alg) -> key


@dataclass(frozen=True, slots=True)
class KeyChoice:
    """The key a token's signature is checked with, or why there is none."""

    key: PyJWK | None
    problem: str | None = None


class IssuerDocuments:
    """JSON documents of an identity provider (discovery, JWKS) or of an OAuth client (its Client
    ID Metadata Document), fetched under an outbound policy with one deadline and a size cap."""

    def __init__(self, *, outbound: TenantOutbound, timeout_s: float, max_bytes: int) -> None:
        self._outbound = outbound
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    async def url_problems(self, url: str, *, tenant_id: str) -> list[str]:
        """Why the tenant's outbound policy does not reach `url` (the rule of every written URL)."""
        return url_problems(url, await self._outbound.policy(tenant_id))

    async def fetch(self, url: str, *, tenant_id: str) -> dict[str, Any]:
        """The JSON object at `url`, under the tenant's policy; IssuerFetchError saying why not."""
        return await self.fetch_under(url, await self._outbound.policy(tenant_id))

    async def fetch_public(self, url: str) -> dict[str, Any]:
        """`fetch` under the operator's policy alone (a document no tenant named yet)."""
        return await self.fetch_under(url, self._outbound.base)

    async def fetch_under(self, url: str, policy: OutboundPolicy) -> dict[str, Any]:
        problems = url_problems(url, policy)
        if problems:
            raise IssuerFetchError(f"its URL is not allowed: {'; '.join(problems)}")
        client = self._outbound.client_for(policy)
        try:
            async with asyncio.timeout(self.timeout_s), client:
                async with client.request(
                    "GET", url, headers={"Accept": "application/json"}, timeout_s=self.timeout_s
                ) as response:
                    if response.status != 200:
                        raise IssuerFetchError(f"it answered HTTP {response.status}")
                    data, too_large = await response.read_capped(self.max_bytes)
        except OutboundBlockedError as exc:
            raise IssuerFetchError(f"the connection was refused: {exc}") from None
        except (TimeoutError, OutboundTimeoutError):
            raise IssuerFetchError(
                f"it did not answer within {self.timeout_s:g} s (JWKS_TIMEOUT_S)"
            ) from None
        except OutboundError as exc:
            raise IssuerFetchError(f"it cannot be reached ({exc})") from None
        if too_large:
            raise IssuerFetchError(f"it is larger than {self.max_bytes} bytes (JWKS_MAX_BYTES)")
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise IssuerFetchError("it is not JSON") from None
        if not isinstance(document, dict):
            raise IssuerFetchError("it is not a JSON object")
        return document


def usable_keys(document: dict[str, Any]) -> dict[str | None, list[dict[str, Any]]]:
    """A JWKS's signing keys by kid (`oct` keys and keys for encryption left out);
    IssuerFetchError when it has none, or more than MAX_KEYS."""
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise IssuerFetchError("it is not a JWKS (no `keys` list)")
    if len(keys) > MAX_KEYS:
        raise IssuerFetchError(f"it has {len(keys)} keys, more than {MAX_KEYS}")
    found: dict[str | None, list[dict[str, Any]]] = {}
    for jwk in keys:
        if not isinstance(jwk, dict) or jwk.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        if jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        found.setdefault(kid if isinstance(kid, str) else None, []).append(jwk)
    if not found:
        raise IssuerFetchError("it has no public signing key (RSA, EC or OKP)")
    return found


class JwksCache:
    """Key sets by (tenant, JWKS URL): see the module docstring."""

    def __init__(
        self,
        documents: IssuerDocuments,
        *,
        ttl_s: float,
        refresh_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._documents = documents
        self._ttl_s = ttl_s
        self._refresh_s = refresh_interval_s
        self._clock = clock
        self._sets: OrderedDict[tuple[str, str], _KeySet] = OrderedDict()
        self._attempted: dict[tuple[str, str], float] = {}  # last fetch started, by set
        self._fetching: dict[tuple[str, str], asyncio.Task[_KeySet]] = {}
        self._failed: dict[tuple[str, str], str] = {}  # why the last fetch failed, by set

    async def key(self, url: str, kid: str | None, algorithm: str, *, tenant_id: str) -> KeyChoice:
        """The key of the set at `url` named `kid` (or its only key when the token names
        none), built for `algorithm`; the set fetched first when it is not here, is past its
        TTL, or lacks `kid` (at most once per interval). IssuerFetchError when it cannot be
        fetched and nothing usable is cached."""
        slot = (tenant_id, url)
        held = self._sets.get(slot)
        if held is not None:
            self._sets.move_to_end(slot)
        if held is None:
            failed = self._failed.get(slot)
            if failed is not None and not self._may_refresh(slot):
                raise IssuerFetchError(failed)  # tried moments ago: not again for every token
            return _choose(await self._fetch(slot), kid, algorithm)
        age = self._clock() - held.fetched_at
        unknown = kid is not None and kid not in held.keys
        too_old = age >= self._ttl_s + MAX_STALE_S  # what the issuer said then is not used
        if (age >= self._ttl_s or unknown) and self._may_refresh(slot):
            try:
                held = await self._fetch(slot)
            except IssuerFetchError:
                if too_old:
                    raise
        elif too_old:
            raise IssuerFetchError("it could not be fetched again since its keys expired")
        return _choose(held, kid, algorithm)

    def _may_refresh(self, slot: tuple[str, str]) -> bool:
        last = self._attempted.get(slot)
        return last is None or self._clock() - last >= self._refresh_s

    async def _fetch(self, slot: tuple[str, str]) -> _KeySet:
        """The set fetched now; concurrent callers share one fetch, which goes on (for the
        others) when a caller leaves."""
        task = self._fetching.get(slot)
        if task is None:
            self._attempted[slot] = self._clock()
            if len(self._attempted) > 2 * MAX_KEY_SETS:  # failed sets are never kept
                self._attempted = {k: t for k, t in self._attempted.items() if k in self._sets}
            task = self._fetching[slot] = asyncio.create_task(self._read(slot))
            task.add_done_callback(partial(self._fetched, slot))
        return await asyncio.shield(task)

    def _fetched(self, slot: tuple[str, str], task: asyncio.Task[_KeySet]) -> None:
        self._fetching.pop(slot, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every caller may have left

    async def _read(self, slot: tuple[str, str]) -> _KeySet:
        try:
            document = await self._documents.fetch(slot[1], tenant_id=slot[0])
            held = _KeySet(usable_keys(document), self._clock())
        except IssuerFetchError as exc:
            if len(self._failed) >= MAX_KEY_SETS:
                self._failed.clear()
            self._failed[slot] = str(exc)
            # At most once per set and interval: what the tenant's users' 401s say, for the
            # operator too.
            logger.warning(
                "tenant %s: its identity provider's keys (%s) cannot be fetched: %s",
                slot[0],
                slot[1],
                exc,
            )
            raise
        self._failed.pop(slot, None)
        self._keep(slot, held)
        return held

    def _keep(self, slot: tuple[str, str], held: _KeySet) -> None:
        self._sets[slot] = held
        self._sets.move_to_end(slot)
        while len(self._sets) > MAX_KEY_SETS:
            dropped, _ = self._sets.popitem(last=False)
            self._attempted.pop(dropped, None)

    def forget(self, tenant_id: str) -> None:
        """Drop the tenant's key sets (its configuration changed)."""
        for slot in [slot for slot in self._sets if slot[0] == tenant_id]:
            del self._sets[slot]
        for slot in [slot for slot in self._attempted if slot[0] == tenant_id]:
            self._attempted.pop(slot, None)
            self._failed.pop(slot, None)

    async def aclose(self) -> None:
        tasks = list(self._fetching.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _choose(held: _KeySet, kid: str | None, algorithm: str) -> KeyChoice:
    if kid is not None:
        candidates = held.keys.get(kid, [])
        if not candidates:
            return KeyChoice(None, f"its key '{kid}' is not in the issuer's JWKS")
    else:
        candidates = [jwk for jwks in held.keys.values() for jwk in jwks]
        if len(candidates) != 1:
            return KeyChoice(None, "it names no key (`kid`) and the issuer's JWKS has several")
    jwk = candidates[0]
    named = jwk.get("alg")
    if named is not None and named != algorithm:
        return KeyChoice(None, f"its key is for {named}, not {algorithm}")
    built = held.built.get((id(jwk), algorithm))
    if built is None:
        try:
            built = held.built[(id(jwk), algorithm)] = PyJWK(jwk, algorithm)
        except PyJWTError:
            return KeyChoice(None, f"its key cannot verify {algorithm} signatures")
    return KeyChoice(built)
