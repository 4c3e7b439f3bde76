"""Hidden values (context arguments, secrets, MCP header values) and the forms they travel in.

An upstream that received a value may echo it back encoded: percent-encoded in a 404 page for a
query string, JSON-escaped in a body, HTML-escaped in an error page, base64 in a Basic
credential. Redaction looks for every one of these forms, not only the raw text.

Limits: a value is found only whole and in these encodings (not re-encoded twice, split across
lines, or transformed otherwise); values shorter than MIN_HIDDEN_LENGTH are not searched for,
since they would match ordinary text.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

MIN_HIDDEN_LENGTH = 4
REDACTED = "[redacted]"


def hidden_texts(values: Iterable[Any]) -> set[str]:
    """The values as text (list items one by one), without those too short to search for."""
    texts: set[str] = set()
    for value in values:
        if isinstance(value, list):
            texts.update(str(item) for item in value)
        elif not isinstance(value, bool | dict) and value is not None:
            texts.add(str(value))
    return {text for text in texts if len(text) >= MIN_HIDDEN_LENGTH}


def encoded_forms(text: str) -> set[str]:
    """`text` and the forms an upstream may echo it in."""
    try:
        return _encoded_forms(text)
    except (ValueError, UnicodeError):  # a lone surrogate has no UTF-8: only the raw form
        return {text}


def _encoded_forms(text: str) -> set[str]:
    forms = {text}
    for encoded in (quote(text, safe=""), quote(text), quote_plus(text)):
        forms.update((encoded, _lower_hex(encoded)))
    for ascii_only in (True, False):
        escaped = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/"), _lower_hex_escapes(escaped)))
    forms.update((html.escape(text), html.escape(text, quote=False)))
    forms.add(html.escape(text).replace("&#x27;", "&#39;"))
    forms.add(base64.b64encode(text.encode()).decode().rstrip("="))
    decoded = _base64_text(text)  # a Basic credential stored encoded: its user:password form
    if decoded is not None:
        forms.add(decoded)
    return {form for form in forms if len(form) >= MIN_HIDDEN_LENGTH}


def searched_forms(values: Iterable[Any]) -> tuple[str, ...]:
    """Every form of every hidden value, longest first (a value containing another is replaced
    whole)."""
    forms: set[str] = set()
    for text in hidden_texts(values):
        forms |= encoded_forms(text)
    return tuple(sorted(forms, key=len, reverse=True))


def _lower_hex(encoded: str) -> str:
    """`%2F` -> `%2f`: some servers print escapes in lower case."""
    parts = encoded.split("%")
    return parts[0] + "".join(f"%{p[:2].lower()}{p[2:]}" for p in parts[1:])


def _lower_hex_escapes(escaped: str) -> str:
    """`\\u00E9` and `\\u00e9` are the same JSON; json.dumps writes lower case already, so this
    adds the upper-case form."""
    out, index = [], 0
    while (found := escaped.find("\\u", index)) != -1:
        out.append(escaped[index:found] + "\\u" + escaped[found + 2 : found + 6].upper())
        index = found + 6
    return "".join(out) + escaped[index:]


def _base64_text(text: str) -> str | None:
    if len(text) % 4 or len(text) < 8 or not text.isascii():
        return None
    try:
        decoded = base64.b64decode(text, validate=True).decode()
    except (binascii.Error, ValueError):
        return None
    return decoded if decoded.isprintable() else None
