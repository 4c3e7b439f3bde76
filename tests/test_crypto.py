"""The stored form of keys: a database an earlier version wrote must still match."""

from __future__ import annotations

import hashlib
import hmac
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.kit.crypto import key_hash, random_below, random_hex


@pytest.mark.parametrize("key", ["tg_" + "a" * 43, "tgc_x", "", "ключ-é"])
def test_a_key_hashes_as_it_always_has(key: str) -> None:
    secret = b"s" * 40
    assert key_hash(secret, key) == hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def test_a_stored_hash_is_unchanged() -> None:
    # HMAC-SHA256 of "tg_x" under "k", written down once: the form tenants' stored hashes are in.
    assert key_hash(b"k", "tg_x") == (
        "5d492d011b2633e89493e38b84cda157375612a30348496afe0cd2631f960476"
    )


def test_random_digits_are_hex_of_the_length_asked_and_never_repeat() -> None:
    taken = [random_hex(32) for _ in range(1_000)]  # several 4 KB reads of the source
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in taken)
    assert len(set(taken)) == len(taken)
    assert len(random_hex(8_192)) == 8_192  # a whole read at once


def test_threads_taking_random_digits_at_once_never_share_any() -> None:
    with ThreadPoolExecutor(8) as pool:
        taken = list(pool.map(lambda _: random_hex(16), range(4_000)))
    assert len(set(taken)) == len(taken)


def test_a_forked_child_takes_digits_its_parent_does_not() -> None:
    random_hex(16)  # the parent has the rest of a read in hand
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side
        os.write(write, random_hex(16).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        childs = pipe.read()
    assert len(childs) == 16 and childs != random_hex(16)


@pytest.mark.parametrize("digits", [0, -1, 8_193])
def test_random_digits_out_of_range_are_refused(digits: int) -> None:
    with pytest.raises(ValueError, match="random_hex gives 1 to 8192 digits"):
        random_hex(digits)


@pytest.mark.parametrize("n", [1, 2, 6, 7, 16, 17, 1_000_000, 1 << 64])
def test_random_below_stays_below_its_bound(n: int) -> None:
    drawn = [random_below(n) for _ in range(2_000)]
    assert all(0 <= value < n for value in drawn)
    assert len(set(drawn)) == 1 if n == 1 else len(set(drawn)) > 1


def test_random_below_is_uniform() -> None:
    """Each face of a six-sided die over 60,000 rolls: a chi-square (5 degrees of freedom) past
    35 has a probability of about 2 in a million for a fair die; a die drawn as one hex digit
    modulo 6 (faces 0-3 three times in 16, faces 4-5 twice) scores about 1,900."""
    counts = [0] * 6
    for _ in range(60_000):
        counts[random_below(6)] += 1
    chi_square = sum((count - 10_000) ** 2 / 10_000 for count in counts)
    assert chi_square < 35, counts


@pytest.mark.parametrize("n", [0, -1, (1 << 64) + 1])
def test_random_below_out_of_range_is_refused(n: int) -> None:
    with pytest.raises(ValueError, match="random_below takes 1 to 2"):
        random_below(n)
