"""The console's screenshots in docs/console/ and what they must show: one per page of the
navigation, each stamped (a PNG text chunk) with the navigation it was taken with, so a page
added to the console without new pictures is found without a browser."""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from app.api.console import CONSOLE

PAGES = CONSOLE / "assets" / "pages"
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
STAMP = b"toolgate-console"
_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class NavPage:
    id: str
    title: str
    roles: tuple[str, ...]


def _field(source: str, name: str) -> str | None:
    found = re.search(rf"\b{name}:\s*(\"[^\"]*\"|\[[^\]]*\]|false|true)", source)
    return found.group(1) if found else None


def _page(source: str) -> NavPage | None:
    """A page object's literal (up to its render) as a NavPage; None when it is not in the nav."""
    head = source.split("render(", 1)[0]
    if _field(head, "nav") == "false":
        return None
    page_id, title, roles = _field(head, "id"), _field(head, "title"), _field(head, "roles")
    assert page_id and title and roles, f"a page without id, title or roles: {head[:200]}"
    return NavPage(json.loads(page_id), json.loads(title), tuple(json.loads(roles)))


def nav_pages() -> list[NavPage]:
    """The pages the console's navigation offers, in order, read from pages/index.js."""
    index = (PAGES / "index.js").read_text()
    imports = dict(re.findall(r'import \{ (\w+) \} from "\./([\w-]+\.js)";', index))
    listed = index.split("export const pages = [", 1)[1].split("];", 1)[0]
    pages: list[NavPage | None] = []
    for entry in re.findall(r"\w+", listed):
        source = (PAGES / imports[entry]).read_text()
        pages.append(_page(source.split(f"export const {entry} = {{", 1)[1]))
    return [page for page in pages if page is not None]


def nav_titles(role: str) -> list[str]:
    return [page.title for page in nav_pages() if role in page.roles]


def stamped(png: bytes, stamp: dict[str, object]) -> bytes:
    """The PNG with `stamp` as a tEXt chunk right after its header chunk."""
    assert png.startswith(_SIGNATURE)
    (length,) = struct.unpack(">I", png[8:12])
    end = 8 + 12 + length  # the IHDR chunk: length, type, data, CRC
    data = STAMP + b"\0" + json.dumps(stamp, sort_keys=True).encode("ascii")
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + data))
    return png[:end] + chunk + png[end:]


def stamp_of(path: Path) -> dict[str, object] | None:
    """The stamp `stamped` wrote into the PNG at `path`, if any."""
    png = path.read_bytes()
    at = 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"tEXt" and data.startswith(STAMP + b"\0"):
            stamp: dict[str, object] = json.loads(data[len(STAMP) + 1 :])
            return stamp
        if kind == b"IDAT":
            return None
        at += 12 + length
    return None
