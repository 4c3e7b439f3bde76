"""The limits' per-tenant memory is bounded one entry at a time: past MAX_TRACKED_KEYS the
entry used least recently goes, never every tenant's at once (issue 49: no clear-all)."""

from __future__ import annotations

import pytest

from app.limits import local, shares
from app.limits.local import RateLimiter, TooManyRequestsError
from app.limits.shares import SeenTokens
from tests.support.clock import FakeClock


def test_past_the_bound_the_least_recently_used_bucket_goes_and_the_others_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local, "MAX_TRACKED_KEYS", 3)
    clock = FakeClock()
    limiter = RateLimiter(1, clock=clock, what="chats")
    for tenant in ("a", "b", "c"):
        limiter.check(tenant)  # each tenant's one token a minute is spent
    limiter.check("d")  # a fourth tenant: "a", used least recently, is forgotten
    limiter.check("a")  # forgotten: a full bucket again
    for tenant in ("c", "d", "a"):  # the others kept what they spent: still limited
        with pytest.raises(TooManyRequestsError):
            limiter.check(tenant)


def test_the_tokens_seen_keep_the_tenants_seen_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shares, "MAX_TRACKED_KEYS", 2)
    seen = SeenTokens()
    seen.remember("a", 5.0)
    seen.remember("b", 6.0)
    seen.remember("a", 7.0)  # seen again: now the most recent
    seen.remember("c", 8.0)  # "b" goes, alone
    left = [seen.bucket(t, 10, lambda n: n, now=0.0).tokens for t in ("a", "b", "c")]
    assert left == [7, 0, 8]
