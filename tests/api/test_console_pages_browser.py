"""The console's second round in a real headless browser against the real service, every request
off the machine cut: the usage page against GET /usage after a scripted run, its charts from a
known data set (SVG elements and numbers), a run's timeline, the MCP servers page (added,
tested, disabled, removed, its tools on the Tools page), hostile names and MCP server data
kept as text, busy buttons that take no second press, and a status line that belongs to its
page. Each page is screenshotted (docs/console.md shows the pictures)."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import Locator, Page, Route, expect

from tests.support.apps import ADMIN_KEY
from tests.support.browser import browser_tab
from tests.support.console import (
    HOSTILE,
    HOSTILE_NAME,
    SHOP,
    ConsoleService,
    Held,
    console_service,
    hostile_mcp,
    new_tenant,
    shot,
    unexpected,
    unlabelled,
)
from tests.support.mcp_demo import McpDemoServer
from tests.support.secantus import free_port
from tests.support.waiting import runs_recorded

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
# Thrown in front of every page that shows tenant, model or MCP server data.
WATCH_SCRIPT = (
    "window.violations = []; document.addEventListener('securitypolicyviolation',"
    " e => window.violations.push(e.violatedDirective + ' ' + e.blockedURI))"
)


@pytest.fixture(scope="module")
def service() -> Iterator[ConsoleService]:
    # 220 runs in a few seconds (the chat rate limit counts invokes too); MCP servers on
    # 127.0.0.1; chat messages kept in run records.
    with console_service(
        rate_limit_chat_per_minute=100_000,
        rate_limit_writes_per_minute=100_000,
        outbound_allow=["127.0.0.1"],
        run_store_messages=True,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def demo_mcp() -> Iterator[McpDemoServer]:
    server = McpDemoServer("streamable-http").start()
    yield server
    server.stop()


async def tenant_key(http: httpx.AsyncClient, tenant_id: str) -> dict[str, str]:
    created = await http.post("/tenants", json={"tenant_id": tenant_id}, headers=ADMIN)
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['api_key']}"}


async def scripted_run(http: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, Any]:
    """200 invokes over three tools (rolldice fails one time in two) and 20 chats (half of them
    calling roll_dice so that it fails): what each tool saw, counted here."""
    invokes = [
        ("rolldice", {"d": 1}),  # refused by the function: an error
        ("rolldice", {"d": 6}),
        ("hostile", {"text": "hi"}),
        ("count-slowly", {"count": 2}),
    ]
    for i in range(200):
        tool_id, arguments = invokes[i % 4]
        answer = await http.post(
            f"/tools/{tool_id}/invoke", json={"arguments": arguments}, headers=headers
        )
        assert answer.status_code == 200, answer.text
    for i in range(20):
        said = 'call roll_dice {"d": 1}' if i % 2 == 0 else "Roll a die"
        answer = await http.post(
            "/chat", json={"messages": [{"role": "user", "content": said}]}, headers=headers
        )
        assert answer.status_code == 200, answer.text
    await runs_recorded(http, headers, 220, "/runs?limit=500")
    return {
        "rolldice": {"calls": 100 + 20, "errors": 50 + 10},
        "hostile": {"calls": 50, "errors": 0},
        "count-slowly": {"calls": 50, "errors": 0},
        "model_calls": 40,
        "chats": 20,
    }


def nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]


async def figure(page: Page, title: str) -> Locator:
    chart = page.get_by_role("figure", name=title, exact=True)
    await expect(chart).to_be_visible()
    return chart


async def marks(chart: Locator) -> list[dict[str, str]]:
    found: list[dict[str, str]] = await chart.locator(".mark").evaluate_all(
        "nodes => nodes.map(n => ({...n.dataset}))"
    )
    return found


async def test_the_usage_page_shows_what_usage_says_after_a_scripted_run(
    service: ConsoleService,
) -> None:
    """Done when: after 200 invokes and 20 chats over several tools (some failing), the usage
    page's charts show those counts, error rates and latencies, matching GET /usage."""
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        headers = await tenant_key(http, "scripted")
        expected = await scripted_run(http, headers)
        runs = (await http.get("/runs?limit=500", headers=headers)).json()["items"]
    durations: dict[str, list[float]] = {}
    for run in runs:
        for call in run["tool_calls"]:
            durations.setdefault(call["tool_id"], []).append(call["duration_ms"])

    async with browser_tab(service.url, height=1100) as (page, tab):
        await page.goto(f"{service.url}/console")
        await page.get_by_label("Key or token").fill(headers["Authorization"].split()[1])
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("heading", name="Tools")).to_be_visible()
        async with page.expect_response(re.compile(r"/usage\?by=tool")) as tools_answer:
            async with page.expect_response(re.compile(r"/usage\?by=model")) as models_answer:
                await page.get_by_role("link", name="Usage").click()
        usage = await (await tools_answer.value).json()
        models = await (await models_answer.value).json()
        await expect(page.get_by_role("heading", name="Usage")).to_be_focused()

        # /usage says what the script did, and what the records say.
        by_tool = {k["key"]: k for k in usage["keys"]}
        for tool_id in ("rolldice", "hostile", "count-slowly"):
            assert {n: by_tool[tool_id][n] for n in ("calls", "errors")} == expected[tool_id]
            assert by_tool[tool_id]["p50_ms"] == nearest_rank(durations[tool_id], 0.5)
            assert by_tool[tool_id]["p95_ms"] == nearest_rank(durations[tool_id], 0.95)
        assert by_tool["rolldice"]["error_rate"] == 0.5
        assert usage["totals"]["calls"] == 220 and usage["totals"]["errors"] == 60
        assert models["totals"]["calls"] == expected["model_calls"]
        assert models["totals"]["runs"] == expected["chats"]

        # The page shows the same numbers: totals, each chart's marks, the tables.
        totals = page.get_by_role("definition")
        await expect(totals.nth(0)).to_have_text("220")
        await expect(totals.nth(1)).to_have_text("60")
        await expect(totals.nth(2)).to_have_text("27.27%")
        calls = await marks(await figure(page, "Tool calls over time"))
        failed = await marks(await figure(page, "Failed tool calls over time"))
        for tool_id, numbers in expected.items():
            if not isinstance(numbers, dict):
                continue
            drawn = sum(float(m["value"]) for m in calls if m["series"] == tool_id)
            drawn_errors = sum(float(m["value"]) for m in failed if m["series"] == tool_id)
            assert (drawn, drawn_errors) == (numbers["calls"], numbers["errors"]), tool_id
        assert len(calls) == len(usage["buckets"]) * len(usage["series"])
        latency = await marks(await figure(page, "Latency per tool"))
        for tool_id in ("rolldice", "hostile", "count-slowly"):
            bars = {m["series"]: float(m["value"]) for m in latency if m["row"] == tool_id}
            assert bars == {"p50": by_tool[tool_id]["p50_ms"], "p95": by_tool[tool_id]["p95_ms"]}
        failing = await marks(await figure(page, "The ten most failing tools"))
        assert [(m["row"], float(m["value"])) for m in failing] == [("rolldice", 60.0)]
        await expect(await figure(page, "The ten most failing tools")).to_contain_text(
            "failed 60 (50% of 120)"
        )
        slowest = await marks(await figure(page, "The ten slowest tools (p95)"))
        assert [m["row"] for m in slowest] == [k["key"] for k in usage["slowest"]]
        rows = page.get_by_role("table", name="Tools").locator("tbody tr")
        await expect(rows.filter(has_text="rolldice")).to_contain_text("120")
        await expect(rows.filter(has_text="rolldice")).to_contain_text("50%")
        model_calls = await marks(await figure(page, "Model calls per day"))
        assert sum(float(m["value"]) for m in model_calls) == expected["model_calls"]
        tokens = await marks(await figure(page, "Tokens per day"))
        assert sum(float(m["value"]) for m in tokens) == models["totals"]["total_tokens"] > 0
        await shot(page, "usage")

        # The keyboard reads a chart: Tab from the form's button reaches it, the arrows walk it.
        await page.get_by_role("button", name="Show usage").focus()
        await page.keyboard.press("Tab")
        chart = page.get_by_role("group", name=re.compile("^Tool calls over time"))
        await expect(chart).to_be_focused()
        await page.keyboard.press("End")
        readout = (await figure(page, "Tool calls over time")).locator(".readout")
        last = {s["key"]: s["calls"][-1] for s in usage["series"]}
        await expect(readout).to_contain_text(f"rolldice {last['rolldice']}")
        assert await unlabelled(page) == []
    assert (tab.cut, unexpected(tab)) == ([], [])


