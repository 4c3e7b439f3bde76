"""Sealing tenant credentials at rest: AES-256-GCM under a key from settings; and the random
digits of the ids minted per request (`random_hex`).

A sealed value is `v1.<key id>.<nonce>.<ciphertext>` (base64url). The associated data binds it
to its tenant and name, so a ciphertext copied to another tenant or name does not decrypt.
The key id (the first bytes of the key's SHA-256) says which key sealed a value, so old keys can
stay readable while `python -m app rotate-secrets` re-seals everything under the current one.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import threading

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
_VERSION = "v1"


class SecretKeyError(ValueError):
    """A configured key is not 32 bytes of base64; the message never includes the key."""


class UnsealError(Exception):
    """A sealed value cannot be opened: unknown key, tampered, or bound to another owner."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse_key(text: str, *, setting: str) -> bytes:
    """A key from its base64 (standard or url-safe) text; it must decode to 32 bytes."""
    try:
        key = base64.b64decode(text.strip().replace("-", "+").replace("_", "/") + "==")
    except (binascii.Error, ValueError):
        raise SecretKeyError(f"{setting} is not base64") from None
    if len(key) != KEY_BYTES:
        raise SecretKeyError(f"{setting} must decode to {KEY_BYTES} bytes, got {len(key)}")
    return key


def new_key() -> str:
    """A fresh key as settings take it (what `python -m app new-secrets-key` prints)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:12]


@functools.lru_cache(maxsize=4096)
def key_hash(secret: bytes, key: str) -> str:
    """How a bearer key (tenant key, client token) is stored and looked up: HMAC-SHA256. The
    hashes of the 4,096 keys presented last are kept (docs/performance.md, "Eighth round"). The
    keys kept are in this process's memory, as the secret they are hashed with already is."""
    return hmac.digest(secret, key.encode(), "sha256").hex()


def associated_data(tenant_id: str, *parts: str) -> bytes:
    """What a sealed value is bound to; NUL cannot occur in ids or names, so it separates."""
    return "\x00".join(("toolgate", tenant_id, *parts)).encode()


class SecretBox:
    """Seals with the current key; opens with the current key or any listed old one."""

    def __init__(self, current: bytes, old: list[bytes] | None = None) -> None:
        self._current_id = key_id(current)
        self._current = AESGCM(current)
        self._keys = {key_id(k): AESGCM(k) for k in [*(old or []), current]}

    @property
    def current_key_id(self) -> str:
        return self._current_id

    def seal(self, plaintext: str, aad: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._current.encrypt(nonce, plaintext.encode(), aad)
        return ".".join((_VERSION, self._current_id, _b64(nonce), _b64(sealed)))

    def open(self, sealed: str, aad: bytes) -> str:
        try:
            version, kid, nonce, data = sealed.split(".")
        except (AttributeError, ValueError):
            raise UnsealError("not a sealed value") from None
        aead = self._keys.get(kid)
        if version != _VERSION or aead is None:
            raise UnsealError(f"sealed under an unknown key ({kid})")
        try:
            return aead.decrypt(_unb64(nonce), _unb64(data), aad).decode()
        except (InvalidTag, ValueError, binascii.Error):
            raise UnsealError("does not decrypt: tampered, or copied from another owner") from None

    def needs_resealing(self, sealed: str) -> bool:
        """True when `sealed` was made under a key other than the current one."""
        parts = sealed.split(".")
        return len(parts) != 4 or parts[1] != self._current_id


# Random hex digits for ids (request ids, run ids): from the system's source, read 4 KB at a
# time (a read per id was a system call on every request); never handed out twice, and a
# forked child starts on a block (and a lock) of its own.
_RANDOM_READ = 4096


class _RandomDigits:
    __slots__ = ("at", "digits", "lock")

    def __init__(self) -> None:
        self.digits, self.at, self.lock = "", 0, threading.Lock()

    def take(self, count: int) -> str:
        with self.lock:
            start = self.at
            if start + count > len(self.digits):
                self.digits, start = os.urandom(_RANDOM_READ).hex(), 0
            self.at = start + count
            return self.digits[start : self.at]


_random = _RandomDigits()


def random_hex(digits: int) -> str:
    """`digits` random hexadecimal digits, at most 8,192. For ids, not for keys: the rest of
    a read waits in memory until it is handed out."""
    if not 0 < digits <= 2 * _RANDOM_READ:
        raise ValueError(f"random_hex gives 1 to {2 * _RANDOM_READ} digits, not {digits}")
    return _random.take(digits)


def random_below(n: int) -> int:
    """A uniformly random integer from 0 to `n - 1` (`n` from 1 to 2**64), drawn from the same
    buffered read of the system's source as `random_hex`, as `secrets.randbelow` draws from it
    with a system call each time: for dice and ids, not for keys. Uniform by rejection: digits
    at or past the largest multiple of `n` they can hold are drawn again (fewer than half of
    the draws, on average)."""
    if not 0 < n <= 1 << 64:
        raise ValueError(f"random_below takes 1 to 2**64, not {n}")
    digits = max(1, ((n - 1).bit_length() + 3) // 4)
    span = 16**digits
    limit = span - span % n  # a multiple of n: every remainder equally often below it
    while True:
        value = int(_random.take(digits), 16)
        if value < limit:
            return value % n


def _fresh_random() -> None:
    global _random
    _random = _RandomDigits()


os.register_at_fork(after_in_child=_fresh_random)
