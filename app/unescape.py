"""Undo the escapes an upstream may put on text it echoes, keeping track of where each part came
from, so that a value found in the decoded text can be cut out of the original.

One pass undoes, left to right and at once: JSON string escapes (`\\uXXXX` in either case,
surrogate pairs, `\\"`, `\\\\`, `\\/`, `\\n` ...), JS/Python `\\xHH` and `\\'`, HTML character
references (decimal, hexadecimal, and the named ones, `&apos;` included) and percent-encoding
(`%XX` runs in either case, decoded as UTF-8). `decoded_layers` repeats the pass while the text
changes, at most `MAX_PASSES` times, so double percent-encoding and JSON inside a JSON string
come undone too. An escape that produces another family's marker (`\\u0026` gives `&`, `&#92;`
gives `\\`, `%5C` gives `\\`) waits until nothing else is left, so layers come off outermost first.
Each pass is one or two regular-expression scans: work is linear in the text.

The map from a layer back to its source is built only when asked (a match was found), since
most texts hold nothing to hide.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Callable

MAX_PASSES = 6
# Characters that start an escape: a text with none of them has nothing to decode.
_MARKERS = ("\\", "&", "%")
_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a surrogate pair
    r"|\\u[0-9a-fA-F]{4}"
    r"|\\x[0-9a-fA-F]{2}"
    r"|\\[\"'\\/bfnrt]"
    r"|&#[0-9]{1,7};?"
    r"|&#[xX][0-9a-fA-F]{1,6};?"
    r"|&[A-Za-z][A-Za-z0-9]{1,31};"
    r"|(?:%[0-9a-fA-F]{2})+"
)
_SIMPLE = {
    '\\"': '"',
    "\\'": "'",
    "\\\\": "\\",
    "\\/": "/",
    "\\b": "\b",
    "\\f": "\f",
    "\\n": "\n",
    "\\r": "\r",
    "\\t": "\t",
}
_LINE_BREAKS = re.compile(r"[\r\n]+")
_KEPT = re.compile(r"[^\r\n]+")

# Where each piece of a layer starts, and the span of its source it came from.
Pieces = tuple[list[int], list[int], list[int]]


def unescaped(token: str) -> str:
    """The text one escape (or one run of `%XX`) stands for."""
    first = token[0]
    if first == "%":  # bytes that are not UTF-8 become lone surrogates: one character per byte
        return bytes.fromhex(token.replace("%", "")).decode("utf-8", "surrogateescape")
    if first == "&":
        return html.unescape(token)  # an unknown name stays as it is
    simple = _SIMPLE.get(token)
    if simple is not None:
        return simple
    if len(token) == 12:
        high, low = int(token[2:6], 16), int(token[8:12], 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    return chr(int(token[2:], 16))


# The characters that start another family's escapes. An escape producing one is decoded only
# once nothing else is left: `&#92;\\\\u00b9` (HTML escapes inside JSON inside a JSON string) is
# `\` + `¹`; decoding `&#92;` in the first pass would make it `\u00b9`, one escape.
_OTHER_MARKERS = {"\\": "&%", "&": "\\%", "%": "\\&"}


def unescaped_carefully(token: str) -> str:
    """`unescaped`, except that an escape producing another family's marker stays as it is."""
    decoded = unescaped(token)
    if any(marker in decoded for marker in _OTHER_MARKERS[token[0]]):
        return token
    return decoded


def _replacement(match: re.Match[str]) -> str:
    return unescaped(match.group())


def _careful_replacement(match: re.Match[str]) -> str:
    return unescaped_carefully(match.group())


