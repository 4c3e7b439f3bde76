"""What a running function tool may reach besides its arguments: the tenant's guarded HTTP
client (its outbound policy) and the operator's web access (the web built-ins).

The function executor sets it around each call; a function reads it with `function_context()`.
It is a context variable, so it follows the call into the worker thread and into a generator.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from app.http.client import OutboundClient
from app.tools.web import WebAccess


@dataclass(frozen=True, slots=True)
class FunctionContext:
    # The tenant's guarded client, else the shared one under the base policy (None: neither).
    http: OutboundClient | None
    web: WebAccess | None  # None: no web built-in is configured


CURRENT: ContextVar[FunctionContext | None] = ContextVar("toolgate_function_call", default=None)


def function_context() -> FunctionContext:
    """The running function call's context; a LookupError outside one."""
    context = CURRENT.get()
    if context is None:
        raise LookupError("not inside a function tool call")
    return context
