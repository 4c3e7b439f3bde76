"""Which origin (scheme and host) a client used to reach the service, when a proxy stands in front
of it: RFC 7239 `Forwarded`, or the de-facto `X-Forwarded-Proto`/`-Host`/`-Port`/`-For`, read
only from the peers TRUSTED_PROXIES names. The URLs clients compare against the ones they used
(RFC 9728 `resource`, the `resource_metadata` of a 401, the OAuth issuer) are built from it;
from any other peer these headers are ignored, so a client cannot choose the URLs it is shown.

Behind several proxies, the chain is walked from the service outwards (rightmost element first)
for as long as each hop was a trusted proxy: the element written by the last trusted proxy about
an untrusted client says what that client asked for. A value that is not a host (or a `proto`
that is not http or https) is ignored, as if the header were absent.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
GetList = Callable[[str], list[str]]  # all values of a header, as `Headers.getlist`

MAX_ELEMENTS = 32  # of a `Forwarded` or `X-Forwarded-For` chain; more is not a real chain
_HOST = re.compile(
    r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(:\d{1,5})?$"
)


class TrustedProxiesError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str  # with its port when it is not the scheme's default

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}"


def parse_proxies(entries: Sequence[str]) -> tuple[bool, tuple[IPNetwork, ...]]:
    """(every peer trusted, the networks) of TRUSTED_PROXIES entries: addresses, CIDR ranges or
    `*`; TrustedProxiesError naming a malformed entry."""
    networks = []
    for entry in entries:
        if entry.strip() == "*":
            return True, ()
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise TrustedProxiesError(
                f"TRUSTED_PROXIES: {entry!r} is not an address, a CIDR range or *"
            ) from None
    return False, tuple(networks)


class TrustedProxies:
    """The TRUSTED_PROXIES rule: whose forwarded headers count, and what they say."""

    def __init__(self, entries: Sequence[str] = ()) -> None:
        self._everyone, self._networks = parse_proxies(entries)

    @property
    def enabled(self) -> bool:
        return self._everyone or bool(self._networks)

    def trusts(self, address: str | None) -> bool:
        if self._everyone:
            return True
        if not address or not self._networks:
            return False
        try:
            ip = ipaddress.ip_address(address.strip().strip("[]").split("%")[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self._networks)

    def origin(self, peer: str | None, headers: GetList, default: Origin) -> Origin:
        """The origin the client used: `default` (the request's own scheme and Host) unless a
        trusted peer forwarded another."""
        if not self.enabled or not self.trusts(peer):
            return default
        forwarded = headers("forwarded")
        if forwarded:
            scheme, host = self._from_forwarded(forwarded)
        else:
            scheme, host = self._from_x_forwarded(headers)
        scheme = scheme.lower() if scheme and scheme.lower() in ("http", "https") else None
        chosen_scheme = scheme or default.scheme
        if host is None or not _HOST.match(host):
            if scheme is None:
                return default
            host = default.host
        return Origin(chosen_scheme, _without_default_port(host, chosen_scheme))

    def client(self, peer: str | None, headers: GetList) -> str | None:
        """The address of the client (what a trusted proxy says it saw; else the peer)."""
        if not self.enabled or not self.trusts(peer):
            return peer
        forwarded = headers("forwarded")
        if forwarded:
            address = _node_address(self._chosen(forwarded).get("for"))
        else:
            chain = _listed(headers("x-forwarded-for"))[-MAX_ELEMENTS:]
            address = _pick(chain, self._hops(headers))
        return address or peer

    def _chosen(self, values: list[str]) -> dict[str, str]:
        """The element the last trusted hop wrote (about the first untrusted one)."""
        elements = [e for value in values for e in _split_elements(value)][-MAX_ELEMENTS:]
        chosen: dict[str, str] = {}
        for element in reversed(elements):
            chosen = element
            if not self.trusts(_node_address(element.get("for"))):
                break
        return chosen

    def _from_forwarded(self, values: list[str]) -> tuple[str | None, str | None]:
        chosen = self._chosen(values)
        return chosen.get("proto"), chosen.get("host")

    def _hops(self, headers: GetList) -> int:
        """How far from the right of X-Forwarded-For the client is: the first untrusted entry
        (1: the entry our trusted peer wrote)."""
        chain = _listed(headers("x-forwarded-for"))[-MAX_ELEMENTS:]
        hops = 1
        while hops < len(chain) and self.trusts(chain[-hops]):
            hops += 1
        return hops

    def _from_x_forwarded(self, headers: GetList) -> tuple[str | None, str | None]:
        hops = self._hops(headers)
        scheme = _pick(_listed(headers("x-forwarded-proto")), hops)
        host = _pick(_listed(headers("x-forwarded-host")), hops)
        port = _pick(_listed(headers("x-forwarded-port")), hops)
        if host is not None and port is not None and port.isdigit() and ":" not in host[-6:]:
            host = f"{host}:{port}"
        return scheme, host


def _listed(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _pick(values: list[str], hops: int) -> str | None:
    """The value our `hops`-th proxy from the right wrote; a proxy that sets the header rather
    than appending to it leaves one value, which is then the one."""
    if not values:
        return None
    return values[-hops] if len(values) >= hops else values[0]


def _split_elements(value: str) -> list[dict[str, str]]:
    """RFC 7239 elements (`a=b;c=d, e=f`), quoted strings unquoted; a pair without `=` is
    dropped, and a parameter named twice keeps its first value."""
    elements = []
    for element in _split_unquoted(value, ","):
        pairs: dict[str, str] = {}
        for pair in _split_unquoted(element, ";"):
            name, equals, raw = pair.partition("=")
            name, raw = name.strip().lower(), raw.strip()
            if not equals or not name:
                continue
            if len(raw) >= 2 and raw[0] == raw[-1] == '"':
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            pairs.setdefault(name, raw)
        elements.append(pairs)
    return elements


def _split_unquoted(text: str, separator: str) -> list[str]:
    """`text` split at each `separator` outside a quoted string."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _node_address(node: str | None) -> str | None:
    """The address of a `for=` node: `192.0.2.1`, `"[2001:db8::1]:443"`, `_hidden`, `unknown`."""
    if not node:
        return None
    if node.startswith("["):
        return node[1 : node.find("]")] if "]" in node else None
    return node.rsplit(":", 1)[0] if node.count(":") == 1 else node


def _without_default_port(host: str, scheme: str) -> str:
    default = ":443" if scheme == "https" else ":80"
    return host[: -len(default)] if host.endswith(default) else host