def known_usage(start: datetime) -> dict[str, Any]:
    buckets = [start + timedelta(hours=i) for i in range(6)]
    keys = [
        {
            "key": "search",
            "calls": 21,
            "errors": 3,
            "error_rate": 3 / 21,
            "p50_ms": 40.0,
            "p95_ms": 120.0,
        },
        {
            "key": "weather",
            "calls": 9,
            "errors": 0,
            "error_rate": 0.0,
            "p50_ms": 15.5,
            "p95_ms": 80.0,
        },
        {"key": "(other)", "calls": 2, "errors": 2, "error_rate": 1.0},
    ]
    return {
        "by": "tool",
        "since": buckets[0].isoformat(),
        "until": buckets[-1].isoformat(),
        "bucket": "1h",
        "bucket_s": 3600,
        "buckets": [b.isoformat() for b in buckets],
        "totals": {"calls": 32, "errors": 5, "error_rate": 5 / 32, "keys": 4},
        "keys": keys,
        "series": [
            {"key": "search", "calls": [1, 2, 3, 4, 5, 6], "errors": [0, 0, 1, 1, 0, 1]},
            {"key": "weather", "calls": [0, 0, 9, 0, 0, 0], "errors": [0] * 6},
            {"key": "(other)", "calls": [2, 0, 0, 0, 0, 0], "errors": [2, 0, 0, 0, 0, 0]},
        ],
        "slowest": keys[:2],
        "failing": [keys[0]],
    }


