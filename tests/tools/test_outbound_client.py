"""The outbound client of external tools (app/http/client.py): the connect-time guard
of app/http/netguard.py on the aiohttp stack, and what the client never does (follow
redirects, keep cookies, use the environment's proxies or CAs, inflate past the cap)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.http.client import (
    OutboundClient,
    OutboundInvalidURLError,
    OutboundTimeoutError,
    OutboundUnreachableError,
    request_url,
)
from app.http.netguard import OutboundBlockedError, OutboundPolicy
from tests.support.servers import ThreadedServer
from tests.support.tls import make_certificates
from tests.support.upstream import upstream_app


@pytest.fixture(scope="module")
def local_api() -> Iterator[ThreadedServer]:
    server = ThreadedServer(upstream_app).start()
    yield server
    server.stop()


def _client(policy: OutboundPolicy, resolver=None, **options) -> OutboundClient:  # type: ignore[no-untyped-def]
    if resolver is not None:
        options["resolver"] = resolver
    return OutboundClient(policy, timeout_s=5, connect_timeout_s=5, **options)


async def _get(client: OutboundClient, url: str, **options) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    async with client.request("GET", url, **options) as response:
        text, _ = await response.text_capped(100_000)
        return response.status, text


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "2130706433", "0x7f.1", "127.1", "localhost", "[::ffff:127.0.0.1]"]
)
async def test_connect_time_blocks_loopback_spellings(local_api: ThreadedServer, host: str) -> None:
    async with _client(OutboundPolicy()) as client:
        with pytest.raises((OutboundBlockedError, OutboundInvalidURLError)):
            await _get(client, f"http://{host}:{local_api.port}/echo")


async def test_an_ipv4_mapped_address_is_judged_by_its_ipv4(local_api: ThreadedServer) -> None:
    async def mapped(host: str, port: int) -> list[str]:
        return ["::ffff:127.0.0.1"]

    async with _client(OutboundPolicy(), mapped) as client:
        with pytest.raises(OutboundBlockedError, match="non-public"):
            await _get(client, f"http://api.example:{local_api.port}/echo")


async def test_allowed_destination_connects(local_api: ThreadedServer) -> None:
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        status, _ = await _get(client, f"{local_api.url}/echo?a=1")
    assert status == 200


async def test_a_name_resolving_to_any_private_address_is_blocked(
    local_api: ThreadedServer,
) -> None:
    async def rebinding(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "127.0.0.1"]  # one public, one loopback answer

    async with _client(OutboundPolicy(), rebinding) as client:
        with pytest.raises(OutboundBlockedError, match="non-public"):
            await _get(client, f"http://innocent.example:{local_api.port}/echo")


async def test_each_connection_goes_to_the_address_checked_for_it(
    local_api: ThreadedServer,
) -> None:
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])  # the second lookup rebinds elsewhere
    looked_up: list[str] = []

    async def once(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return next(answers)

    async with _client(OutboundPolicy(["127.0.0.1"]), once, max_connections=1) as client:
        status, _ = await _get(client, f"http://api.example:{local_api.port}/echo")
        assert status == 200  # connected to 127.0.0.1, the address that was checked
        status, _ = await _get(client, f"http://api.example:{local_api.port}/echo")
        assert status == 200 and looked_up == ["api.example"]  # the kept-alive connection
    async with _client(OutboundPolicy(["127.0.0.1"]), once) as client:
        with pytest.raises(OutboundBlockedError):  # a new connection is checked again
            await _get(client, f"http://api.example:{local_api.port}/echo")


async def test_connect_time_refuses_a_port_outside_the_policy(local_api: ThreadedServer) -> None:
    closed = OutboundPolicy(["127.0.0.1"], ports="80,443")
    async with _client(closed) as client:
        with pytest.raises(OutboundBlockedError, match="OUTBOUND_PORTS"):
            await _get(client, f"{local_api.url}/echo")
    opened = OutboundPolicy([f"127.0.0.1:{local_api.port}"], ports="80,443")
    async with _client(opened) as client:
        assert (await _get(client, f"{local_api.url}/echo"))[0] == 200


@pytest.fixture(scope="module")
def tls_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadedServer, str]]:
    ca, certificate, key = make_certificates(tmp_path_factory.mktemp("tls"))
    server = ThreadedServer(upstream_app, tls=(str(certificate), str(key))).start()
    yield server, str(ca)
    server.stop()


async def test_tls_trusts_the_configured_bundle_never_the_environment(
    tls_api: tuple[ThreadedServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ca = tls_api
    monkeypatch.setenv("SSL_CERT_FILE", ca)
    monkeypatch.setenv("SSL_CERT_DIR", str(Path(ca).parent))
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        with pytest.raises(OutboundUnreachableError, match="Certificate"):
            await _get(client, f"{server.url}/echo")
    async with _client(OutboundPolicy(["127.0.0.1"], ca_bundle=ca)) as client:
        assert (await _get(client, f"{server.url}/echo"))[0] == 200


async def test_the_environments_proxy_is_never_used(
    local_api: ThreadedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens: a proxy would fail
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        assert (await _get(client, f"{local_api.url}/echo"))[0] == 200


async def test_a_redirect_is_never_followed(local_api: ThreadedServer) -> None:
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        status, _ = await _get(client, f"{local_api.url}/redirect")
    assert status == 302


async def test_no_cookie_is_kept_between_calls(local_api: ThreadedServer) -> None:
    async def api(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # a name: cookie jars keep no cookies for bare addresses

    async with _client(OutboundPolicy(["127.0.0.1"]), api) as client:
        await _get(client, f"http://api.example:{local_api.port}/cookie")
        _, seen = await _get(client, f"http://api.example:{local_api.port}/p/x")
    assert "tenant-a-secret" not in seen


async def test_a_compression_bomb_stops_at_the_cap(local_api: ThreadedServer) -> None:
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        async with client.request("GET", f"{local_api.url}/bomb") as response:
            data, truncated = await response.read_capped(10_000)
    assert truncated and data == b"\0" * 10_000


async def test_a_header_line_past_the_limit_is_unreachable_not_a_crash(
    local_api: ThreadedServer,
) -> None:
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        with pytest.raises(OutboundUnreachableError):
            await _get(client, f"{local_api.url}/huge-header")
        assert (await _get(client, f"{local_api.url}/echo"))[0] == 200  # the client still works


async def test_a_slow_answer_is_a_timeout(local_api: ThreadedServer) -> None:
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        with pytest.raises(OutboundTimeoutError):
            await _get(client, f"{local_api.url}/slow?seconds=5", timeout_s=0.2)


async def test_a_closed_client_refuses_instead_of_reopening(local_api: ThreadedServer) -> None:
    client = _client(OutboundPolicy(["127.0.0.1"]))
    await client.aclose()
    with pytest.raises(OutboundUnreachableError):
        await _get(client, f"{local_api.url}/echo")


def test_the_url_keeps_its_escapes_and_its_own_query() -> None:
    url = request_url("https://bücher.example/a/%2E%2E/é?v=1", [("q", "a b/&"), ("n", "2")])
    assert str(url) == "https://xn--bcher-kva.example/a/%2E%2E/%C3%A9?v=1&q=a+b%2F%26&n=2"
    with pytest.raises(OutboundInvalidURLError):
        request_url("https://[::1/x")
