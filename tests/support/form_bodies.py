"""Form bodies checked on the wire where Prism cannot load the document (Stripe's 2.4 MB
description did not load in 400 s here): a local server records each request as it arrives,
and each recorded form body is checked against its operation's request body: the media type,
every key a documented member (`metadata[order_id]` belongs to `metadata`), every required
member sent, and each member whose `encoding` says `deepObject` sent as `name[key]=...` pairs
(never flattened to `key=...`, never as one JSON value), keys well formed (`a[b][0]`)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

FORM = "application/x-www-form-urlencoded"
_DEEP_KEY = re.compile(r"^[^\[\]]+(\[[^\[\]]*\])+$")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Recorder:
    """A local HTTP server that answers `{}` to anything and keeps what it received."""

    def __init__(self) -> None:
        self.received: list[Recorded] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorder.received.append(Recorded(self.command, self.path, headers, body))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _record

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@contextmanager
def recording() -> Iterator[Recorder]:
    recorder = Recorder()
    thread = threading.Thread(target=recorder.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        recorder.server.shutdown()
        recorder.server.server_close()
        thread.join(timeout=10)


def form_problems(received: Recorded, body_schema: dict[str, Any], encoding: Any) -> list[str]:
    """Why a recorded form body does not follow its operation's request body (empty: it does)."""
    content_type = received.headers.get("content-type", "")
    if not received.body and not body_schema.get("required"):
        return []  # an optional body, left out (Stripe's GETs declare one with no members)
    if content_type.split(";")[0].strip() != FORM:
        return [f"sent as {content_type or 'no content type'}, not {FORM}"]
    members = body_schema.get("properties") or {}
    pairs = parse_qsl(received.body.decode(), keep_blank_values=True)
    roots: dict[str, list[str]] = {}
    for key, _ in pairs:
        roots.setdefault(key.split("[", 1)[0], []).append(key)
    problems = [f"'{root}' is not a member of the body" for root in roots if root not in members]
    problems += [
        f"the required member '{name}' is missing"
        for name in body_schema.get("required") or []
        if name not in roots
    ]
    for root, keys in roots.items():
        field = encoding.get(root) if isinstance(encoding, dict) else None
        deep = isinstance(field, dict) and field.get("style") == "deepObject"
        nested = [key for key in keys if key != root]
        if nested and not all(_DEEP_KEY.match(key) for key in nested):
            problems.append(f"'{root}' has a malformed key: {nested[0]}")
        if deep and root in keys and _is_container(members.get(root)):
            problems.append(f"'{root}' (deepObject) is sent as one value, not as {root}[...]")
    return problems


def _is_container(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    types = schema.get("type")
    listed = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    return bool({"object", "array"} & set(listed)) and "string" not in listed