def known_models(start: datetime) -> dict[str, Any]:
    days = [start + timedelta(days=i) for i in range(3)]
    line = {
        "key": "acme / gpt-x",
        "provider": "acme",
        "model": "gpt-x",
        "calls": [3, 0, 5],
        "errors": [0, 0, 1],
        "runs": [2, 0, 3],
        "prompt_tokens": [30, 0, 50],
        "completion_tokens": [6, 0, 10],
        "total_tokens": [36, 0, 60],
    }
    return {
        "by": "model",
        "since": days[0].isoformat(),
        "until": days[-1].isoformat(),
        "bucket": "1d",
        "bucket_s": 86400,
        "buckets": [d.isoformat() for d in days],
        "totals": {
            "calls": 8,
            "errors": 1,
            "error_rate": 0.2,
            "keys": 1,
            "runs": 5,
            "total_tokens": 96,
        },
        "keys": [
            {
                "key": "acme / gpt-x",
                "provider": "acme",
                "model": "gpt-x",
                "calls": 8,
                "errors": 1,
                "error_rate": 0.2,
                "runs": 5,
                "prompt_tokens": 80,
                "completion_tokens": 16,
                "total_tokens": 96,
            }
        ],
        "series": [line],
        "slowest": [],
        "failing": [],
    }


