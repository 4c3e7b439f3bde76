"""TRUSTED_PROXIES and the forwarded headers (app/http/forwarded.py): whose headers count, and which
element of a chain says what the client used."""

from __future__ import annotations

import re

import pytest

from app.config import Settings
from app.http.forwarded import Origin, TrustedProxies, TrustedProxiesError, parse_proxies
from tests.support.apps import make_settings

DIRECT = Origin("http", "10.0.0.5:8000")  # what the request itself says (Host)


def headers(**values: str):  # type: ignore[no-untyped-def]
    named = {name.replace("_", "-"): value for name, value in values.items()}
    return lambda name: [named[name]] if name in named else []


def origin(peer: str | None, proxies: list[str], **values: str) -> str:
    return str(TrustedProxies(proxies).origin(peer, headers(**values), DIRECT))


def test_rfc_7239_from_a_trusted_proxy() -> None:
    forwarded = 'for=203.0.113.9;proto=https;host="tools.example.com"'
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded=forwarded) == "https://tools.example.com"


def test_nothing_counts_from_an_untrusted_peer_or_with_no_proxies() -> None:
    forwarded = "for=203.0.113.9;proto=https;host=tools.example.com"
    assert origin("8.8.8.8", ["10.0.0.0/8"], forwarded=forwarded) == str(DIRECT)
    assert origin("10.1.1.1", [], forwarded=forwarded) == str(DIRECT)
    assert origin(None, ["10.0.0.0/8"], forwarded=forwarded) == str(DIRECT)
    assert origin("8.8.8.8", ["*"], forwarded=forwarded) == "https://tools.example.com"


def test_a_chain_is_read_from_the_last_trusted_hop() -> None:
    """The element a trusted proxy wrote about an untrusted client counts; what the client
    itself put first in the chain does not."""
    chain = (
        "for=1.2.3.4;host=spoofed.example;proto=https, for=203.0.113.9;proto=https;host=a.example"
    )
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded=chain) == "https://a.example"
    two_hops = "for=203.0.113.9;proto=https;host=edge.example, for=10.2.2.2;host=inner.example"
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded=two_hops) == "https://edge.example"
    v6 = 'for="[2001:db8:cafe::17]:4711";proto=https;host=v6.example'
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded=v6) == "https://v6.example"


def test_x_forwarded_headers() -> None:
    trusted = ["10.0.0.0/8"]
    assert (
        origin("10.1.1.1", trusted, x_forwarded_proto="https", x_forwarded_host="a.example")
        == "https://a.example"
    )
    assert (
        origin(
            "10.1.1.1",
            trusted,
            x_forwarded_proto="https",
            x_forwarded_host="a.example",
            x_forwarded_port="8443",
        )
        == "https://a.example:8443"
    )
    # Two proxies that each appended: the outer one's values, for the client it saw.
    assert (
        origin(
            "10.1.1.1",
            trusted,
            x_forwarded_for="203.0.113.9, 10.2.2.2",
            x_forwarded_proto="https, http",
            x_forwarded_host="edge.example, inner.example",
        )
        == "https://edge.example"
    )


def test_default_ports_are_left_out() -> None:
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded="proto=https;host=a.example:443") == (
        "https://a.example"
    )
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded="proto=http;host=a.example:80") == (
        "http://a.example"
    )


@pytest.mark.parametrize(
    "host", ["a.example/evil", "user@a.example", "a example", '"', "a.example:99999999", ""]
)
def test_a_host_that_is_not_a_host_is_ignored(host: str) -> None:
    got = origin("10.1.1.1", ["10.0.0.0/8"], x_forwarded_host=host, x_forwarded_proto="https")
    assert got == f"https://{DIRECT.host}"


def test_a_proto_that_is_not_http_is_ignored() -> None:
    got = origin("10.1.1.1", ["10.0.0.0/8"], x_forwarded_proto="javascript", x_forwarded_host="x.y")
    assert got == "http://x.y"


def test_a_long_or_malformed_header_is_bounded() -> None:
    chain = ", ".join(["for=10.9.9.9;host=inner.example"] * 5000)
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded=chain) == "http://inner.example"
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded='host="unterminated;;,,==') == str(DIRECT)
    assert origin("10.1.1.1", ["10.0.0.0/8"], forwarded="=;=,;") == str(DIRECT)


def test_ipv4_mapped_peers_are_judged_as_ipv4() -> None:
    assert TrustedProxies(["10.0.0.0/8"]).trusts("::ffff:10.1.1.1")
    assert not TrustedProxies(["10.0.0.0/8"]).trusts("not an address")


def test_the_setting() -> None:
    settings: Settings = make_settings(trusted_proxies="10.0.0.0/8, 192.168.1.7")
    assert settings.trusted_proxies == ["10.0.0.0/8", "192.168.1.7"]
    with pytest.raises(ValueError, match=re.escape("TRUSTED_PROXIES: 'proxy.local'")):
        make_settings(trusted_proxies="proxy.local")
    with pytest.raises(TrustedProxiesError):
        parse_proxies(["10.0.0.0/33"])
