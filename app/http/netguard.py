"""Outbound safety for external tools: only public addresses, checked where the connection is made.

External tool URLs come from tenants and their arguments from a model, so the service must not
become a way into the network it runs in. Two layers:

- `url_problems(url, policy)` is the one rule for a URL as written (scheme, host, credentials,
  control characters) and, under a tenant's policy, where it points (ports, local names,
  non-public addresses): tool writes, MCP server writes and the OpenAPI import fetch call it
  (a 422); parsing a stored tool calls it without a policy.
- `guarded_connector` (the service's HTTP client, `app/http/wire.py`, dials only what it returns)
  resolves the host once per connection, refuses unless every address is allowed, and gives
  the checked addresses to connect to, so a DNS answer that changes between check and connect
  (rebinding) cannot slip through. Redirects are never followed.

The rules are our own rather than `ipaddress.is_global`, which calls 192.0.0.192, 6to4, NAT64
and IPv4-compatible IPv6 addresses global.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import certifi
import httpx

from app.http.outbound import DEFAULT_BLOCKED_PORTS, DEFAULT_PORTS, open_ports
from app.http.wire import Connector

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_BLOCKED: tuple[Network, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/96",  # unspecified, loopback and IPv4-compatible
        "::ffff:0:0/96",  # IPv4-mapped
        "64:ff9b::/96",
        "64:ff9b:1::/48",  # NAT64
        "100::/64",
        "2001::/23",
        "2001:db8::/32",
        "2002::/16",  # discard, IETF/Teredo, docs, 6to4
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)
# Dots that resolvers and IDNA treat as "." (ideographic, full-width, half-width).
_DOT_LOOKALIKES = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


class OutboundBlockedError(Exception):
    """The destination is not a public address (and not allowed by the operator)."""


_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


@functools.lru_cache(maxsize=8)
def _verifying_context(cafile: str, mtime_ns: int, size: int) -> ssl.SSLContext:
    """A client TLS context trusting `cafile` only; a changed file (its time or size) is loaded
    again. Shared: it holds the trusted roots and the verification settings, nothing of a call."""
    return ssl.create_default_context(cafile=cafile)


class OutboundPolicy:
    """Which destinations external tools may reach: public addresses on the allowed ports, plus
    the operator's allow list. An entry without a port (`internal.example`, `10.0.0.0/8`) lifts
    the address rule on the open ports; `host:port` (`[v6]:port`, `cidr:port`) opens that target
    on that one port only."""

    def __init__(
        self,
        allow: Sequence[str] = (),
        *,
        ports: str = DEFAULT_PORTS,
        blocked_ports: str = DEFAULT_BLOCKED_PORTS,
        ca_bundle: str | None = None,
    ) -> None:
        self.allow = tuple(allow)
        self._port_specs = (ports, blocked_ports)
        self._ca_bundle = ca_bundle
        self._ssl: ssl.SSLContext | None = None
        self._hosts: set[str] = set()
        self._networks: list[Network] = []
        self._host_ports: set[tuple[str, int]] = set()
        self._network_ports: list[tuple[Network, int]] = []
        self._ports = open_ports(ports, blocked_ports)
        for entry in allow:
            target, port = _split_port(entry.strip())
            try:
                network = ipaddress.ip_network(target, strict=False)
            except ValueError:
                host = normalize_host(target)
                if port is None:
                    self._hosts.add(host)
                else:
                    self._host_ports.add((host, port))
                continue
            if port is None:
                self._networks.append(network)
            else:
                self._network_ports.append((network, port))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as what it was made from (the import's worker processes check URLs with
        it); its TLS context is built again there when needed."""
        ports, blocked = self._port_specs
        return _policy, (self.allow, ports, blocked, self._ca_bundle)

    @classmethod
    def unrestricted(cls, *, ca_bundle: str | None = None) -> OutboundPolicy:
        """Every address on every port: for the operator's own destinations (its MCP servers),
        which may live on a private network; TLS is verified as for any policy."""
        return cls(["0.0.0.0/0", "::/0"], ports="1-65535", blocked_ports="", ca_bundle=ca_bundle)

    def extended(self, allow: Sequence[str]) -> OutboundPolicy:
        """This policy with more allow-list entries (a tenant's own), sharing its TLS context."""
        ports, blocked = self._port_specs
        policy = OutboundPolicy(
            (*self.allow, *allow), ports=ports, blocked_ports=blocked, ca_bundle=self._ca_bundle
        )
        policy._ssl = self.ssl_context()
        return policy

    def ssl_context(self) -> ssl.SSLContext:
        """Certificates are verified against `ca_bundle`, else certifi's CAs; built once per
        bundle file as it is on disk (docs/performance.md, "Why the code is shaped as it is")."""
        if self._ssl is None:
            cafile = self._ca_bundle or certifi.where()
            stat = os.stat(cafile)
            self._ssl = _verifying_context(cafile, stat.st_mtime_ns, stat.st_size)
        return self._ssl

    def host_allowed(self, host: str, port: int) -> bool:
        """An allow-list entry names this host (for every open port, or for this one)."""
        name = normalize_host(host)
        return name in self._hosts or (name, port) in self._host_ports

    def address_allowed(self, address: IPAddress, port: int) -> bool:
        """Public, or in an allow-listed network (for every open port, or for this one)."""
        if any(address in network for network in self._networks) or any(
            address in network and port == allowed for network, allowed in self._network_ports
        ):
            return True
        if address.version == 6 and address.ipv4_mapped is not None:
            return self.address_allowed(address.ipv4_mapped, port)  # judged by the IPv4 inside
        return not any(address in network for network in _BLOCKED) and address.is_global

    def port_allowed(self, host: str, port: int, addresses: Sequence[IPAddress] = ()) -> bool:
        """The default ports, or a port an allow-list entry names for this host or for every
        one of its addresses."""
        if port in self._ports or (normalize_host(host), port) in self._host_ports:
            return True
        return bool(addresses) and all(
            any(address in network and port == allowed for network, allowed in self._network_ports)
            for address in addresses
        )

    def url_safety_problem(self, url: str) -> str | None:
        """Why `url` points where this policy does not reach, or None; callers use
        `url_problems`, which checks the URL as written first."""
        try:
            host = httpx.URL(url).host
        except httpx.InvalidURL as exc:
            return f"not a valid URL: {exc}"
        if not host:
            return "must name a host"
        name = normalize_host(host)
        address = literal_address(name)
        port = httpx.URL(url).port or (443 if url.lower().startswith("https") else 80)
        if not self.port_allowed(name, port, [address] if address else []):
            return f"port {port} is not open to external tools (OUTBOUND_PORTS); ask the operator"
        if self.host_allowed(host, port):
            return None
        if address is None and (problem := host_name_problem(name)):
            return problem
        if name == "localhost" or name.endswith((".localhost", ".local", ".internal")):
            return f"host '{host}' is a local name; external tools may only reach public hosts"
        if address is not None and not self.address_allowed(address, port):
            return (
                f"host '{host}' is not a public address; external tools may only reach public hosts"
            )
        return None