async def test_each_chart_draws_a_known_data_set(service: ConsoleService) -> None:
    """The usage page drawn from answers fixed here: one mark per bucket and series at its
    value, bars at their values with the numbers written, series told apart by dash and marker
    (not colour alone), every number in a table, and the arrow keys reading each point."""
    start = datetime(2026, 3, 2, 10, tzinfo=UTC)

    async def fixed(route: Route) -> None:
        body = known_usage(start) if "by=tool" in route.request.url else known_models(start)
        await route.fulfill(json=body)

    async with browser_tab(service.url, height=1100) as (page, tab):
        await new_tenant(page, service, "known-charts")
        await page.route(re.compile(r"/usage\?"), fixed)
        await page.goto(f"{service.url}/console#/usage")
        calls = await figure(page, "Tool calls over time")
        drawn = await marks(calls)
        assert [(m["series"], int(m["bucket"]), float(m["value"])) for m in drawn] == [
            (s["key"], i, float(v))
            for s in known_usage(start)["series"]
            for i, v in enumerate(s["calls"])
        ]
        styles = await calls.locator("polyline").evaluate_all(
            "lines => lines.map(l => l.getAttribute('stroke-dasharray') || 'solid')"
        )
        shapes = await calls.locator("g.series").evaluate_all(
            "groups => groups.map(g => g.querySelector('.mark').tagName + g.querySelector('.mark')"
            ".getAttribute('d')?.slice(0, 1))"
        )
        assert len(set(styles)) == 3 and len(set(shapes)) == 3  # dash and marker differ
        await expect(calls.get_by_role("list", name="Legend")).to_have_text(
            re.compile(r"search\s*weather\s*\(other\)")
        )
        numbers = calls.locator("details table")  # the numbers, behind a disclosure
        await expect(numbers.locator("tbody tr")).to_have_count(6)
        await expect(numbers.locator("tbody tr").nth(2)).to_contain_text("3")
        await expect(numbers.locator("thead")).to_contain_text("search")

        latency = await figure(page, "Latency per tool")
        bars = await marks(latency)
        assert [(m["row"], m["series"], float(m["value"])) for m in bars] == [
            ("search", "p50", 40.0),
            ("search", "p95", 120.0),
            ("weather", "p50", 15.5),
            ("weather", "p95", 80.0),
        ]
        widths = await latency.locator(".mark").evaluate_all(
            "rects => rects.map(r => Number(r.getAttribute('width')))"
        )
        assert widths[1] == pytest.approx(3 * widths[0], rel=0.01)  # 120 is three times 40
        await expect(latency).to_contain_text("p95 120 ms")
        fills = await latency.locator(".mark").evaluate_all(
            "rects => rects.map(r => r.getAttribute('fill'))"
        )
        assert fills[0] != fills[1] and fills[1].startswith("url(#")  # p95 hatched, not a hue
        failing = await figure(page, "The ten most failing tools")
        await expect(failing).to_contain_text("failed 3 (14.29% of 21)")
        tokens = await marks(await figure(page, "Tokens per day"))
        assert [float(m["value"]) for m in tokens] == [36.0, 0.0, 60.0]
        await expect(page.get_by_role("table", name="Models")).to_contain_text("acme / gpt-x")

        # Keyboard: focus the chart, the arrows move a cursor and read the point out.
        await page.get_by_role("group", name=re.compile("^Tool calls over time")).focus()
        readout = calls.locator(".readout")
        await expect(readout).to_contain_text("search 1 calls; weather 0 calls; (other) 2 calls")
        await page.keyboard.press("ArrowRight")
        await page.keyboard.press("ArrowRight")
        await expect(readout).to_contain_text("search 3 calls; weather 9 calls; (other) 0 calls")
        await page.keyboard.press("End")
        await expect(readout).to_contain_text("search 6 calls")
        await expect(calls.locator(".cursor")).to_have_attribute("visibility", "visible")
    assert (tab.cut, unexpected(tab)) == ([], [])


