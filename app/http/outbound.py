"""Rules for what the service sends out, shared by external tools and MCP servers.

The URL rule lives in `app/http/netguard.py` (`url_problems`: as written and under a tenant's
policy; the address again at connect time). Header rules keep configured headers away from what
the HTTP client and the MCP transport own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

# Headers the HTTP client owns: a configured value could smuggle or break requests.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "proxy-authorization",
    }
)
# What the MCP transports set on top of that: content negotiation and the session's state.
MCP_TRANSPORT_HEADERS = RESERVED_HEADERS | {
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
}


# Ports reachable by default: the web's, and unprivileged ones but for well-known database,
# cache, container and cluster admin ports (OUTBOUND_PORTS, OUTBOUND_BLOCKED_PORTS).
DEFAULT_PORTS = "80,443,1025-65535"
DEFAULT_BLOCKED_PORTS = (
    "1433,1521,2375,2376,2379,2380,3306,5432,5984,6379,6443,8500,9042,9200,9300,10250,"
    "11211,27017-27019"
)


@functools.lru_cache(maxsize=16)
def parse_ports(spec: str) -> frozenset[int]:
    """`80,443,1025-65535` -> the set of ports; ValueError naming a bad part. Kept per spec (an
    operator's setting: a handful of values): the default is a set of 64k ports, and settings
    and every tenant's outbound policy are built from the same few specs."""
    ports: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if not 1 <= first <= last <= 65535:
            raise ValueError(f"'{part}' is not a port or a range of ports in 1-65535")
        ports.update(range(first, last + 1))
    return frozenset(ports)


@functools.lru_cache(maxsize=16)
def open_ports(ports: str, blocked: str) -> frozenset[int]:
    """The ports outbound calls may reach: those of `ports` less those of `blocked`."""
    return parse_ports(ports) - parse_ports(blocked)


def reserved_header_problems(names: Iterable[str], *, mcp: bool = False) -> list[str]:
    """One problem per header name the client (or, with `mcp`, the MCP transport) owns."""
    reserved = MCP_TRANSPORT_HEADERS if mcp else RESERVED_HEADERS
    owner = "the transport" if mcp else "the HTTP client"
    return [f"header '{name}' is set by {owner}" for name in names if name.lower() in reserved]