def url_problems(url: str, policy: OutboundPolicy | None) -> list[str]:
    """Why `url` cannot be an outbound endpoint (empty when it can): first as written, then,
    given a policy, where it points. No DNS lookup happens here."""
    problem = _written_url_problem(url)
    if problem is None and policy is not None:
        problem = policy.url_safety_problem(url)
    return [] if problem is None else [problem]


def _written_url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return "must be an absolute http or https URL"
    if not parts.hostname:
        return "must name a host"
    if parts.username is not None or parts.password is not None:
        return "must not contain credentials (user:password@); use a context parameter or secret"
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "must not contain whitespace or control characters"
    try:  # what the HTTP client would refuse when the request is made
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"not a valid URL: {exc}"
    return None


def host_name_problem(name: str) -> str | None:
    """Why `name` is not a well-formed DNS name (RFC 1035 lengths, letters-digits-hyphens labels
    that neither start nor end with a hyphen, a top label that is not all digits)."""
    labels = name.split(".")
    if len(name) > 253:
        return "the host name is longer than 253 characters"
    if any(not _LABEL.match(label) for label in labels):
        return f"host '{name}' is not a well-formed name (labels of 1-63 letters, digits, hyphens)"
    if labels[-1].isdigit():
        return f"host '{name}' is neither an address nor a name (its last label is all digits)"
    return None


def allow_entry_problem(entry: str) -> str | None:
    """Why `entry` is not an allow-list entry (`host`, `address`, `cidr`, each optionally with
    `:port`; `[v6]:port`), or None."""
    target, port = _split_port(entry.strip())
    if port is not None and not 1 <= port <= 65535:
        return f"'{entry}': the port must be in 1-65535"
    if not target or target != target.strip():
        return f"'{entry}' names no host, address or network"
    try:
        ipaddress.ip_network(target, strict=False)
        return None
    except ValueError:
        pass
    if "/" in target or literal_address(normalize_host(target)) is not None:
        return f"'{entry}' is not a valid address or network"
    problem = host_name_problem(normalize_host(target))
    return None if problem is None else f"'{entry}': {problem}"