def known_run(run_id: str, *, messages: bool) -> dict[str, Any]:
    run: dict[str, Any] = {
        "run_id": run_id,
        "kind": "chat",
        "started_at": "2026-03-02T10:00:00Z",
        "ended_at": "2026-03-02T10:00:01Z",
        "model": "gpt-x",
        "stop_reason": "approval_required",
        "iterations": 2,
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
        "model_calls": [
            {"started_ms": 2, "duration_ms": 300, "status": "ok", "total_tokens": 15},
            {"started_ms": 700, "duration_ms": 200, "status": "ok", "total_tokens": 15},
        ],
        "tool_calls": [
            {
                "id": "c1",
                "name": "search",
                "tool_id": "search",
                "status": "ok",
                "duration_ms": 150,
                "started_ms": 310,
                "arguments": {"q": "tides"},
            },
            {
                "id": "c2",
                "name": "weather",
                "tool_id": "weather",
                "status": "error",
                "duration_ms": 220,
                "started_ms": 470,
                "arguments": {"city": "Brest"},
            },
        ],
        "approvals": [{"call_id": "c3", "tool": "wipe", "arguments": {}, "decision": "pending"}],
    }
    if messages:
        run["messages"] = [
            {"role": "user", "content": "Tides in Brest? [redacted]"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "tides"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "high tide at 10:42"},
        ]
    return run


