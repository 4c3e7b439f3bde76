"""The forms in which real upstreams echo a value they received, as encoders: the redaction
tests feed them to the scrubber, the local upstream (`/echoes`) answers with all of them."""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus, unquote, unquote_plus

Encoder = Callable[[str], str]


def go_json(value: str) -> str:
    """Go's encoding/json: `<`, `>`, `&` (and U+2028/2029) as `\\u003c`, lower-case hex."""
    escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    for char in "<>&\u2028\u2029":
        escaped = escaped.replace(char, f"\\u{ord(char):04x}")
    return escaped


def dotnet_json(value: str) -> str:
    """.NET System.Text.Json's default encoder: HTML-sensitive characters, `+`, `'`, a backtick
    and everything outside ASCII as `\\uXXXX` with upper-case hex."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char in "<>&'+`" or not " " <= char <= "~":
            out += [f"\\u{unit:04X}" for unit in _utf16_units(char)]
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def html_decimal(value: str) -> str:
    """Every character but letters and digits as `&#NN;` (`/` is `&#47;`)."""
    return "".join(char if char.isalnum() else f"&#{ord(char)};" for char in value)


def html_hex(value: str) -> str:
    """Every character but letters and digits as `&#xHH;` (`/` is `&#x2F;`)."""
    return "".join(char if char.isalnum() else f"&#x{ord(char):X};" for char in value)


def xml_escape(value: str) -> str:
    """XML's five named entities, `&apos;` among them."""
    return html.escape(value).replace("&#x27;", "&apos;")


def encode_uri_component(value: str) -> str:
    """JavaScript's encodeURIComponent: keeps `-_.!~*'()`."""
    return quote(value, safe="-_.!~*'()")


def base64_inside(value: str) -> str:
    """The value inside a longer blob, at an offset that is not a multiple of 3."""
    return base64.b64encode(b'{"user": "' + value.encode() + b'", "n": 1}').decode()


def mime_base64(value: str) -> str:
    """MIME base64 (76-character lines) with a line break inside the value's encoding."""
    return base64.encodebytes(b"x" * 55 + value.encode() + b"-end").decode()


def hex_lower(value: str) -> str:
    return value.encode().hex()


def hex_upper(value: str) -> str:
    return value.encode().hex().upper()


def json_u_every_char(value: str) -> str:
    """`\\u` on every character (UTF-16 code units, surrogate pairs beyond the BMP)."""
    return "".join(f"\\u{unit:04x}" for char in value for unit in _utf16_units(char))


def percent_every_byte(value: str) -> str:
    return "".join(f"%{byte:02X}" for byte in value.encode())


def double_percent(value: str) -> str:
    return quote(quote(value, safe=""), safe="")


def latin1_misread(value: str) -> str:
    """The value's UTF-8 bytes read as Latin-1: how Python (Starlette, aiohttp), Node and Java
    servers decode a header, then echo it (`José` comes back as `JosÃ©`)."""
    return value.encode().decode("latin-1")


def cp1252_misread(value: str) -> str:
    """The value's UTF-8 bytes read as windows-1252 (the WHATWG reading of "latin1": the five
    bytes it leaves undefined stay C1 controls), as browsers and .NET servers do."""
    return "".join(_cp1252_char(byte) for byte in value.encode())


def _cp1252_char(byte: int) -> str:
    try:
        return bytes([byte]).decode("cp1252")
    except UnicodeDecodeError:
        return chr(byte)


def json_in_json(value: str) -> str:
    """A JSON body echoed inside a JSON string (an error message quoting the request)."""
    return json.dumps(json.dumps({"user": value}))[1:-1]


