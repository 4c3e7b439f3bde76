"""The built-in function dictionary: small, real, side-effect-free functions, and the web
built-ins (`web_search`, `web_fetch`), seeded like the others but offered only once the operator
configures them (app/tools/web.py)."""

from __future__ import annotations

import ast
import importlib
import operator
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.kit.crypto import random_below
from app.tools.calls import function_context
from app.tools.progress import Progress
from app.tools.registry import FunctionRegistry
from app.tools.web import WebAccess, WebError

registry = FunctionRegistry()

MAX_DICE_SIDES = 1_000_000
MAX_EXPRESSION_LENGTH = 500
MAX_EXPONENT = 1_000
MAX_MAGNITUDE = 1e100


@registry.register(tool_id="rolldice", tags=["games"], blocking=False)
def roll_dice(d: int) -> int:
    """Roll a fair die and return the number it shows.

    Args:
        d: Number of sides of the die (2 or more).
    """
    if not 2 <= d <= MAX_DICE_SIDES:
        raise ValueError(f"d must be between 2 and {MAX_DICE_SIDES}")
    return random_below(d) + 1


@registry.register(tool_id="current-time", tags=["time"])
def current_time(timezone: str = "UTC") -> str:
    """Return the current date and time in a time zone, in ISO 8601 format.

    Args:
        timezone: An IANA time zone name such as "Europe/Paris" or "UTC".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {timezone!r}") from exc
    return datetime.now(zone).isoformat(timespec="seconds")


@registry.register(tool_id="calculator", tags=["math"], blocking=False)
def calculate(expression: str) -> float | int:
    """Evaluate an arithmetic expression exactly as written, e.g. "(2 + 3) * 4 / 7".

    Args:
        expression: Numbers with + - * / // % ** and parentheses.
    """
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None
    return _evaluate(tree.body)


MAX_SEARCH_RESULTS = 20
MAX_QUERY_LENGTH = 400


@registry.register(tool_id="web-search", tags=["web"], requires="web_search")
async def web_search(query: str, max_results: int = 5) -> list[dict[str, str]]:
    """Search the web; returns the title, URL and snippet of each result.

    Args:
        query: What to search for.
        max_results: How many results (1 to 20).
    """
    if not 1 <= max_results <= MAX_SEARCH_RESULTS:
        raise ValueError(f"max_results must be between 1 and {MAX_SEARCH_RESULTS}")
    if not query.strip() or len(query) > MAX_QUERY_LENGTH:
        raise ValueError(f"the query must have 1 to {MAX_QUERY_LENGTH} characters")
    return await _web().search(query, max_results)


@registry.register(tool_id="web-fetch", tags=["web"], requires="web_fetch")
async def web_fetch(url: str, max_chars: int = 8000) -> AsyncIterator[Progress | str]:
    """Fetch a web page and return its readable text (menus, scripts and ads left out).

    Args:
        url: The page's http or https URL.
        max_chars: The most characters of text to return.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be 1 or more")
    web, http = _web(), function_context().http
    if http is None:
        raise WebError("no HTTP client is available for this call")
    yield Progress("fetching the page", 0.0)
    kind, page = await web.fetch(url, http)
    yield Progress("extracting the readable text", 0.5)
    yield await web.readable(kind, page, max_chars)


def _web() -> WebAccess:
    web = function_context().web
    if web is None:
        raise WebError("the web built-ins are not configured on this server")
    return web


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.expr) -> float | int:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_evaluate(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent larger than {MAX_EXPONENT}")
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
    raise ValueError(f"unsupported element {type(node).__name__}: only numbers and + - * / // % **")


def _bounded(value: Any) -> float | int:
    if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
        raise ValueError("result out of range")
    return value  # type: ignore[no-any-return]


# What a built-in imports only when it first runs (its imports are slow), by tool id: `python -m
# app check` imports each, so an install that lacks one fails there rather than on a page fetch.
# trafilatura's HTML cleaning is lxml_html_clean's (lxml's own `lxml.html.clean` moved out).
DEFERRED_IMPORTS: dict[str, tuple[str, ...]] = {"web-fetch": ("lxml_html_clean", "trafilatura")}


def missing_imports() -> list[str]:
    """One line per module a built-in needs that cannot be imported."""
    problems = []
    for tool_id, modules in DEFERRED_IMPORTS.items():
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                reason = " ".join(str(exc).split())
                problem = f"built-in '{tool_id}' needs '{module}', which fails to import: {reason}"
                problems.append(problem)
    return problems