async def test_a_run_is_a_timeline_with_its_messages(service: ConsoleService) -> None:
    """A run's model calls and tool calls on one time axis, the failed call and the wait for a
    person marked in words and pattern, then its stored messages, or a sentence saying that the
    service does not store them; then a real chat's run, drawn from its record."""
    run_id, bare_id = "a" * 32, "b" * 32

    async def fixed(route: Route) -> None:
        await route.fulfill(
            json=known_run(route.request.url[-32:], messages=run_id in route.request.url)
        )

    async with browser_tab(service.url, height=1000) as (page, tab):
        await new_tenant(page, service, "timeline")
        await page.route(re.compile(r"/runs/[ab]{32}$"), fixed)
        await page.goto(f"{service.url}/console#/runs/{run_id}")
        timeline = await figure(page, "Timeline")
        steps = await marks(timeline)
        assert [(m["row"], float(m["start"]), float(m["value"]), m["outcome"]) for m in steps] == [
            ("model call 1 (gpt-x)", 2.0, 300.0, "ok"),
            ("search (tool call)", 310.0, 150.0, "ok"),
            ("weather (tool call)", 470.0, 220.0, "error"),
            ("model call 2 (gpt-x)", 700.0, 200.0, "ok"),
            ("waiting for a person", 900.0, 100.0, "waiting"),
        ]
        await expect(timeline).to_contain_text("220 ms error")
        await expect(timeline).to_contain_text("wipe wait")
        await expect(timeline.locator("details table")).to_contain_text("470")
        messages = page.get_by_role("region", name="Messages")
        await expect(messages.locator("li.message")).to_have_count(3)
        await expect(messages).to_contain_text('search({"q": "tides"})')
        await expect(messages).to_contain_text("[redacted]")
        await page.get_by_role("group", name=re.compile("^Timeline")).focus()
        await page.keyboard.press("ArrowDown")
        await expect(timeline.locator(".readout")).to_contain_text(
            "search (tool call): starts at 310 ms, takes 150 ms, ok"
        )
        await shot(page, "run-timeline")

        await page.goto(f"{service.url}/console#/runs/{bare_id}")
        await expect(page.get_by_role("region", name="Messages")).to_contain_text(
            "does not store chat messages (RUN_STORE_MESSAGES is off)"
        )

        # A real chat (this service keeps messages): its record drawn the same way.
        await page.unroute(re.compile(r"/runs/[ab]{32}$"))
        await page.get_by_role("link", name="Chat").click()
        await page.get_by_label("Message").fill("Roll a die")
        await page.get_by_role("button", name="Send").click()
        await expect(page.locator(".event-done")).to_contain_text("Done (completed)")
        key = await page.evaluate("JSON.parse(sessionStorage['toolgate.console.credential']).key")
        async with httpx.AsyncClient(base_url=service.url) as http:
            [recorded] = await runs_recorded(http, {"Authorization": f"Bearer {key}"}, 1)
        await page.goto(f"{service.url}/console#/runs/{recorded['run_id']}")
        timeline = await figure(page, "Timeline")
        rows = [m["row"] for m in await marks(timeline)]
        assert rows == [
            "model call 1 (gpt-4o-mini)",
            "roll_dice (tool call)",
            "model call 2 (gpt-4o-mini)",
        ]
        await expect(
            page.get_by_role("region", name="Messages").locator("li.message")
        ).to_have_count(4)
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_an_mcp_server_is_added_tested_and_removed_from_the_console(
    service: ConsoleService, demo_mcp: McpDemoServer
) -> None:
    """Done when: an MCP server can be added, tested and removed from the console, and its
    tools then appear in the tools page."""
    async with browser_tab(service.url, height=1100) as (page, tab):
        await new_tenant(page, service, "mcp-admin")
        await page.get_by_role("link", name="MCP servers", exact=True).click()
        await expect(page.get_by_role("heading", name="MCP servers")).to_be_focused()

        # The service's checks, field by field: a URL its policy refuses.
        await page.get_by_label("Name", exact=True).fill("demo")
        await page.get_by_label("URL").fill("http://169.254.169.254/mcp")
        await page.get_by_role("button", name="Add server").click()
        problem = page.get_by_role("alert")
        await expect(problem).to_contain_text("The server's URL is not allowed.")
        await expect(problem).to_contain_text("$.url")
        await page.get_by_label("Headers").fill("not a header line")
        await page.get_by_label("URL").fill(demo_mcp.url)
        await page.get_by_role("button", name="Add server").click()
        await expect(page.get_by_role("alert")).to_contain_text("Headers, line 1")

        await page.get_by_label("Headers").fill("X-User: ada-header-value")
        await page.get_by_label("Description").fill("The demo server")
        await page.get_by_role("button", name="Add server").click()
        await expect(page.locator("#status")).to_have_text("Added the MCP server demo.")
        row = page.locator("tbody tr", has_text="demo")
        await expect(row).to_contain_text("X-User: ****")
        assert "ada-header-value" not in await page.content()

        await row.get_by_role("button", name="Test the connection to demo").click()
        tools = page.get_by_role("table", name=re.compile("tools? of demo$"))
        await expect(tools).to_contain_text("demo__add")
        await expect(tools).to_contain_text("Add two integers.")
        await expect(page.locator("#status")).to_contain_text("demo: ")
        await shot(page, "mcp-servers")

        await page.get_by_role("link", name="Tools", exact=True).click()
        listed = page.get_by_role("region", name="MCP tools")
        await expect(listed).to_contain_text("demo__add")
        await expect(listed).to_contain_text("demo__whoami")
        await shot(page, "tools-with-mcp")

        # Disabled, its tools leave the tools page; enabled, they come back; edited, kept.
        await page.get_by_role("link", name="MCP servers", exact=True).click()
        await row.get_by_role("button", name="Disable demo").click()
        await expect(page.locator("#status")).to_have_text("Disabled demo.")
        await expect(row.locator("td").nth(4)).to_have_text("no")
        await page.get_by_role("link", name="Tools", exact=True).click()
        await expect(page.get_by_role("heading", name="Tools")).to_be_focused()
        await expect(page.get_by_role("region", name="MCP tools")).to_have_count(0)
        await page.get_by_role("link", name="MCP servers", exact=True).click()
        await row.get_by_role("button", name="Enable demo").click()
        await expect(row.locator("td").nth(4)).to_have_text("yes")
        await row.get_by_role("button", name="Edit demo").click()
        await expect(page.get_by_role("heading", name="Edit demo")).to_be_visible()
        await expect(page.get_by_label("Name", exact=True)).to_have_attribute("readonly", "")
        await page.get_by_label("Never these tools").fill("fail")
        await page.get_by_role("button", name="Save server").click()
        await expect(page.locator("#status")).to_have_text("Saved the MCP server demo.")
        await expect(row).to_contain_text("not fail")
        await expect(row).to_contain_text("X-User: ****")  # left empty: kept

        # A server that does not answer: the test says exactly why.
        await page.get_by_label("Name", exact=True).fill("gone")
        await page.get_by_label("URL").fill(f"http://127.0.0.1:{free_port()}/mcp")  # none listens
        await page.get_by_role("button", name="Add server").click()
        await expect(page.locator("#status")).to_have_text("Added the MCP server gone.")
        gone = page.locator("tbody tr", has_text="gone")
        await gone.get_by_role("button", name="Test the connection to gone").click()
        await expect(page.get_by_role("alert")).to_contain_text("MCP server 'gone' is unavailable")
        assert await unlabelled(page) == []

        for name in ("gone", "demo"):
            delete = page.get_by_role("button", name=f"Delete {name}")
            await delete.click()
            await page.get_by_role("button", name=f"Delete {name}?").click()  # confirmed
            await expect(page.locator("#status")).to_have_text(f"Deleted the MCP server {name}.")
        await expect(page.get_by_role("table").first).to_contain_text("0 MCP servers")
        await page.get_by_role("link", name="Tools", exact=True).click()
        await expect(page.get_by_role("heading", name="Tools")).to_be_focused()
        await expect(page.get_by_text("demo__add")).to_have_count(0)
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_hostile_tool_names_and_mcp_server_data_stay_text(
    service: ConsoleService,
) -> None:
    """A tool name a model made up, an MCP server's description and its tools' descriptions,
    all carrying script and markup: on the usage page, a run's timeline, the MCP servers and
    tools pages they are text; nothing ran, nothing became an element, the policy saw nothing."""
    hostile_server = await asyncio.to_thread(hostile_mcp().start)
    try:
        async with browser_tab(service.url, height=1000) as (page, tab):
            await page.add_init_script(WATCH_SCRIPT)
            await new_tenant(page, service, "hostile-pages")
            key = await page.evaluate(
                "JSON.parse(sessionStorage['toolgate.console.credential']).key"
            )
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=service.url) as http:
                entry = {
                    "name": "evil",
                    "type": "streamable-http",
                    "url": hostile_server.url,
                    "description": HOSTILE,
                }
                assert (
                    await http.post("/mcp-servers", json=entry, headers=headers)
                ).status_code == 201
                said = f"call {HOSTILE_NAME} {{}}"
                chat = await http.post(
                    "/chat", json={"messages": [{"role": "user", "content": said}]}, headers=headers
                )
                assert chat.status_code == 200, chat.text
                [run] = await runs_recorded(http, headers, 1)

            await page.get_by_role("link", name="Usage").click()
            await expect(page.get_by_role("table", name="Tools")).to_contain_text(HOSTILE_NAME)
            await page.goto(f"{service.url}/console#/runs/{run['run_id']}")
            await expect(await figure(page, "Timeline")).to_contain_text("(tool call)")
            await expect(page.get_by_role("table", name="Tool calls")).to_contain_text(HOSTILE_NAME)
            await page.get_by_role("link", name="MCP servers", exact=True).click()
            await expect(page.locator("tbody tr", has_text="evil")).to_contain_text("<script>")
            await page.get_by_role("button", name="Test the connection to evil").click()
            await expect(page.get_by_role("table", name=re.compile("of evil$"))).to_contain_text(
                "window.pwned"
            )
            await page.get_by_role("link", name="Tools", exact=True).click()
            await expect(page.get_by_role("region", name="MCP tools")).to_contain_text("evil__echo")
            pwned = await page.evaluate("window.pwned ?? null")
            violations = await page.evaluate("window.violations")
            injected = await page.evaluate(
                "document.querySelectorAll('main img, main script, main b, a[href^=javascript]')"
                ".length"
            )
        assert (pwned, injected, violations) == (None, 0, [])
        assert (tab.cut, unexpected(tab)) == ([], [])
    finally:
        await asyncio.to_thread(hostile_server.stop)


