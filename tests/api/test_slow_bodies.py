"""A request body that never arrives whole gets 408 and a closed connection (raw sockets against
the app served by uvicorn: the in-process client cannot send a short body). When the deadline
falls is tested on a clock moved by hand, in test_body_gate.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from app.main import create_app
from tests.support import functions
from tests.support.apps import ADMIN, make_settings
from tests.support.servers import ThreadedServer

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, int, bytes]]:
    settings = make_settings(None, body_timeout_s=TIMEOUT_S, access_log=False)
    server = ThreadedServer(create_app(settings, registry=functions.registry), lifespan="on")
    server.start()
    host, port = server.url.removeprefix("http://").split(":")
    created = httpx.post(f"{server.url}/tenants", json={"tenant_id": "slow"}, headers=ADMIN)
    yield host, int(port), created.json()["api_key"].encode()
    server.stop()


def _exchange(address: tuple[str, int], head: bytes, body: bytes) -> tuple[bytes, bool]:
    """Send, then read until the server closes: (answer, closed)."""
    with socket.create_connection(address, timeout=TIMEOUT_S * 10) as sock:
        sock.sendall(head + body)
        answer, closed = b"", False
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            answer += chunk
        return answer, closed


@pytest.mark.parametrize(
    ("head", "body"),
    [
        # Fewer bytes than Content-Length, with no key at all.
        (
            b"POST /tools/create HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n",
            b'{"tool_id": ',
        ),
        # A chunked body that never ends, on the chat route.
        (
            b"POST /chat HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer nope\r\nTransfer-Encoding: chunked\r\n\r\n",
            b'5\r\n{"a":\r\n',
        ),
        # The hot invoke route, which reads its body itself (after the key is checked).
        (
            b"POST /tools/rolldice/invoke HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n"
            b"Authorization: Bearer KEY\r\n\r\n",
            b"{",
        ),
    ],
)
def test_a_partial_body_gets_408_and_the_connection_closes(
    served: tuple[str, int, bytes], head: bytes, body: bytes
) -> None:
    host, port, key = served
    answer, closed = _exchange((host, port), head.replace(b"KEY", key), body)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"did not arrive within 1 s" in answer
    assert closed


def test_a_whole_body_is_unaffected(served: tuple[str, int, bytes]) -> None:
    raw = b'{"tenant_id": "slowpoke"}'
    head = (
        b"POST /tenants HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(raw)
    )
    answer, _ = _exchange(served[:2], head, raw)
    assert answer.startswith(b"HTTP/1.1 401 ")  # no key: refused, not a 408 after the timeout
