"""The web built-ins: `web_search` against local stand-ins of SearXNG, Tavily and Brave (their
real formats), `web_fetch` against a real local site through the outbound guard. Both are
seeded into every tenant and offered only once the operator configures them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from app.tools.builtin import registry as builtin_registry
from tests.support import fake_model as script
from tests.support import search_services
from tests.support.apps import ADMIN, create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.search_services import KEY
from tests.support.secantus import free_port
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def search() -> Iterator[ThreadedServer]:
    server = ThreadedServer(search_services.search_services).start()
    yield server
    server.stop()


@pytest.fixture
async def web_chat(
    request: pytest.FixtureRequest,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    search: ThreadedServer,
) -> AsyncIterator[ChatClient]:
    """The built-in functions, the scripted model, `@pytest.mark.settings(...)` settings; the
    search stand-in's URL replaces `{search}` in them."""
    marker = request.node.get_closest_marker("settings")
    web = {
        key: value.replace("{search}", search.url) if isinstance(value, str) else value
        for key, value in (marker.kwargs if marker else {}).items()
    }
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        model_timeout_s=5.0,
        **web,
    )
    search_services.RECEIVED.clear()
    async with running_app(settings, builtin_registry) as app, http_client(app) as http:
        yield ChatClient(app, http, await create_tenant(http, "acme"))


async def _call(chat: ChatClient, fake: FakeModel, name: str, arguments: Any) -> str:
    fake.reset(script.tool_calls((name, arguments)), script.text("ok"))
    response = await chat.chat()
    assert response.status_code == 200, response.text
    return str(fake.requests[1]["messages"][-1]["content"])


def _offered(fake: FakeModel) -> set[str]:
    return {tool["function"]["name"] for tool in fake.requests[0].get("tools") or []}


async def test_unconfigured_web_tools_are_seeded_but_never_offered(
    web_chat: ChatClient, fake: FakeModel
) -> None:
    for tool_id in ("web-search", "web-fetch"):
        seeded = await web_chat.http.get(f"/tools/{tool_id}", headers=web_chat.tenant.headers)
        assert seeded.status_code == 200 and seeded.json()["tags"] == ["web"]
    fake.reset(script.text("hi"))
    await web_chat.chat()
    assert "roll_dice" in _offered(fake) and not {"web_search", "web_fetch"} & _offered(fake)
    invoked = await web_chat.http.post(
        "/tools/web-search/invoke",
        json={"arguments": {"query": "tides"}},
        headers=web_chat.tenant.headers,
    )
    assert invoked.json()["status"] == "error"
    assert "not configured" in invoked.json()["error"]["message"]


@pytest.mark.settings(web_search_url="{search}/searxng")
async def test_searxng_results_reach_the_model(web_chat: ChatClient, fake: FakeModel) -> None:
    content = await _call(web_chat, fake, "web_search", {"query": "tides", "max_results": 2})
    assert "web_search" in _offered(fake) and "web_fetch" not in _offered(fake)
    assert orjson.loads(content) == [
        {
            "title": "Release notes",
            "url": "https://example.org/notes",
            "snippet": "Version 2 is out.",
        },
        {"title": "Changelog", "url": "https://example.org/changelog", "snippet": "Every change."},
    ]
    [sent] = search_services.RECEIVED
    assert sent["path"] == "/searxng/search" and sent["query"] == {"q": "tides", "format": "json"}


@pytest.mark.settings(
    web_search_backend="tavily", web_search_url="{search}/tavily", web_search_api_key=KEY
)
async def test_tavily_is_the_second_backend(web_chat: ChatClient, fake: FakeModel) -> None:
    content = await _call(web_chat, fake, "web_search", {"query": "tides", "max_results": 1})
    assert [hit["url"] for hit in orjson.loads(content)] == ["https://example.org/notes"]
    assert search_services.RECEIVED[0]["json"] == {"query": "tides", "max_results": 1}


@pytest.mark.settings(
    web_search_backend="brave", web_search_url="{search}/brave", web_search_api_key=KEY
)
async def test_brave_too(web_chat: ChatClient, fake: FakeModel) -> None:
    content = await _call(web_chat, fake, "web_search", {"query": "tides", "max_results": 3})
    assert orjson.loads(content)[0]["snippet"] == "Version 2 is out."
    assert search_services.RECEIVED[0]["query"] == {"q": "tides", "count": "3"}
    assert KEY not in content


@pytest.mark.settings(web_search_url="{search}/searxng")
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"query": "fail"}, "answered HTTP 500"),
        ({"query": "break"}, "unknown format"),
        ({"query": "x", "max_results": 1000}, "between 1 and 20"),
        ({"query": "x" * 401}, "1 to 400 characters"),
        ({"query": "   "}, "1 to 400 characters"),
        ({"query": ["tides"]}, "invalid arguments"),
        ({"query": "tides", "max_results": "5"}, "invalid arguments"),
    ],
)
async def test_search_failures_and_abuse_are_error_results(
    web_chat: ChatClient, fake: FakeModel, arguments: dict[str, Any], error: str
) -> None:
    content = await _call(web_chat, fake, "web_search", arguments)
    assert content.startswith("Error:") and error in content


@pytest.mark.settings(web_search_url="http://127.0.0.1:9/searxng")
async def test_an_unreachable_search_service_is_an_error_result(
    web_chat: ChatClient, fake: FakeModel
) -> None:
    content = await _call(web_chat, fake, "web_search", {"query": "tides"})
    assert "cannot be reached" in content