class Layer:
    """A text derived from `source` (decoded, or with line breaks removed), and the way back."""

    __slots__ = ("_build", "_pieces", "source", "text")

    def __init__(self, text: str, source: str, build: Callable[[str], Pieces]) -> None:
        self.text = text
        self.source = source
        self._build = build
        self._pieces: Pieces | None = None

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        """The span of `source` that `text[start:end]` (not empty) came from. A span that
        starts or ends inside an escape's output covers that whole escape."""
        if self._pieces is None:
            self._pieces = self._build(self.source)
        starts, source_starts, source_ends = self._pieces
        first = bisect_right(starts, start) - 1
        last = bisect_right(starts, end - 1) - 1
        if self._literal(first):
            start = source_starts[first] + (start - starts[first])
        else:
            start = source_starts[first]
        if self._literal(last):
            return start, source_starts[last] + (end - starts[last])
        return start, source_ends[last]

    def _literal(self, index: int) -> bool:
        """Copied unchanged (one character for one), rather than decoded from an escape."""
        starts, source_starts, source_ends = self._pieces or ([], [], [])
        following = starts[index + 1] if index + 1 < len(starts) else len(self.text)
        return following - starts[index] == source_ends[index] - source_starts[index]


def decoded_layers(text: str) -> list[Layer]:
    """`text` decoded once, twice, ... while that changes it (at most MAX_PASSES times); empty
    when there is nothing to decode."""
    layers: list[Layer] = []
    source = text
    for _ in range(MAX_PASSES):
        if not any(marker in source for marker in _MARKERS):
            break
        decoded, build = _ESCAPE.sub(_careful_replacement, source), _carefully_decoded_pieces
        if decoded == source:  # only escapes that produce other markers are left
            decoded, build = _ESCAPE.sub(_replacement, source), _decoded_pieces
            if decoded == source:
                break
        layers.append(Layer(decoded, source, build))
        source = decoded
    return layers


def without_line_breaks(text: str) -> Layer | None:
    """`text` with its line breaks removed (MIME base64 wraps every 76 characters), or None
    when it has none."""
    if "\n" not in text and "\r" not in text:
        return None
    return Layer(_LINE_BREAKS.sub("", text), text, _kept_pieces)


def original_span(layers: list[Layer], start: int, end: int) -> tuple[int, int]:
    """A span of the last of `layers` (each decoded from the one before) in the first's
    source."""
    for layer in reversed(layers):
        start, end = layer.source_span(start, end)
    return start, end


def _kept_pieces(source: str) -> Pieces:
    starts: list[int] = []
    source_starts: list[int] = []
    source_ends: list[int] = []
    position = 0
    for match in _KEPT.finditer(source):
        starts.append(position)
        source_starts.append(match.start())
        source_ends.append(match.end())
        position += match.end() - match.start()
    return starts, source_starts, source_ends


def _decoded_pieces(source: str) -> Pieces:
    return _pieces(source, unescaped)


def _carefully_decoded_pieces(source: str) -> Pieces:
    return _pieces(source, unescaped_carefully)


def _pieces(source: str, decode: Callable[[str], str]) -> Pieces:
    """The decoded text's pieces: each run between escapes, each escape, and each character
    of a decoded `%XX` run (3 source characters per UTF-8 byte)."""
    starts: list[int] = []
    source_starts: list[int] = []
    source_ends: list[int] = []

    def piece(length: int, source_start: int, source_end: int) -> None:
        starts.append(starts[-1] + lengths[-1] if starts else 0)
        lengths.append(length)
        source_starts.append(source_start)
        source_ends.append(source_end)

    lengths: list[int] = []
    last = 0
    for match in _ESCAPE.finditer(source):
        if match.start() > last:
            piece(match.start() - last, last, match.start())
        token = match.group()
        decoded = decode(token)
        if token[0] == "%" and decoded != token:
            offset = match.start()
            for char in decoded:
                width = 3 * _utf8_width(char)
                piece(1, offset, offset + width)
                offset += width
        else:
            piece(len(decoded), match.start(), match.end())
        last = match.end()
    if last < len(source):
        piece(len(source) - last, last, len(source))
    return starts, source_starts, source_ends


def _utf8_width(char: str) -> int:
    if "\udc80" <= char <= "\udcff":  # one byte that was not UTF-8 (surrogateescape)
        return 1
    return len(char.encode("utf-8"))
