"""Outbound safety: our own payload list against the create-time and connect-time checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.http.client import Fetched, OutboundClient, OutboundUnreachableError
from app.http.netguard import OutboundBlockedError, OutboundPolicy, Resolver
from tests.support.servers import ThreadedServer
from tests.support.tls import make_certificates
from tests.support.upstream import upstream_app

UNSAFE_URLS = [
    "http://127.0.0.1/",
    "http://127.0.0.1:8000/admin",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://printer.local/",
    "http://metadata.google.internal/",
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    "http://[::1]/",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://127\u30020\u30020\u30021/",
    "http://127\uff0e0\uff0e0\uff0e1/",
    "http://127\uff610\uff610\uff611/",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.43518/",
    "http://2852039166/",
    "http://10.0.0.1/",
    "http://10.255.255.255/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://192.0.0.192/",
    "http://192.0.0.1/",
    "http://192.0.2.1/",
    "http://198.18.0.1/",
    "http://198.51.100.7/",
    "http://203.0.113.9/",
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[0:0:0:0:0:ffff:169.254.169.254]/",
    "http://[::127.0.0.1]/",
    "http://[::7f00:1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b:1::a00:1]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2001::1]/",
    "http://[2001:db8::1]/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://[fd12:3456:789a::1]/",
    "http://[ff02::1]/",
    "http://[fec0::1]/",
    "http://[100::1]/",
    # Ports outside the default set: administrative, mail, databases, caches, container APIs.
    "http://93.184.215.14:22/",
    "http://93.184.215.14:25/",
    "https://api.example.com:6379/",
    "https://api.example.com:27017/",
    "http://api.example.com:2375/",
    "http://api.example.com:11211/",
    "http://api.example.com:8/",
    # Malformed hosts: five numbers, a 64-character label, a 254-character name, a leading `-`.
    "http://1.1.1.1.1/",
    f"http://{'a' * 64}.example.com/",
    f"http://{'a.' * 125}example/",
    "http://-bad.example.com/",
    "http://bad-.example.com/",
    "http://a..b.example/",
    # An internationalized name is judged in its IDNA form: a local name stays local.
    "http://bücher.localhost/",
    "http://xn--bcher-kva.localhost/",
]
SAFE_URLS = [
    "https://api.example.com/weather",
    "http://8.8.8.8/",
    "https://1.1.1.1:8443/x",
    "http://[2606:4700:4700::1111]/",
    "https://example.com./",
    "http://93.184.215.14/",
    "http://172.32.0.1/",
    "http://100.128.0.1/",
    "http://192.169.0.1/",
    "http://[::ffff:8.8.8.8]/",  # IPv4-mapped: judged by the IPv4 inside
    "http://api.example.com:8080/",
    f"http://{'a' * 63}.example.com/",
    "http://under_score.example.com/",
    # Internationalized domain names, as written and in their IDNA (punycode) form.
    "https://xn--bcher-kva.example/",
    "https://bücher.example/",
    "https://BÜCHER.example/path",
    "https://例え.テスト/",
]


@pytest.mark.parametrize("url", UNSAFE_URLS)
def test_unsafe_as_written(url: str) -> None:
    assert OutboundPolicy().url_safety_problem(url) is not None


@pytest.mark.parametrize("url", SAFE_URLS)
def test_public_urls_pass(url: str) -> None:
    assert OutboundPolicy().url_safety_problem(url) is None


def test_operator_allow_list() -> None:
    policy = OutboundPolicy(["127.0.0.1", "10.0.0.0/8", "internal.example"])
    assert policy.url_safety_problem("http://127.0.0.1:9000/") is None
    assert policy.url_safety_problem("http://10.20.30.40/") is None
    assert policy.url_safety_problem("http://internal.example/") is None
    assert policy.url_safety_problem("http://192.168.0.1/") is not None
    assert policy.url_safety_problem("http://127.0.0.2/") is not None


def test_an_internationalized_allow_list_entry_matches_either_spelling() -> None:
    policy = OutboundPolicy(["bücher.intranet"])
    assert policy.url_safety_problem("http://xn--bcher-kva.intranet/") is None
    assert policy.url_safety_problem("http://bücher.intranet/") is None
    assert policy.host_allowed("xn--bcher-kva.intranet", 443)  # as httpcore names it


def test_an_allow_list_entry_can_open_one_port() -> None:
    policy = OutboundPolicy(["127.0.0.1:6379", "10.0.0.0/8:22", "[fd00::1]:25", "db.internal:5432"])
    assert policy.url_safety_problem("http://127.0.0.1:6379/") is None
    assert policy.url_safety_problem("http://127.0.0.1:27017/") is not None  # only that port
    assert policy.url_safety_problem("http://10.1.2.3:22/") is None
    assert policy.url_safety_problem("http://11.1.2.3:22/") is not None
    assert policy.url_safety_problem("http://[fd00::1]:25/") is None
    assert policy.url_safety_problem("http://db.internal:5432/") is None
    assert policy.url_safety_problem("http://api.example.com:5432/") is not None
    assert OutboundPolicy(ports="443").url_safety_problem("http://api.example.com/") is not None


@pytest.mark.parametrize("entry", ["10.0.0.1:8080", "10.0.0.0/24:8080", "[fd00::1]:8080"])
def test_an_entry_with_a_port_opens_that_port_only(entry: str) -> None:
    """Not the open ports as well: `10.0.0.1:8080` used to open 80 and 8000 of that host."""
    host = "[fd00::1]" if "fd00" in entry else "10.0.0.1"
    policy = OutboundPolicy([entry])
    assert policy.url_safety_problem(f"http://{host}:8080/") is None
    for port in (80, 443, 8000, 8081):
        assert policy.url_safety_problem(f"http://{host}:{port}/") is not None, port


def test_a_name_with_a_port_lifts_the_address_rule_on_that_port_only() -> None:
    policy = OutboundPolicy(["intranet.example:8080"])
    assert policy.host_allowed("intranet.example", 8080)
    assert not policy.host_allowed("intranet.example", 80)  # judged by its addresses there


async def test_connect_time_holds_an_entry_to_its_port(local_api: ThreadedServer) -> None:
    port = int(local_api.url.rsplit(":", 1)[1])
    policy = OutboundPolicy([f"127.0.0.1:{port + 1}"])  # another port of the same host
    async with _client(policy) as client:
        with pytest.raises(OutboundBlockedError):
            await client.get(f"{local_api.url}/echo")


class _Client:
    """The service's HTTP client under `policy`, read as the tests read an answer."""

    def __init__(self, policy: OutboundPolicy, resolver: Resolver | None = None) -> None:
        options = {"resolver": resolver} if resolver else {}
        self.client = OutboundClient(policy, timeout_s=5, connect_timeout_s=5, **options)

    async def get(self, url: str) -> Fetched:
        return await self.client.fetch("GET", url, cap=10_000)

    async def __aenter__(self) -> _Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.client.aclose()