async def test_long_requests_are_busy_and_the_status_belongs_to_its_page(
    service: ConsoleService,
) -> None:
    """An import held by the test: the form says it is working, its buttons take no second
    press, one request goes out; the import then says what it stored. A page's status line is
    emptied on navigation, and a request of a page left behind does not write on the next."""
    async with browser_tab(service.url, height=1000) as (page, tab):
        await new_tenant(page, service, "busy")
        held = Held()
        await page.route(re.compile(r"/tools/import$"), held.hold)
        await page.goto(f"{service.url}/console#/import")
        await page.get_by_label("Document (JSON or YAML)").fill(json.dumps(SHOP))
        preview = page.get_by_role("button", name="Preview (dry run)")
        await preview.click()
        await held.arrival()
        form = page.locator("main form")
        await expect(form).to_have_attribute("aria-busy", "true")
        await expect(preview).to_be_disabled()
        await expect(
            page.get_by_role("progressbar", name="Reading and converting the document…")
        ).to_be_visible()
        await preview.dispatch_event("click")
        await page.get_by_label("Prefix for tool ids and names").press("Enter")  # submits
        await held.routes[0].continue_()
        region = page.get_by_role("region", name="Preview")
        await expect(region).to_contain_text("getOrder")
        counts = region.get_by_role("definition")
        await expect(counts).to_have_text(["2", "1", "1", "0"])  # read, converted, skipped, refused
        await expect(region.get_by_role("table", name="Skipped, by reason")).to_contain_text("1")
        assert len(held.routes) == 1

        store = page.get_by_role("button", name="Import 1 tool")
        await store.click()
        await held.arrival()
        await expect(store).to_be_disabled()
        await expect(preview).to_be_disabled()  # the whole form waits
        await store.dispatch_event("click")
        await held.routes[1].continue_()
        imported = page.get_by_role("region", name="Imported")
        await expect(imported.get_by_role("heading")).to_have_text("Imported: 1 tool stored")
        await expect(imported.get_by_role("link", name="getOrder")).to_be_visible()
        await expect(page.locator("#status")).to_have_text("Imported 1 tool.")
        assert len(held.routes) == 2

        # The status line belongs to its page.
        await page.get_by_role("link", name="Runs").click()
        await expect(page.get_by_role("heading", name="Runs")).to_be_focused()
        await expect(page.locator("#status")).to_have_text("")
        await page.unroute(re.compile(r"/tools/import$"))
        late = Held()
        await page.route(re.compile(r"/tools/rolldice/invoke$"), late.hold)
        await page.goto(f"{service.url}/console#/invoke/rolldice")
        await page.get_by_label("d (required): integer").fill("6")
        await page.get_by_role("button", name="Run the tool").click()
        invoke = await late.arrival()
        await page.get_by_role("link", name="Secrets").click()
        await expect(page.get_by_role("heading", name="Secrets")).to_be_focused()
        async with page.expect_response(re.compile(r"/invoke$")) as done:
            await invoke.continue_()
        await (await done.value).finished()
        await expect(page.get_by_role("heading", name="Secrets")).to_be_visible()
        await expect(page.locator("#status")).to_have_text("")  # rolldice's answer: not here
        await expect(page.get_by_role("region", name="Result")).to_have_count(0)

    async with httpx.AsyncClient(base_url=service.url) as http:
        head = await http.head("/console")
        page_answer = await http.get("/console")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == page_answer.headers["content-type"]
    assert (tab.cut, unexpected(tab)) == ([], [])
