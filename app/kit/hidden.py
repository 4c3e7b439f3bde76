"""Hidden values (context arguments, secrets, MCP header values), and finding them in text an
upstream wrote, whatever escapes it put on them.

An upstream that received a value may echo it back escaped: JSON (`\\u002B`, `\\u0026`, `\\/`),
HTML (`&#47;`, `&#x2F;`, `&apos;`), percent-encoded (each byte, twice, lower-case hex), a JSON
body inside a JSON string, or with its UTF-8 misread as Latin-1 (a header echoed by a server
that decodes headers so: `José` as `JosÃ©`). Rather than list every encoding of every value,
`HiddenValues` decodes the text (`app/kit/unescape.py`), searches the decoded texts as well as the
text itself, and replaces the span of the original text each match came from. Two encodings
cannot be undone without knowing the value, so they are searched for: base64 (the value's three
alignments, so it is found at any offset of a longer blob, also with MIME line breaks) and hex.

Limits (docs/security.md, "Redaction"): a value is found only whole; values shorter than
MIN_HIDDEN_LENGTH are not searched for, since they would match ordinary text.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from app.kit.unescape import Layer, decoded_views, original_span, without_line_breaks

MIN_HIDDEN_LENGTH = 4
REDACTED = "[redacted]"
ECHO_REACH = 64  # an echo of a value is at most this many times as long as the value


def hidden_texts(values: Iterable[Any]) -> set[str]:
    """The values as text (list items one by one), a Basic credential also decoded, without
    those too short to search for."""
    texts: set[str] = set()
    for value in values:
        if isinstance(value, list):
            texts.update(str(item) for item in value)
        elif not isinstance(value, bool | dict) and value is not None:
            texts.add(str(value))
    texts |= {decoded for text in texts if (decoded := _base64_text(text)) is not None}
    return {text for text in texts if len(text) >= MIN_HIDDEN_LENGTH}


class HiddenValues:
    """What one request must hide, prepared once: the texts searched as they are and after
    decoding (`plain`), and the value's base64 and hex (`packed`), searched with line breaks
    removed as well."""

    __slots__ = ("packed", "plain", "reach")

    def __init__(self, values: Iterable[Any] = (), *, texts: Iterable[str] | None = None) -> None:
        """Prepared from `values`, or from their `texts` (`hidden_texts`) already taken."""
        plain: set[str] = set()
        packed: set[str] = set()
        for text in hidden_texts(values) if texts is None else texts:
            plain.add(text)
            plain.add(text.replace(" ", "+"))  # a query string's space (quote_plus)
            packed |= _packed_forms(text)
        self.plain = tuple(sorted(plain))
        self.packed = tuple(sorted(form for form in packed if len(form) >= MIN_HIDDEN_LENGTH))
        # How far past its start an echo of a value may reach: `\\u` on each character of
        # a JSON string inside a JSON string, or double percent-encoding of 4-byte characters,
        # stay well within this.
        self.reach = ECHO_REACH * max(map(len, self.plain), default=0)

    @classmethod
    def of(cls, values: Iterable[Any]) -> HiddenValues:
        """`HiddenValues(values)`, shared: the same texts (a tenant's secrets, an end user's
        context) are prepared once, not on every call (docs/performance.md, "Fifth round").
        The last `PREPARED_KEPT` sets prepared are kept, each of at most `PREPARED_MAX_CHARS`
        characters of text (its forms take about 7 times that); treat the result as
        read-only."""
        key: tuple[str, ...] | None = None
        if isinstance(values, list | tuple) and all(type(value) is str for value in values):
            # Strings as given (nearly every run's context values and secrets): the same list
            # finds its prepared set without taking its texts again.
            key = tuple(values)
            found = _by_strings.get(key)
            if found is not None:
                return found
        texts = frozenset(hidden_texts(values))
        if sum(map(len, texts)) > PREPARED_MAX_CHARS:  # large values: prepared, never kept
            return cls(texts=texts)
        found = _prepared.get(texts)
        if found is None:
            found = cls(texts=texts)
            if len(_prepared) >= PREPARED_KEPT:
                del _prepared[next(iter(_prepared))]  # the oldest
            _prepared[texts] = found
        if key is not None and sum(map(len, key)) <= PREPARED_MAX_CHARS:
            if len(_by_strings) >= PREPARED_KEPT:
                del _by_strings[next(iter(_by_strings))]  # the oldest
            _by_strings[key] = found
        return found

    def __bool__(self) -> bool:
        return bool(self.plain)

    def joined(self, other: HiddenValues) -> HiddenValues:
        """Both sets of values (a log context inside another)."""
        both = HiddenValues()
        both.plain = tuple(sorted({*self.plain, *other.plain}))
        both.packed = tuple(sorted({*self.packed, *other.packed}))
        both.reach = max(self.reach, other.reach)
        return both

    def redact(self, text: str, *, until: int | None = None) -> str:
        """`text` with every span that holds a hidden value, raw or escaped, replaced; with
        `until`, only what comes before that position of `text` (an echo that starts before
        it is replaced whole), and the work is bounded by `until`, not by the text."""
        if not self.plain:
            return text[:until]
        if until is not None and len(text) > until + self.reach:
            text = text[: until + self.reach]
        spans = self._found(text)
        for layers in decoded_views(text):
            spans += [original_span(layers, *span) for span in self._found(layers[-1].text)]
        return _replaced(text, spans, len(text) if until is None else until)

    def _found(self, text: str) -> list[tuple[int, int]]:
        spans = _occurrences(text, self.plain)
        compact = without_line_breaks(text)
        if compact is None:
            return spans + _occurrences(text, self.packed)
        return spans + [
            _through(compact, *span) for span in _occurrences(compact.text, self.packed)
        ]


PREPARED_KEPT = 256
PREPARED_MAX_CHARS = 2048  # a set of larger values is prepared for its request only
_prepared: dict[frozenset[str], HiddenValues] = {}
_by_strings: dict[tuple[str, ...], HiddenValues] = {}  # `of`'s lists of strings, as given


def _through(layer: Layer, start: int, end: int) -> tuple[int, int]:
    return layer.source_span(start, end)


def _occurrences(text: str, needles: tuple[str, ...]) -> list[tuple[int, int]]:
    spans = []
    for needle in [needle for needle in needles if needle in text]:  # usually none: one scan each
        found = text.find(needle)
        while found != -1:
            spans.append((found, found + len(needle)))
            found = text.find(needle, found + 1)
    return spans


def _replaced(text: str, spans: list[tuple[int, int]], until: int) -> str:
    """`text[:until]` with each span that starts there (overlapping ones merged) replaced by
    REDACTED, whole."""
    parts, kept_from = [], 0
    for start, end in _merged(spans):
        if start >= until:
            break
        parts += [text[kept_from:start], REDACTED]
        kept_from = end
    if kept_from < until:
        parts.append(text[kept_from:until])
    return "".join(parts)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _packed_forms(text: str) -> set[str]:
    """The part of the value's base64 that does not depend on what surrounds it, for each of
    the three alignments a longer blob may put it at (both alphabets), and its hex."""
    try:
        data = text.encode()
    except UnicodeError:  # a lone surrogate has no UTF-8: nothing an upstream could encode
        return set()
    forms = {data.hex(), data.hex().upper()}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode()
        core = encoded[(8 * offset + 5) // 6 : (8 * (offset + len(data))) // 6]
        forms |= {core, core.translate(_URLSAFE)}
    return forms


_URLSAFE = str.maketrans("+/", "-_")


def _base64_text(text: str) -> str | None:
    """A Basic credential stored encoded: its `user:password` form, which an upstream may echo."""
    if len(text) % 4 or len(text) < 8 or not text.isascii():
        return None
    try:
        decoded = base64.b64decode(text, validate=True).decode()
    except (binascii.Error, ValueError):
        return None
    return decoded if decoded.isprintable() else None
