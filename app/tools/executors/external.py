"""External tools: an HTTP endpoint called through the guarded, shared outbound client
(`app/http/client.py`).

The request (URL with its query, headers, body) is built by `request.build_request`; here it is
sent. Redirects are never followed; the response is read up to a cap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from app.http.client import (
    OutboundClient,
    OutboundInvalidURLError,
    OutboundTimeoutError,
    OutboundUnreachableError,
)
from app.http.netguard import OutboundBlockedError
from app.http.wire import header_problem
from app.tools.executors import CallScope
from app.tools.executors.request import build_request
from app.tools.outcome import ToolOutcome, unset_secret
from app.tools.rules import SECRET_REFERENCE
from app.tools.typed import ExternalTool

UPSTREAM_ERROR_BODY_CHARS = 300


def render_headers(
    templates: dict[str, str] | None, secrets: Mapping[str, str | None]
) -> tuple[dict[str, str] | None, list[str]]:
    """An external tool's headers with `{secret:NAME}` replaced; a header that cannot be sent
    as rendered (a secret holding CR, LF or NUL: the header rule of `app.http.wire`) is a problem.
    Problems name secrets and headers, never values."""
    if not templates:
        return None, []
    problems: list[str] = []
    rendered: dict[str, str] = {}
    for header, template in templates.items():
        value, used = _filled(template, secrets, problems)
        problem = header_problem(header, value)
        if problem is not None:
            names = ", ".join(f"'{name}'" for name in used) or "none"
            problems.append(f"{problem} (secrets in it: {names})")
        rendered[header] = value
    return rendered, problems


def _filled(
    template: str, secrets: Mapping[str, str | None], problems: list[str]
) -> tuple[str, list[str]]:
    """`template` with its `{secret:NAME}` references replaced, and the names it used."""
    used: list[str] = []

    def value_of(match: re.Match[str]) -> str:
        name = match.group(1)
        value = secrets.get(name)
        if value is None:
            problems.append(unset_secret(name))
            return ""
        used.append(name)
        return value

    return SECRET_REFERENCE.sub(value_of, template), used


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
        built = build_request(tool, arguments)
        if built.problems:
            return ToolOutcome.error("; ".join(built.problems), "invalid_arguments")
        http = call.http or self._http
        try:
            # Always run under the invoker's tool timeout, never longer than the client's:
            # that bounds the answer (a second deadline would cost CPU on every call).
            fetched = await http.fetch(
                tool.method,
                built.url,
                cap=self._response_max_bytes,
                body=built.body,
                headers={**built.headers, **headers} if headers else built.headers,
                read_deadline=False,
            )
        except OutboundBlockedError as exc:
            return ToolOutcome.error(f"blocked: {exc}", "blocked")
        except OutboundTimeoutError:
            return ToolOutcome.error("the tool's endpoint did not answer in time", "timeout")
        except OutboundInvalidURLError:  # a stored URL this client cannot use; never repeated
            return ToolOutcome.error("the tool's URL is not valid", "unreachable")
        except OutboundUnreachableError as exc:
            reason = f"cannot reach the tool's endpoint: {exc.reason}"
            return ToolOutcome.error(reason, "unreachable")
        text, status = fetched.text, fetched.status
        if fetched.truncated:
            text += f"\n[truncated: the response exceeded {self._response_max_bytes} bytes]"
        if status >= 300:
            limit = UPSTREAM_ERROR_BODY_CHARS  # scrubbed before the cut, as in the invoker
            shown = call.scrub.head(text, limit) if call.scrub else text
            return ToolOutcome.error(
                f"the tool's endpoint answered HTTP {status}: {shown[:limit]}",
                "upstream_status",
            )
        return ToolOutcome("ok", text)
