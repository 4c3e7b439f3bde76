"""External tools: an HTTP endpoint called through the guarded, shared outbound client
(`app/tools/outbound_client.py`).

Where an argument goes: its placement (`path`, `query`, `header`, `body`) when the tool states
one; otherwise GET and DELETE send it as a query parameter (arrays as repeated keys), POST, PUT
and PATCH as a member of the JSON body. Redirects are never followed; the response is read up to
a cap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from app.tools.executors import CallScope
from app.tools.netguard import OutboundBlockedError
from app.tools.outbound_client import (
    OutboundClient,
    OutboundInvalidURLError,
    OutboundTimeoutError,
    OutboundUnreachableError,
    json_body,
)
from app.tools.outcome import ToolOutcome, unset_secret
from app.tools.rules import SECRET_REFERENCE
from app.tools.typed import ExternalTool

UPSTREAM_ERROR_BODY_CHARS = 300
_TEMPLATE = re.compile(r"\{([^{}]*)\}")


def _text(value: Any) -> str:
    """A scalar as it reads in a URL or a header (JSON's spelling for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def path_segment(value: Any) -> str:
    """One path segment: everything but unreserved characters percent-encoded, so a value can
    never add `/`, `?`, `#` or `%xx` of its own; `.` and `..` (which a server would resolve)
    are encoded too."""
    text = quote(_text(value), safe="")
    return text.replace(".", "%2E") if text in (".", "..") else text


def place_arguments(
    tool: ExternalTool, arguments: dict[str, Any]
) -> tuple[str, dict[str, Any], dict[str, str], dict[str, Any] | None, list[str]]:
    """(url, query, headers, JSON body or None, problems) for one call."""
    default = "query" if tool.method in ("GET", "DELETE") else "body"
    placements = tool.placements or {}
    query: dict[str, Any] = {}
    headers: dict[str, str] = {}
    body: dict[str, Any] = {}
    path: dict[str, str] = {}
    problems: list[str] = []
    for name, value in arguments.items():
        where = placements.get(name, default)
        if where == "path":
            if isinstance(value, list | dict) or _text(value) == "":
                problems.append(f"the path parameter '{name}' must be a non-empty scalar")
            else:
                path[name] = path_segment(value)
        elif where == "header":
            text = ",".join(map(_text, value)) if isinstance(value, list) else _text(value)
            if any(ch in text for ch in "\r\n\x00"):
                problems.append(f"the header parameter '{name}' contains a line break")
            else:
                headers[name] = text
        elif where == "query":
            query[name] = value
        else:
            body[name] = value
    url = _TEMPLATE.sub(lambda match: path.get(match.group(1), match.group(0)), tool.url)
    missing = sorted(set(_TEMPLATE.findall(url)))
    if missing and not problems:
        problems.append(f"missing path parameter(s): {', '.join(missing)}")
    if default == "body" or body:
        return url, query, headers, body, problems
    return url, query, headers, None, problems


def render_headers(
    templates: dict[str, str] | None, secrets: Mapping[str, str | None]
) -> tuple[dict[str, str] | None, list[str]]:
    """An external tool's headers with `{secret:NAME}` replaced; problems name secrets only."""
    if not templates:
        return None, []
    problems: list[str] = []

    def value_of(match: re.Match[str]) -> str:
        name = match.group(1)
        value = secrets.get(name)
        if value is None:
            problems.append(unset_secret(name))
            return ""
        if any(ch in value for ch in "\r\n\x00"):
            problems.append(f"the secret '{name}' contains a line break and cannot go in a header")
            return ""
        return value

    rendered = {name: SECRET_REFERENCE.sub(value_of, value) for name, value in templates.items()}
    return rendered, problems


class ExternalExecutor:
    """Calls an external tool's endpoint: header templates filled from secrets, arguments
    placed in path, query, headers or body, sent through the tenant's guarded client (else the
    shared one) without following redirects; the body is read up to `response_max_bytes` and
    a status of 300 or more (a redirect too) becomes an error outcome with the start of the body."""

    def __init__(self, *, http: OutboundClient, response_max_bytes: int) -> None:
        self._http = http
        self._response_max_bytes = response_max_bytes

    def inline(self, tool: ExternalTool) -> bool:
        return False

    async def run(
        self, tool: ExternalTool, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome:
        headers, problems = render_headers(tool.headers, call.secrets)
        if problems:
            return ToolOutcome.error("; ".join(problems), "missing_context")
        url, query, placed_headers, body, problems = place_arguments(tool, arguments)
        if problems:
            return ToolOutcome.error("; ".join(problems), "invalid_arguments")
        http = call.http or self._http
        try:
            async with http.request(
                tool.method,
                url,
                query=query_pairs(query),
                body=None if body is None else json_body(body),
                headers={**placed_headers, **(headers or {})},
            ) as response:
                text, truncated = await response.text_capped(self._response_max_bytes)
        except OutboundBlockedError as exc:
            return ToolOutcome.error(f"blocked: {exc}", "blocked")
        except OutboundTimeoutError:
            return ToolOutcome.error("the tool's endpoint did not answer in time", "timeout")
        except OutboundInvalidURLError:  # a stored URL this client cannot use; never repeated
            return ToolOutcome.error("the tool's URL is not valid", "unreachable")
        except OutboundUnreachableError as exc:
            reason = f"cannot reach the tool's endpoint: {exc.reason}"
            return ToolOutcome.error(reason, "unreachable")
        if truncated:
            text += f"\n[truncated: the response exceeded {self._response_max_bytes} bytes]"
        if response.status >= 300:
            limit = UPSTREAM_ERROR_BODY_CHARS  # scrubbed before the cut, as in the invoker
            shown = call.scrub.head(text, limit) if call.scrub else text
            return ToolOutcome.error(
                f"the tool's endpoint answered HTTP {response.status}: {shown[:limit]}",
                "upstream_status",
            )
        return ToolOutcome("ok", text)


def query_pairs(query: dict[str, Any]) -> list[tuple[str, str]]:
    """Query parameters as sent: an array as repeated keys, scalars as JSON spells them."""
    pairs: list[tuple[str, str]] = []
    for name, value in query.items():
        for item in value if isinstance(value, list | tuple) else (value,):
            pairs.append((name, "" if item is None else _text(item)))
    return pairs
