"""The served protocol (app/http_server.py), with raw sockets against a real `python -m app
serve` process on 127.0.0.1: a request head that is not complete within HEADER_TIMEOUT_S closes
the connection (before the first request too), and a process keeps at most MAX_CONNECTIONS."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.loop_watchdog import BOUND_S
from tests.support.processes import loop_stalls
from tests.support.secantus import free_port
from tests.test_shutdown import start_service

HEAD_TIMEOUT_S = 1.5
MAX_CONNECTIONS = 4
PATIENCE_S = HEAD_TIMEOUT_S * 6  # a loaded machine: the bound checked is "closed", not a race


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    port = free_port()
    process = start_service(
        port,
        HEADER_TIMEOUT_S=str(HEAD_TIMEOUT_S),
        MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        ACCESS_LOG="false",
    )
    try:
        yield port
        assert loop_stalls(f"http://127.0.0.1:{port}", BOUND_S) is None
    finally:
        process.terminate()
        process.communicate(timeout=30)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes; and when it closed (monotonic)."""
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer, time.monotonic()


def _read_one_response(sock: socket.socket) -> bytes:
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(
        next(
            line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")
        ).split(b":")[1]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return answer


def test_a_silent_connection_is_closed(port: int) -> None:
    with _connect(port) as sock:
        opened = time.monotonic()
        answer, closed = _read_until_closed(sock)
    assert answer == b""
    assert HEAD_TIMEOUT_S - 0.1 <= closed - opened < PATIENCE_S


def test_a_head_sent_one_line_at_a_time_is_cut_off(port: int) -> None:
    lines = [b"GET /healthz HTTP/1.1\r\n", *[b"X-Drip-%d: x\r\n" % i for i in range(20)]]
    with _connect(port) as sock:
        opened = time.monotonic()
        sent = 0
        try:
            for line in lines:  # 20 lines, 0.25 s apart: 5 s, beyond the deadline
                sock.sendall(line)
                sent += 1
                time.sleep(0.25)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer, closed = _read_until_closed(sock)
    assert b"200" not in answer
    assert sent < len(lines)
    assert closed - opened < PATIENCE_S


def test_after_a_response_the_next_head_is_due_too(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        first = _read_one_response(sock)
        assert first.startswith(b"HTTP/1.1 200 "), first
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # and nothing more: keep-alive is 75 s
        answer, closed = _read_until_closed(sock)
    assert answer == b""
    assert HEAD_TIMEOUT_S - 0.1 <= closed - started < PATIENCE_S


def test_a_head_completed_in_time_is_answered(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(HEAD_TIMEOUT_S / 3)
        sock.sendall(b"Host: t\r\nConnection: close\r\n\r\n")
        answer, _ = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_one_connection_beyond_the_cap_is_refused_at_once(port: int) -> None:
    held = [_connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        with _connect(port) as extra:
            started = time.monotonic()
            answer, closed = _read_until_closed(extra)
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert closed - started < HEAD_TIMEOUT_S  # refused, not left to time out
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + PATIENCE_S
    while True:  # the held ones closed: room again, once the server has seen them go
        with _connect(port) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            answer, _ = _read_until_closed(sock)
        if answer.startswith(b"HTTP/1.1 200 ") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