# The forms that leaked before redaction decoded (issue 25), each with a value that shows it:
# a value the old enumeration happened to cover would prove nothing.
LEAKED_FORMS: dict[str, tuple[Encoder, str]] = {
    "go encoding/json": (go_json, "zq1/a<b>c&d=e"),
    ".NET \\u002B": (dotnet_json, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
    ".NET \\u0027": (dotnet_json, "o'brien-zq2-key"),
    ".NET upper-case hex": (dotnet_json, "zq3<k\u00e9y>"),
    "HTML decimal &#47;": (html_decimal, "zq4/a+b=c"),
    "HTML hex &#x2F;": (html_hex, "zq5/a+b=c"),
    "JS encodeURIComponent": (encode_uri_component, "zq6(a)!b*c'd/e"),
    "base64 at an offset": (base64_inside, "zq7-secret-value"),
    "MIME base64": (mime_base64, "zq8-secret-value-that-is-long"),
    "hex": (hex_lower, "zq9-secret"),
    "\\u on every character": (json_u_every_char, "zqa-secret/+"),
    "%XX on every byte": (percent_every_byte, "zqb-secret"),
    "XML &apos;": (xml_escape, "zqc-o'brien"),
    "double percent-encoding": (double_percent, "zqd/a+b=c&d"),
    "JSON inside a JSON string": (json_in_json, 'zqe/"quoted"/k\u00e9y'),
    # A header echoed as a server that decodes headers as Latin-1 reads it (issue 43).
    "Latin-1 header echo": (latin1_misread, "Jos\u00e9-zqf-\u20ac-key"),
    "windows-1252 header echo": (cp1252_misread, "Jos\u00e9-zqg-\u20ac\u2019-key"),
}

# Everything an upstream may do, including the forms the old enumeration covered.
ALL_FORMS: dict[str, Encoder] = {
    **{name: encoder for name, (encoder, _) in LEAKED_FORMS.items()},
    "raw": lambda value: value,
    "hex upper-case": hex_upper,
    "percent (quote, safe='')": lambda value: quote(value, safe=""),
    "percent, lower-case hex": lambda value: re.sub(
        "%[0-9A-F]{2}", lambda m: m.group().lower(), quote(value, safe="")
    ),
    "quote_plus": quote_plus,
    "JSON (ensure_ascii)": lambda value: json.dumps(value)[1:-1],
    "JSON with \\/": lambda value: json.dumps(value)[1:-1].replace("/", "\\/"),
    "HTML escape": html.escape,
    "base64": lambda value: base64.b64encode(value.encode()).decode(),
    "base64 url-safe": lambda value: base64.urlsafe_b64encode(value.encode()).decode(),
}


_JSON_ESCAPE = re.compile(r'\\u([0-9a-fA-F]{4})|\\(["\\/bfnrt])')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _json_unescaped(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        return chr(int(match[1], 16)) if match[1] else _SIMPLE[match[2]]

    decoded = _JSON_ESCAPE.sub(one, text)
    return decoded.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _unpacked(text: str, size: int) -> list[str]:
    """Every hex and base64 run of `text` long enough to hold `size` bytes decoded, at every
    alignment."""
    found = []
    for run in re.findall(f"[0-9a-fA-F]{{{2 * size},}}", text):
        for start in (0, 1):
            usable = run[start:][: (len(run) - start) // 2 * 2]
            found.append(bytes.fromhex(usable).decode(errors="replace"))
    base64_run = f"[A-Za-z0-9+/_-]{{{max(4, 4 * size // 3 - 2)},}}"
    for run in re.findall(base64_run, re.sub(r"[\r\n]", "", text)):
        standard = run.replace("-", "+").replace("_", "/")
        for start in range(4):
            usable = standard[start:]
            usable = usable[: len(usable) - 1] if len(usable) % 4 == 1 else usable
            usable += "=" * (-len(usable) % 4)  # the last, partial group too
            try:
                found.append(base64.b64decode(usable).decode(errors="replace"))
            except binascii.Error:
                continue
    return found


_HIGH_RUN = re.compile(
    "[\u0080-\u00ff\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192"
    "\u02c6\u02dc\u2013\u2014\u2018-\u201a\u201c-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a"
    "\u20ac\u2122]+"
)


def _misread_undone(text: str) -> str:
    """Each run of characters a single-byte code page (Latin-1, windows-1252) gives, read back
    as the UTF-8 bytes they were."""

    def one(match: re.Match[str]) -> str:
        data = bytes(
            ord(char) if ord(char) < 256 else char.encode("cp1252")[0] for char in match.group()
        )
        return data.decode("utf-8", "replace")

    return _HIGH_RUN.sub(one, text)


def revealed(text: str, size: int = 4) -> list[str]:
    """What a reader can get back from `text`: the text, undone by the decoders above in every
    order up to three deep, and the hex and base64 (of at least `size` bytes) inside any of
    those. The tests' own oracle, written apart from the service's decoder."""
    decoders: list[Callable[[str], str]] = [
        _json_unescaped,
        html.unescape,
        unquote,
        unquote_plus,
        _misread_undone,
    ]
    seen = {text}
    frontier = {text}
    for _ in range(3):
        frontier = {decode(t) for t in frontier for decode in decoders} - seen
        seen |= frontier
    return [*seen, *(u for t in seen for u in _unpacked(t, size))]


def leaks(value: str, text: str) -> bool:
    """Whether `value` can be read back from `text`."""
    return any(value in candidate for candidate in revealed(text, len(value.encode())))
