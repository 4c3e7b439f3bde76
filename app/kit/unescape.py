"""Undo the escapes an upstream may put on text it echoes, keeping track of where each part came
from, so that a value found in the decoded text can be cut out of the original.

Three families of escapes are undone: JSON string escapes (`\\uXXXX` in either case, surrogate
pairs, `\\"`, `\\\\`, `\\/`, `\\n` ...) with JS/Python `\\xHH` and `\\'`; HTML character
references (decimal, hexadecimal, and the named ones, `&apos;` included); percent-encoding
(`%XX` runs in either case, decoded as UTF-8). `decoded_layers` gives the text after each
family's pass, family after family, again while the text changes (at most MAX_LAYERS layers),
so double percent-encoding and JSON inside a JSON string come undone too. An escape that
produces another family's marker (`\\u0026` gives `&`, `&#92;` and `%5C` give `\\`) waits until
nothing else is left, so that layers come off outermost first.

Each pass is one regular-expression scan that starts only at its marker character, and a text
without any marker is not scanned at all: work is linear in the text.

A fourth family has no marker: UTF-8 read by a single-byte code page (Latin-1, windows-1252),
as servers that decode headers so echo them (`José` sent, `JosÃ©` echoed). `misread_undone`
reads such runs back as UTF-8; `decoded_views` gives it beside each escape layer. An ASCII text
is not scanned for it. The map from a layer back
to its source is built only when asked (a match was found), since most texts hide nothing.
"""

from __future__ import annotations

import html
import json
import operator
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

MAX_LAYERS = 8
MAX_MISREADS = 3
# Short decoded runs kept per family and mode: most texts repeat a few (`\\"`, `\\n`, `%20`).
_CACHED_RUNS = 4096
_CACHED_LENGTH = 64