def _client(policy: OutboundPolicy, resolver: Resolver | None = None) -> _Client:
    return _Client(policy, resolver)


@pytest.fixture(scope="module")
def local_api() -> ThreadedServer:
    server = ThreadedServer(upstream_app).start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "0x7f.1", "127.1", "localhost"])
async def test_connect_time_blocks_loopback_spellings(local_api: ThreadedServer, host: str) -> None:
    async with _client(OutboundPolicy()) as client:
        with pytest.raises(OutboundBlockedError):
            await client.get(f"http://{host}:{local_api.port}/echo")


async def test_allowed_destination_connects(local_api: ThreadedServer) -> None:
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        response = await client.get(f"{local_api.url}/echo?a=1")
    assert response.status == 200


async def test_a_name_resolving_to_any_private_address_is_blocked(
    local_api: ThreadedServer,
) -> None:
    async def rebinding(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "127.0.0.1"]  # one public, one loopback answer

    async with _client(OutboundPolicy(), rebinding) as client:
        with pytest.raises(OutboundBlockedError, match="non-public"):
            await client.get(f"http://innocent.example:{local_api.port}/echo")


async def test_connection_goes_to_the_checked_address(local_api: ThreadedServer) -> None:
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])  # a second lookup would rebind elsewhere

    async def once(host: str, port: int) -> list[str]:
        return next(answers)

    async with _client(OutboundPolicy(["127.0.0.1"]), once) as client:
        response = await client.get(f"http://api.example:{local_api.port}/echo")
    assert response.status == 200  # connected to 127.0.0.1, the address that was checked


async def test_connect_time_refuses_a_port_outside_the_policy(local_api: ThreadedServer) -> None:
    closed = OutboundPolicy(["127.0.0.1"], ports="80,443")  # as if the port was closed since
    async with _client(closed) as client:
        with pytest.raises(OutboundBlockedError, match="OUTBOUND_PORTS"):
            await client.get(f"{local_api.url}/echo")
    opened = OutboundPolicy([f"127.0.0.1:{local_api.port}"], ports="80,443")
    async with _client(opened) as client:
        assert (await client.get(f"{local_api.url}/echo")).status == 200


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
    # The environment names the test CA: the client must not pick it up.
    monkeypatch.setenv("SSL_CERT_FILE", ca)
    monkeypatch.setenv("SSL_CERT_DIR", str(Path(ca).parent))
    async with _client(OutboundPolicy(["127.0.0.1"])) as client:
        with pytest.raises(OutboundUnreachableError, match="CertificateVerificationError"):
            await client.get(f"{server.url}/echo")
    # Named explicitly (OUTBOUND_CA_BUNDLE), it is trusted.
    async with _client(OutboundPolicy(["127.0.0.1"], ca_bundle=ca)) as client:
        assert (await client.get(f"{server.url}/echo")).status == 200