FETCH = {"web_fetch_enabled": True, "outbound_allow": ["127.0.0.1"]}


@pytest.mark.settings(**FETCH)
async def test_fetch_returns_the_pages_readable_text(
    web_chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    content = await _call(
        web_chat, fake, "web_fetch", {"url": f"{upstream.url}/pages/article", "max_chars": 300}
    )
    assert "web_fetch" in _offered(fake) and "web_search" not in _offered(fake)
    assert content.startswith("How tides work") and "Paragraph 0: the moon" in content
    assert "color: red" not in content and "About" not in content
    assert "[truncated:" in content and len(content) < 400
    moved = await _call(web_chat, fake, "web_fetch", {"url": f"{upstream.url}/pages/moved"})
    assert "Paragraph 39" in moved


@pytest.mark.settings(**FETCH)
@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("{upstream}/redirect", "Blocked"),  # a redirect to the metadata address
        ("http://169.254.169.254/latest/meta-data/", "Blocked"),
        ("http://10.0.0.1/", "Blocked"),
        ("file:///etc/passwd", "http:// or https://"),
        ("{upstream}/pages/image", "not text (image/png)"),
        ("{upstream}/pages/nope", "HTTP 404"),
        ("http://[::1", "not valid"),
    ],
)
async def test_fetch_goes_through_the_outbound_guard(
    web_chat: ChatClient, fake: FakeModel, upstream: ThreadedServer, url: str, error: str
) -> None:
    content = await _call(
        web_chat, fake, "web_fetch", {"url": url.replace("{upstream}", upstream.url)}
    )
    assert content.startswith("Error:") and error.lower() in content.lower(), content


@pytest.mark.settings(**FETCH)
@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("{upstream}/redirect", "blocked"),  # a redirect to the metadata address
        ("http://169.254.169.254/latest/meta-data/", "blocked"),
        ("http://10.0.0.1/", "blocked"),
        ("http://127.0.0.1:{free}/", "unreachable"),  # allowed, but nobody listens
        ("file:///etc/passwd", "blocked"),
        ("gopher://127.0.0.1:70/", "blocked"),
        ("{upstream}/pages/nope", "upstream_status"),
        ("http://[::1", "invalid_arguments"),
    ],
)
async def test_fetch_failures_have_the_documented_kinds(
    web_chat: ChatClient, upstream: ThreadedServer, url: str, kind: str
) -> None:
    """Issue 43: `web_fetch`'s refusals were kind `exception`. A refusal by the outbound policy
    (an address, a scheme) is `blocked`, as for external tools; the rest say what failed."""
    invoked = await web_chat.http.post(
        "/tools/web-fetch/invoke",
        json={
            "arguments": {
                "url": url.replace("{upstream}", upstream.url).replace("{free}", str(free_port()))
            }
        },
        headers=web_chat.tenant.headers,
    )
    assert invoked.status_code == 200, invoked.text
    body = invoked.json()
    assert (body["status"], body["error"]["kind"]) == ("error", kind), body
    assert "WebError" not in body["error"]["message"]  # what failed, not a class name


@pytest.mark.settings(**FETCH, tool_response_max_bytes=2048)
async def test_fetch_reads_at_most_the_byte_cap(
    web_chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    content = await _call(web_chat, fake, "web_fetch", {"url": f"{upstream.url}/pages/article"})
    assert "Paragraph 3:" in content and "Paragraph 39" not in content


@pytest.mark.settings(**FETCH)
async def test_a_streamed_invoke_of_fetch_reports_progress(
    web_chat: ChatClient, upstream: ThreadedServer
) -> None:
    response = await web_chat.http.post(
        "/tools/web-fetch/invoke",
        json={"arguments": {"url": f"{upstream.url}/pages/injection"}},
        headers={**web_chat.tenant.headers, "Accept": "text/event-stream"},
    )
    blocks = [b for b in response.text.strip().split("\n\n") if b.startswith("event:")]
    names = [b.split("\n")[0].removeprefix("event: ") for b in blocks]
    assert names == ["tool_progress", "tool_progress", "done"]
    done = orjson.loads(blocks[-1].split("data: ", 1)[1])
    assert (
        "IGNORE ALL PREVIOUS INSTRUCTIONS" in done["content"] and "tracking" not in done["content"]
    )


@pytest.mark.settings(web_fetch_enabled=True, outbound_allow=[])
async def test_fetch_follows_each_tenants_own_outbound_policy(
    web_chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    """The operator allows nothing local; one tenant's own allow list opens the local site to
    that tenant's fetches only."""
    url = f"{upstream.url}/pages/article"
    blocked = await _call(web_chat, fake, "web_fetch", {"url": url})
    assert blocked.startswith("Error:") and "blocked" in blocked.lower()
    allow = {"allow": [f"127.0.0.1:{upstream.port}"], "force": True}
    opened = await web_chat.http.put("/tenants/acme/outbound", json=allow, headers=ADMIN)
    assert opened.status_code == 200, opened.text
    assert "Paragraph 1:" in await _call(web_chat, fake, "web_fetch", {"url": url})
    globex = await create_tenant(web_chat.http, "globex")
    other = ChatClient(web_chat.app, web_chat.http, globex)
    assert "blocked" in (await _call(other, fake, "web_fetch", {"url": url})).lower()
