"""The stored form of keys: a database an earlier version wrote must still match."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from app.crypto import key_hash


@pytest.mark.parametrize("key", ["tg_" + "a" * 43, "tgc_x", "", "ключ-é"])
def test_a_key_hashes_as_it_always_has(key: str) -> None:
    secret = b"s" * 40
    assert key_hash(secret, key) == hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def test_a_stored_hash_is_unchanged() -> None:
    # HMAC-SHA256 of "tg_x" under "k", written down once: the form tenants' stored hashes are in.
    assert key_hash(b"k", "tg_x") == (
        "5d492d011b2633e89493e38b84cda157375612a30348496afe0cd2631f960476"
    )
