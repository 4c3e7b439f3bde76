"""The web built-ins' reach: the operator's search service (SearXNG's JSON API, or Tavily or
Brave with a key) and page fetching through the tenant's guarded client, with the page's
readable text extracted by trafilatura (boilerplate, scripts and menus left out).

Search goes to the service the operator configured (it may live on a private network, so its
client is the operator's, not the tenants'); a fetched URL is the model's choice, so it goes
through the tenant's outbound policy like any external tool, and every redirect hop is checked
again at connect time (`app/http/netguard.py`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urljoin

import orjson

from app.http.client import (
    OutboundClient,
    OutboundError,
    OutboundInvalidURLError,
    OutboundResponse,
    OutboundTimeoutError,
    OutboundUnreachableError,
    request_url,
)
from app.http.wire import HeaderError
from app.tools.outcome import ToolFailure

SearchBackend = Literal["searxng", "tavily", "brave"]
DEFAULT_URLS = {"tavily": "https://api.tavily.com", "brave": "https://api.search.brave.com"}
MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
EXTRACT_DEADLINE_S = 10.0
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain", "application/json", "text/")


class WebError(ToolFailure):
    """What the model reads when a search or fetch fails (the function's error result), with
    its kind: `blocked` for what the outbound policy refuses (an address, a port, a scheme)."""


@dataclass(frozen=True, slots=True)
class WebConfig:
    search_backend: SearchBackend = "searxng"
    search_url: str | None = None
    search_api_key: str | None = None
    fetch_enabled: bool = False
    response_max_bytes: int = 2_000_000
    max_chars: int = 20_000  # the most text web_fetch returns, whatever the model asks

    @property
    def search_enabled(self) -> bool:
        if self.search_backend == "searxng":
            return self.search_url is not None
        return self.search_api_key is not None


class WebAccess:
    """Search and fetch for the `web_search` and `web_fetch` functions (app/tools/builtin.py)."""

    def __init__(self, config: WebConfig, *, search_http: OutboundClient) -> None:
        """`search_http`: the client of the operator's search service (not a tenant's)."""
        self.config = config
        self._search_http = search_http

    async def search(self, query: str, max_results: int) -> list[dict[str, str]]:
        """Title, URL and snippet of the first `max_results` results."""
        if not self.config.search_enabled:
            raise WebError("web search is not configured on this server (WEB_SEARCH_URL)")
        method, url, body, headers = self._search_request(query, max_results)
        try:
            fetched = await self._search_http.fetch(
                method, url, cap=self.config.response_max_bytes, body=body, headers=headers
            )
        except HeaderError:
            raise WebError("the search service's key cannot be sent in a header") from None
        except OutboundUnreachableError as exc:
            raise WebError(
                f"the search service cannot be reached ({exc.reason})", "unreachable"
            ) from None
        except OutboundError as exc:
            raise WebError(
                f"the search service cannot be reached ({type(exc).__name__})", "unreachable"
            ) from None
        if fetched.status != 200:
            raise WebError(f"the search service answered HTTP {fetched.status}", "upstream_status")
        try:
            found = _results(self.config.search_backend, orjson.loads(fetched.text))
        except (ValueError, TypeError, AttributeError, KeyError):
            raise WebError("the search service sent an answer in an unknown format") from None
        return found[:max_results]

    def _search_request(
        self, query: str, max_results: int
    ) -> tuple[str, str, bytes | None, dict[str, str]]:
        """(method, URL, body, headers) of the search backend's request."""
        backend, key = self.config.search_backend, self.config.search_api_key
        base = (self.config.search_url or DEFAULT_URLS.get(backend, "")).rstrip("/")
        if backend == "tavily":
            body = orjson.dumps({"query": query, "max_results": max_results})
            return "POST", f"{base}/search", body, {"Authorization": f"Bearer {key}"}
        if backend == "brave":
            headers = {"X-Subscription-Token": key or "", "Accept": "application/json"}
            url = request_url(
                f"{base}/res/v1/web/search", [("q", query), ("count", str(max_results))]
            )
            return "GET", url, None, headers
        url = request_url(f"{base}/search", [("q", query), ("format", "json")])
        return "GET", url, None, {}

    async def fetch(self, url: str, http: OutboundClient) -> tuple[str, str]:
        """The page's (content type, text), read up to the byte cap; redirects followed
        through the same guarded client, each hop checked."""
        if not self.config.fetch_enabled:
            raise WebError("web fetch is not enabled on this server (WEB_FETCH_ENABLED)", "blocked")
        if not url.startswith(("http://", "https://")):
            raise WebError("blocked: the URL must start with http:// or https://", "blocked")
        for _ in range(MAX_REDIRECTS + 1):
            try:
                async with http.request(
                    "GET", url, headers={"Accept": "text/html, */*"}
                ) as response:
                    location = response.headers.get("location")
                    if response.status in REDIRECTS and location:
                        url = urljoin(url, location)
                        continue
                    return await self._page(response)
            except OutboundInvalidURLError:
                raise WebError("the URL is not valid", "invalid_arguments") from None
            except OutboundTimeoutError:
                raise WebError("the page did not answer in time", "timeout") from None
            except OutboundUnreachableError as exc:
                raise WebError(
                    f"the page cannot be reached ({exc.reason})", "unreachable"
                ) from None
        raise WebError(f"more than {MAX_REDIRECTS} redirects")

    async def _page(self, response: OutboundResponse) -> tuple[str, str]:
        if response.status >= 400:
            raise WebError(f"the page answered HTTP {response.status}", "upstream_status")
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and not kind.startswith(TEXT_TYPES):
            raise WebError(f"the page is not text ({kind})")
        text, _ = await response.text_capped(self.config.response_max_bytes)
        return kind, text

    async def readable(self, kind: str, text: str, max_chars: int) -> str:
        """The page's readable text (HTML through trafilatura, off the event loop), capped."""
        limit = min(max_chars, self.config.max_chars)
        if "html" in kind or (not kind and text.lstrip().startswith("<")):
            async with asyncio.timeout(EXTRACT_DEADLINE_S):
                extracted = await asyncio.to_thread(_extract, text)
            text = extracted or ""
        if len(text) > limit:
            return f"{text[:limit]}\n[truncated: {len(text) - limit} more characters]"
        return text


def _extract(html: str) -> str | None:
    import trafilatura  # here: 0.2 s of imports that only a page fetch needs

    return trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=True)


def _results(backend: SearchBackend, answer: Any) -> list[dict[str, str]]:
    """Each backend's results as title, URL and snippet (missing fields as empty text)."""
    if backend == "brave":
        items, snippet = answer["web"]["results"], "description"
    else:
        items, snippet = answer["results"], "content"
    return [
        {
            "title": _text(item.get("title")),
            "url": _text(item.get("url")),
            "snippet": _text(item.get(snippet)),
        }
        for item in items
        if isinstance(item, dict)
    ]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value[:1000]
    return "" if value is None else orjson.dumps(value).decode()[:1000]