class Pieces:
    """A decoded run cut in pieces: where each starts, and the span of the run it came from.
    A piece is what one escape decoded to (or one character of a `%XX` run), or copied text
    (as long as its source: an escape left as it was)."""

    __slots__ = ("position", "source_ends", "source_starts", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.source_starts: list[int] = []
        self.source_ends: list[int] = []
        self.position = 0

    def add(self, length: int, source_start: int, source_end: int) -> None:
        self.starts.append(self.position)
        self.source_starts.append(source_start)
        self.source_ends.append(source_end)
        self.position += length

    def source_position(self, position: int, total: int, *, end: bool) -> int:
        """`Changes.source_position` within the pieces (`total`: their decoded length)."""
        index = bisect_right(self.starts, position) - 1
        following = self.starts[index + 1] if index + 1 < len(self.starts) else total
        start, source_start = self.starts[index], self.source_starts[index]
        if following - start == self.source_ends[index] - source_start:  # copied
            return source_start + (position - start) + end
        return self.source_ends[index] if end else source_start


def _json_token(token: str) -> str:
    simple = _SIMPLE.get(token)
    if simple is not None:
        return simple
    if len(token) == 12:  # a surrogate pair
        high, low = int(token[2:6], 16), int(token[8:12], 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    return chr(int(token[2:], 16))


def _json_run(run: str) -> str:
    """Adjacent JSON escapes, decoded in C (`\\x` and `\\'` are not JSON: one by one)."""
    try:
        decoded: str = json.loads(f'"{run}"')
    except ValueError:
        return _JSON_TOKEN.sub(lambda match: _json_token(match.group()), run)
    return decoded


def _percent_run(run: str) -> str:
    # Bytes that are not UTF-8 become lone surrogates: one character per byte.
    return bytes.fromhex(run.replace("%", "")).decode("utf-8", "surrogateescape")


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
_JSON_TOKEN = re.compile(
    r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[\"'\\/bfnrt])"
)
_HTML_TOKEN = re.compile(r"&(?:#[0-9]{1,7};?|#[xX][0-9a-fA-F]{1,6};?|[A-Za-z][A-Za-z0-9]{1,31};)")
_PERCENT_RUN = re.compile(r"%[0-9a-fA-F]{2}(?:%[0-9a-fA-F]{2})*")


def _runs_of(token: re.Pattern[str]) -> re.Pattern[str]:
    # Written to start with the token itself: a pattern that starts with a literal character is
    # scanned for it quickly, one that starts with a repeated group is tried at every position.
    return re.compile(f"{token.pattern}(?:{token.pattern})*")


@dataclass(frozen=True)
class _Family:
    """Escapes that start with `marker`: found as runs of adjacent escapes, decoded a run at a
    time, or one `token` at a time where a run must be split."""

    marker: str
    runs: re.Pattern[str]
    tokens: re.Pattern[str]
    run_unescaped: Callable[[str], str]
    token_unescaped: Callable[[str], str]
    others: str  # the other families' markers


_FAMILIES = (
    _Family(
        "\\",
        _runs_of(_JSON_TOKEN),
        _JSON_TOKEN,
        _json_run,
        _json_token,
        "&%",
    ),
    _Family(
        "&",
        _runs_of(_HTML_TOKEN),
        _HTML_TOKEN,
        html.unescape,  # an unknown name stays as it is
        html.unescape,
        "\\%",
    ),
    _Family("%", _PERCENT_RUN, _PERCENT_RUN, _percent_run, _percent_run, "\\&"),
)


class _Runs(dict[str, str]):
    """Decoded runs by their text; a missing one is decoded (and kept if short)."""

    def __init__(self, decoder: _Decoder) -> None:
        super().__init__()
        self.decoder = decoder

    def __missing__(self, run: str) -> str:
        decoded = self.decoder.run(run)
        if len(run) <= _CACHED_LENGTH:
            if len(self) >= _CACHED_RUNS:
                self.clear()
            self[run] = decoded
        return decoded


class _Decoder:
    """One family's escapes, decoded (`careful`: an escape whose text holds another family's
    marker stays as it is)."""

    def __init__(self, family: _Family, *, careful: bool) -> None:
        self.family = family
        self.careful = careful
        self._split = re.compile(f"({family.runs.pattern})").split
        self._decoded = _Runs(self)

    def run(self, run: str) -> str:
        decoded = self.family.run_unescaped(run)
        if self.careful and self._crosses(decoded):
            decoded = "".join(self.tokens(self.family.tokens.findall(run)))
        return decoded

    def tokens(self, tokens: list[str]) -> list[str]:
        """Each of a run's escapes decoded (`token`). Careful: an escape that decodes to this
        family's marker just before one kept as it is stays as it is too, and so on leftwards:
        `\\\\` decoded before a kept `\\u0026` would make `\\\\u0026`, a backslash
        escape and the text `u0026`, and the `\\&` they stood for would never show."""
        decoded = [self.token(token) for token in tokens]
        if self.careful:
            marker = self.family.marker
            for index in range(len(tokens) - 1, 0, -1):
                kept = decoded[index] == tokens[index]
                if kept and decoded[index - 1].endswith(marker):
                    decoded[index - 1] = tokens[index - 1]
        return decoded

    def token(self, token: str) -> str:
        decoded = self.family.token_unescaped(token)
        return token if self.careful and self._crosses(decoded) else decoded

    def _crosses(self, decoded: str) -> bool:
        return any(marker in decoded for marker in self.family.others)

    def split(self, source: str) -> list[str]:
        """text, run, text, run, ..., text (split in C); one part when there is no escape."""
        return self._split(source)

    def layer(self, source: str, parts: list[str]) -> Layer | None:
        """`source` (split in `parts`) with this family's escapes decoded, or None if that
        changes nothing."""
        runs = parts[1::2]
        decoded = [self._decoded[run] for run in runs]
        if decoded == runs:
            return None
        parts = parts.copy()
        parts[1::2] = decoded
        return Layer("".join(parts), source, lambda: self._changes(parts, runs))

    def _changes(self, parts: list[str], runs: list[str]) -> Changes:
        """Where each run was in the source, from the parts' lengths (computed in C)."""
        lengths = list(map(len, parts))
        decoded_lengths = lengths[1::2]
        lengths[1::2] = map(len, runs)
        offsets = list(accumulate(lengths, initial=0))
        changes = Changes(self.pieces)
        changes.source_starts = offsets[1::2][: len(runs)]
        changes.source_ends = offsets[2::2][: len(runs)]
        changes.lengths = decoded_lengths
        return changes

    def pieces(self, run: str) -> Pieces:
        """A decoded run's pieces: each escape, or each character of a decoded `%XX` run (3
        source characters per UTF-8 byte)."""
        pieces = Pieces()
        matches = list(self.family.tokens.finditer(run))
        for match, decoded in zip(matches, self.tokens([m.group() for m in matches]), strict=True):
            token, offset = match.group(), match.start()
            if self.family.marker == "%" and decoded != token:
                for char in decoded:
                    width = 3 * _utf8_width(char)
                    pieces.add(1, offset, offset + width)
                    offset += width
            else:
                pieces.add(len(decoded), offset, match.end())
        return pieces


_CAREFUL = tuple(_Decoder(family, careful=True) for family in _FAMILIES)
_EVERYTHING = tuple(_Decoder(family, careful=False) for family in _FAMILIES)


class Changes:
    """Where a layer differs from its source: spans of the source replaced by text of a given
    length (a decoded run, or nothing for removed line breaks). `refine` cuts a replaced span
    in pieces, to map a position inside it."""

    __slots__ = ("_starts", "lengths", "refine", "source_ends", "source_starts")

    def __init__(self, refine: Callable[[str], Pieces] | None = None) -> None:
        self.refine = refine
        self.source_starts: list[int] = []
        self.source_ends: list[int] = []
        self.lengths: list[int] = []
        self._starts: list[int] | None = None

    def record(self, source_start: int, source_end: int, length: int) -> None:
        self.source_starts.append(source_start)
        self.source_ends.append(source_end)
        self.lengths.append(length)

    def source_position(self, source: str, position: int, *, end: bool) -> int:
        """Where the character at `position` of the layer came from: its first source
        character, or (`end`) the one after its last."""
        if self._starts is None:  # where each change starts in the layer, computed in C
            replaced = map(operator.sub, self.source_ends, self.source_starts)
            shifts = accumulate(map(operator.sub, self.lengths, replaced), initial=0)
            self._starts = list(map(operator.add, self.source_starts, shifts))
        index = bisect_right(self._starts, position) - 1
        if index < 0:
            return position + end
        start, length = self._starts[index], self.lengths[index]
        if position >= start + length:  # copied, after this change
            return self.source_ends[index] + (position - start - length) + end
        source_start = self.source_starts[index]
        if self.refine is None:  # a change that cannot be cut: all of it
            return self.source_ends[index] if end else source_start
        pieces = self.refine(source[source_start : self.source_ends[index]])
        return source_start + pieces.source_position(position - start, length, end=end)


class Layer:
    """A text derived from `source` (decoded, or with line breaks removed), and the way back."""

    __slots__ = ("_changes", "_found", "source", "text")

    def __init__(self, text: str, source: str, changes: Callable[[], Changes]) -> None:
        self.text = text
        self.source = source
        self._found = changes
        self._changes: Changes | None = None

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        """The span of `source` that `text[start:end]` (not empty) came from. A span that
        starts or ends inside an escape's output covers that whole escape."""
        if self._changes is None:
            self._changes = self._found()
        return (
            self._changes.source_position(self.source, start, end=False),
            self._changes.source_position(self.source, end - 1, end=True),
        )


def decoded_views(text: str) -> list[list[Layer]]:
    """Every text a reader gets back from `text`, each as the layers that lead to it (the last
    is the view): the escape passes' layers (`decoded_layers`) and, from `text` and from each
    of them, its single-byte misreadings read back as UTF-8 (`misread_undone`), again while
    that changes (at most MAX_MISREADS: a value read as Latin-1 by two servers in turn). A
    misreading is searched beside every layer rather than taking a layer of its own, since
    escapes and misreadings come in any order and a layer undoes one family at a time."""
    views: list[list[Layer]] = []
    chain: list[Layer] = []
    for layer in [None, *decoded_layers(text)]:
        if layer is not None:
            chain = [*chain, layer]
            views.append(chain)
        branch = chain
        for _ in range(MAX_MISREADS):
            misread = misread_undone(branch[-1].text if branch else text)
            if misread is None:
                break
            branch = [*branch, misread]
            views.append(branch)
    return views


def decoded_layers(text: str) -> list[Layer]:
    """`text` after each pass that changed it, in order (at most MAX_LAYERS); empty when there
    is nothing to decode."""
    layers: list[Layer] = []
    source = text
    while len(layers) < MAX_LAYERS:
        layer = _next_layer(source)
        if layer is None:
            break
        layers.append(layer)
        source = layer.text
    return layers


def _next_layer(source: str) -> Layer | None:
    """The first family's pass that changes `source`, careful ones first."""
    split: dict[str, list[str]] = {}  # each family's split, shared by its two modes
    for decoders in (_CAREFUL, _EVERYTHING):
        for decoder in decoders:
            marker = decoder.family.marker
            if marker not in source:
                continue
            parts = split.get(marker) or split.setdefault(marker, decoder.split(source))
            if len(parts) > 1:
                layer = decoder.layer(source, parts)
                if layer is not None:
                    return layer
    return None


def _cp1252_char(byte: int) -> str:
    try:
        return bytes([byte]).decode("cp1252")
    except UnicodeDecodeError:  # undefined: no character of its own
        return ""


# The characters windows-1252 gives for 0x80-0x9F instead of Latin-1's C1 controls (it leaves
# five bytes undefined, which the WHATWG decoder reads as C1 controls, as Latin-1 does), mapped
# to the byte they stand for: then every character of a misreading is one byte, U+0000-U+00FF.
_AS_BYTES = str.maketrans(
    {char: chr(byte) for byte in range(0x80, 0xA0) for char in _cp1252_char(byte)}
)
# One well-formed UTF-8 sequence of 2-4 bytes (RFC 3629: no overlong form, no surrogate), written
# as the Latin-1 characters of its bytes.
_UTF8_SEQUENCE = (
    "[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
    "|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}"
    "|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)
_UTF8_RUN = re.compile(f"(?:{_UTF8_SEQUENCE})+")
_CP1252_OWN = re.compile(f"[{''.join(chr(key) for key in _AS_BYTES)}]")
# A misreading always holds a continuation byte's character (0x80-0xBF): text without one (most
# text in any language) is passed over by one quick scan.
_CONTINUATION = re.compile(f"[\x80-\xbf{_CP1252_OWN.pattern[1:-1]}]")
_UTF8_ONE = re.compile(_UTF8_SEQUENCE)


def misread_undone(source: str) -> Layer | None:
    """`source` with each run of characters that a single-byte code page (Latin-1,
    windows-1252) made of well-formed UTF-8 read back as UTF-8: a header that a server decoded
    as Latin-1 and echoed (`José` sent, `JosÃ©` echoed); None when there is none. Anything
    else stays as it is (`café` in Latin-1: `é` alone is no UTF-8). Found by one scan in C,
    and only in a text with a character outside ASCII."""
    if source.isascii() or _CONTINUATION.search(source) is None:
        return None
    # One character for one, so positions hold; most texts have none of windows-1252's own.
    as_bytes = source.translate(_AS_BYTES) if _CP1252_OWN.search(source) else source
    spans = [match.span() for match in _UTF8_RUN.finditer(as_bytes)]
    if not spans:
        return None
    parts, kept = [], 0
    for start, end in spans:
        parts += [source[kept:start], as_bytes[start:end].encode("latin-1").decode("utf-8")]
        kept = end
    parts.append(source[kept:])

    def changes() -> Changes:
        found = Changes(_misread_pieces)
        for (start, end), decoded in zip(spans, parts[1::2], strict=False):
            found.record(start, end, len(decoded))
        return found

    return Layer("".join(parts), source, changes)


def _misread_pieces(run: str) -> Pieces:
    """A misread run's characters, each with the 2-4 source characters of its bytes."""
    pieces = Pieces()
    for match in _UTF8_ONE.finditer(run.translate(_AS_BYTES)):
        pieces.add(1, match.start(), match.end())
    return pieces


def without_line_breaks(text: str) -> Layer | None:
    """`text` with its line breaks removed (MIME base64 wraps every 76 characters), or None
    when it has none."""
    if "\n" not in text and "\r" not in text:
        return None
    return Layer(text.replace("\r", "").replace("\n", ""), text, lambda: _line_breaks(text))


def original_span(layers: list[Layer], start: int, end: int) -> tuple[int, int]:
    """A span of the last of `layers` (each derived from the one before) in the first's
    source."""
    for layer in reversed(layers):
        start, end = layer.source_span(start, end)
    return start, end


_LINE_BREAKS = re.compile(r"[\r\n]+")


def _line_breaks(source: str) -> Changes:
    changes = Changes()
    for match in _LINE_BREAKS.finditer(source):
        changes.record(match.start(), match.end(), 0)
    return changes


def _utf8_width(char: str) -> int:
    if "\udc80" <= char <= "\udcff":  # one byte that was not UTF-8 (surrogateescape)
        return 1
    return len(char.encode("utf-8"))