# What a tenant's own allow list opens only when the admin forces it: the service's own host
# (loopback, unspecified), link-local (cloud metadata at 169.254.169.254, fd00:ec2::254 aside),
# and their IPv4-mapped forms; a network holding them (`0.0.0.0/0`, `::/0`) too.
_FORCE_ONLY: tuple[Network, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "::/128",
        "::1/128",
        "fe80::/10",
        "::ffff:0.0.0.0/104",
        "::ffff:127.0.0.0/104",
        "::ffff:169.254.0.0/112",
    )
)


def forced_entry_problem(entry: str) -> str | None:
    """Why a tenant's allow-list entry may be set only when the admin forces it, or None."""
    target, _ = _split_port(entry.strip())
    try:
        network = ipaddress.ip_network(target, strict=False)
    except ValueError:
        name = normalize_host(target)
        if name == "localhost" or name.endswith(".localhost"):
            return f"'{entry}' names the service's own host"
        if name == "metadata.google.internal":
            return f"'{entry}' names a cloud metadata service"
        return None
    if network.prefixlen == 0:
        return f"'{entry}' opens every address"
    if any(network.overlaps(n) for n in _FORCE_ONLY if n.version == network.version):
        return f"'{entry}' reaches loopback, unspecified or link-local (metadata) addresses"
    return None


def _split_port(entry: str) -> tuple[str, int | None]:
    """`host:port`, `[v6]:port`, `cidr:port` -> (target, port); an entry without one: None."""
    if entry.startswith("["):
        inside, _, rest = entry[1:].partition("]")
        return inside, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    target, colon, port = entry.rpartition(":")
    if colon and entry.count(":") == 1 and port.isdigit():
        return target, int(port)
    return entry, None


def normalize_host(host: str) -> str:
    """The host as DNS sees it: lower case, dots for dot look-alikes, and an internationalized
    name in its IDNA form (`bücher.example` -> `xn--bcher-kva.example`), as httpx sends it, so
    names are judged and matched label by label in ASCII."""
    name = host.translate(_DOT_LOOKALIKES).strip("[]").rstrip(".").lower()
    if name.isascii():
        return name
    try:
        return httpx.URL(scheme="http", host=name).raw_host.decode("ascii")
    except httpx.InvalidURL:
        return name  # host_name_problem names it


def literal_address(host: str) -> IPAddress | None:
    """The address a host spells, in any form a resolver takes (`127.1`, `0x7f.1`, `2130706433`)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError, UnicodeError):
        return None


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]).split("%")[0] for info in infos]


class UnresolvableError(OSError):
    """The host has no address (or the lookup failed or timed out)."""


async def vetted_addresses(
    policy: OutboundPolicy,
    resolver: Resolver,
    host: str,
    port: int,
    limit_s: float | None,
) -> list[IPAddress]:
    """The connect-time rule, for every HTTP stack: resolve `host` once, refuse
    (`OutboundBlockedError`) unless the port and every address are allowed, and return the
    checked addresses, which are the only ones the caller may connect to."""
    literal = literal_address(normalize_host(host))
    addresses = [literal] if literal is not None else await _resolve(resolver, host, port, limit_s)
    if not policy.port_allowed(host, port, addresses):
        raise OutboundBlockedError(f"refusing to connect to port {port} (OUTBOUND_PORTS)")
    if not policy.host_allowed(host, port):
        if any(not policy.address_allowed(address, port) for address in addresses):
            raise OutboundBlockedError(
                f"refusing to connect to '{host}': it resolves to a non-public address"
            )
    return addresses


async def _resolve(
    resolver: Resolver, host: str, port: int, limit_s: float | None
) -> list[IPAddress]:
    try:
        async with asyncio.timeout(limit_s):
            answers = await resolver(host, port)
        addresses = [ipaddress.ip_address(answer) for answer in answers]
    except (OSError, TimeoutError, ValueError) as exc:
        raise UnresolvableError(f"cannot resolve '{host}': {exc}") from exc
    if not addresses:
        raise UnresolvableError(f"'{host}' has no addresses")
    return addresses


def guarded_connector(
    policy: OutboundPolicy, resolver: Resolver = system_resolver, *, lookup_s: float | None = None
) -> Connector:
    """The one connect-time guard, for every outbound connection the service's HTTP client
    (`app/http/wire.py`) makes under a policy (external tools, web fetch, the import fetch, tenants'
    model providers, MCP servers over HTTP): the addresses the pool may dial, each checked by
    `vetted_addresses`; the pool dials only these, so nothing is looked up twice."""

    async def connect(host: str, port: int) -> list[str]:
        addresses = await vetted_addresses(policy, resolver, host, port, lookup_s)
        return [str(address) for address in addresses]

    return connect


def _policy(
    allow: tuple[str, ...], ports: str, blocked_ports: str, ca_bundle: str | None
) -> OutboundPolicy:
    return OutboundPolicy(allow, ports=ports, blocked_ports=blocked_ports, ca_bundle=ca_bundle)
