"""/console in a real headless browser against the real service (the demo fake model behind it),
with every request off the machine cut: the README tour by clicking, hostile tool data shown as
text only, and the admin pages. Each page is screenshotted; with TOOLGATE_UPDATE_SCREENSHOTS=1
the pictures go to docs/console/ (docs/console.md shows them)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.async_api import Page, expect

from tests.support.apps import ADMIN_KEY
from tests.support.browser import browser_tab
from tests.support.console import (
    HOSTILE,
    SHOP,
    ConsoleService,
    Held,
    console_service,
    new_tenant,
    shot,
    sign_in,
    unexpected,
    unlabelled,
)
from tests.support.waiting import within

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WEATHER = {
    "tool_id": "weather-api",
    "type": "external",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "url": "https://api.example.com/weather",
        "method": "GET",
    },
    "context_parameters": [{"name": "user_id", "type": "string"}],
    "tags": ["weather"],
}


@pytest.fixture(scope="module")
def service() -> Iterator[ConsoleService]:
    with console_service() as running:
        yield running


async def test_the_readme_tour_by_clicking(service: ConsoleService) -> None:
    async with browser_tab(service.url, height=1000) as (page, tab):
        await new_tenant(page, service, "acme")
        await expect(page.get_by_role("link", name="rolldice")).to_be_visible()
        await page.get_by_label("Filter by id, name or description").fill("dice")
        await expect(page.locator("tbody tr")).to_have_count(1)
        await shot(page, "tools")

        await page.get_by_role("link", name="New tool").click()
        editor = page.get_by_label("Tool document (JSON)")
        await editor.fill('{"tool_id": "weather-api",')
        await expect(page.locator(".problems")).to_contain_text("not JSON")
        await editor.fill(json.dumps({**WEATHER, "tool_id": "bad id"}, indent=2))
        await expect(page.locator(".problems")).to_contain_text("$.tool_id")
        await editor.fill(json.dumps(WEATHER, indent=2))
        await editor.blur()
        await expect(page.locator(".problems")).to_contain_text("No problems found.")
        await page.get_by_role("button", name="Add parameter").click()
        await page.get_by_label("Parameter 2 name").fill("units")
        await page.get_by_label("Parameter 2 name").blur()
        assert '"units"' in await editor.input_value()
        await shot(page, "editor")
        await page.get_by_role("button", name="Create tool").click()
        await expect(page.get_by_role("heading", name="Edit weather-api")).to_be_visible()
        await expect(page.locator("#status")).to_have_text("Saved weather-api.")
        stored = json.loads(await editor.input_value())  # as the service answers it now
        assert stored["context_parameters"][0]["name"] == "user_id"

        # `GET /tools/?type=external&tag=weather`, by the Tools page's filters.
        await page.get_by_role("link", name="Tools").click()
        await expect(page.get_by_role("heading", name="Tools")).to_be_focused()  # the page is drawn
        await page.get_by_label("Type", exact=True).select_option("external")
        await expect(page.get_by_role("link", name="rolldice")).to_have_count(0)
        await page.get_by_label("Tag").fill("weather")
        await page.get_by_label("Tag").press("Enter")
        await expect(page.locator("tbody tr")).to_have_count(1)
        await expect(page.locator("tbody tr")).to_contain_text("weather-api")
        assert [
            r
            for r in tab.requests
            if r.endswith("/tools/?limit=100&offset=0&type=external&tag=weather")
        ]

        await page.goto(f"{service.url}/console#/import")
        await page.get_by_label("Document (JSON or YAML)").fill(json.dumps(SHOP))
        await page.get_by_label("Prefix for tool ids and names").fill("shop_")
        await page.get_by_role("button", name="Preview (dry run)").click()
        preview = page.get_by_role("region", name="Preview")
        await expect(preview).to_contain_text("shop_getOrder")
        await expect(preview).to_contain_text("is not JSON, a form or multipart")
        await shot(page, "import")
        await page.get_by_role("button", name="Import 1 tool").click()
        await expect(page.locator("#status")).to_have_text("Imported 1 tool.")

        await page.goto(f"{service.url}/console#/invoke/rolldice")
        await page.get_by_label("d (required): integer").fill("20")
        await page.get_by_role("button", name="Run the tool").click()
        result = page.get_by_role("region", name="Result")
        await expect(result).to_contain_text("ok")
        assert 1 <= int(await result.locator("pre").inner_text()) <= 20
        await shot(page, "invoke")
        await page.get_by_label("d (required): integer").fill("1")  # the function refuses it
        await page.get_by_role("button", name="Run the tool").click()
        failed = page.get_by_role("region", name="Error")
        await expect(failed.locator("dl")).to_contain_text("Error kind")
        await expect(failed.locator("pre")).to_contain_text("d must be between 2 and")

        await page.goto(f"{service.url}/console#/chat")
        await page.get_by_label("Message").fill("Roll a six-sided die for me.")
        await page.get_by_label("Context arguments (JSON object)").fill('{"user_id": "u-42"}')
        await page.get_by_label("Only these tool ids").fill("rolldice")
        async with page.expect_request(lambda r: r.url.endswith("/chat")) as sent:
            await page.get_by_role("button", name="Send").click()
        body = (await sent.value).post_data_json
        assert (body["context_arguments"], body["tool_ids"]) == ({"user_id": "u-42"}, ["rolldice"])
        events = page.get_by_role("list", name="Events")
        await expect(events.locator(".event-done")).to_be_visible()
        await expect(events.locator(".event-tool_call")).to_contain_text('roll_dice {"d":6}')
        await expect(events.locator(".event-tool_result")).to_contain_text("Result ok")
        answer = page.get_by_role("list", name="Conversation")
        await expect(answer).to_contain_text("Tool results:")
        await shot(page, "chat")
        # The context value never comes back to the caller.
        assert "u-42" not in await events.inner_text() + await answer.inner_text()
        await page.get_by_role("button", name="New conversation").click()
        await page.get_by_label("Context arguments (JSON object)").fill("")
        await page.get_by_label("Only these tool ids").fill("")
        await page.get_by_label("Message").fill("Roll again.")
        await page.get_by_role("button", name="Send").click()
        await expect(events.locator(".event-done")).to_contain_text("Done (completed)")
        await expect(answer).to_contain_text("user: Roll again.")

        await page.goto(f"{service.url}/console#/runs")
        chat_run = page.locator("tbody tr", has_text="chat").first
        for _ in range(50):  # run records are written just after the answer
            if await chat_run.count():
                break
            await page.get_by_role("button", name="Show runs").click()
            await page.wait_for_timeout(100)
        await expect(page.locator("tbody tr", has_text="invoke")).to_have_count(2)  # ok, error
        await shot(page, "runs")
        assert "null" not in (await page.locator("main").inner_text()).split()
        await chat_run.get_by_role("link").click()
        await expect(page.get_by_role("table", name="Tool calls")).to_contain_text("roll_dice")
        await page.goto(f"{service.url}/console#/edit/rolldice")
        stats = page.get_by_role("region", name="Statistics")
        await expect(stats.locator("dd").first).not_to_have_text("0")  # the calls above

        await page.get_by_role("link", name="Tools").click()
        await page.get_by_role("button", name="Delete weather-api").click()
        await page.get_by_role("button", name="Delete weather-api").click()  # confirmed
        await expect(page.locator("#status")).to_have_text("Deleted weather-api.")
        await expect(page.get_by_role("link", name="weather-api")).to_have_count(0)

        key = await page.evaluate("JSON.parse(sessionStorage['toolgate.console.credential']).key")
        stored = await page.evaluate("[localStorage.length, document.cookie]")
    assert key.startswith("tg_") and stored == [0, ""]
    assert not [r for r in tab.requests if key in r]  # the key never travels in a URL
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_client_tokens_and_write_only_secrets(service: ConsoleService) -> None:
    async with browser_tab(service.url, height=1000) as (page, tab):
        await new_tenant(page, service, "tokens-and-secrets")
        await page.get_by_role("link", name="Client tokens").click()
        await expect(page.get_by_role("heading", name="Client tokens", exact=True)).to_be_focused()
        await page.get_by_label("Name", exact=True).fill("alice")
        await page.get_by_label("Only these tool ids").fill("rolldice")
        await page.get_by_label("Bound context arguments").fill('{"user_id": "u-42"}')
        await page.get_by_role("button", name="Create token").click()
        token = await page.get_by_label("The token for alice").input_value()
        await expect(page.get_by_role("table")).to_contain_text("user_id")
        await shot(page, "tokens")

        await page.get_by_role("link", name="Secrets").click()
        await expect(page.get_by_role("heading", name="Secrets", exact=True)).to_be_focused()
        await page.get_by_label("Name", exact=True).fill("weather_key")
        await page.get_by_label("Value (write-only)").fill("wk-0123456789abcdef")
        await page.get_by_role("button", name="Save secret").click()
        await expect(page.get_by_role("table")).to_contain_text("weather_key")
        await expect(page.get_by_label("Value (write-only)")).to_have_value("")
        assert "wk-0123456789abcdef" not in await page.content()
        await shot(page, "secrets")

        # A client token opens the chat page only, and chats with its own selection.
        await page.get_by_role("button", name="Sign out").click()
        await sign_in(page, token)
        await expect(page.get_by_role("heading", name="Chat")).to_be_visible()
        assert await page.get_by_role("navigation").inner_text() == "Chat"
        await page.get_by_label("Message").fill("Roll for me.")
        await page.get_by_role("button", name="Send").click()
        await expect(page.locator(".event-done")).to_be_visible()
    assert (tab.cut, unexpected(tab)) == ([], [])


async def continued(page: Page, decide: str, reason: str) -> dict[str, Any]:
    """Decide the one waiting call in the page; the request the console sent for it."""
    approvals = page.get_by_role("region", name="Approvals")
    await approvals.get_by_label(f"{decide} roll_dice").check()
    await approvals.get_by_label("Reason for roll_dice").fill(reason)
    async with page.expect_request(lambda r: r.url.endswith("/chat")) as sent:
        await approvals.get_by_role("button", name="Send decisions").click()
    body: dict[str, Any] = (await sent.value).post_data_json
    return body


async def test_a_chat_waits_for_a_persons_decision_and_shows_progress(
    service: ConsoleService,
) -> None:
    """As docs/chat.md's approval section, by clicking: the die waits for a person; approved it
    rolls, refused the model reads the reason. A counting tool's progress updates one line."""
    async with browser_tab(service.url, height=1200) as (page, tab):
        await new_tenant(page, service, "approver")
        await page.goto(f"{service.url}/console#/edit/rolldice")
        editor = page.get_by_label("Tool document (JSON)")
        document = json.loads(await editor.input_value())
        await editor.fill(json.dumps({**document, "approval": "always"}, indent=2))
        await page.get_by_role("button", name="Save changes").click()
        await expect(page.locator("#status")).to_have_text("Saved rolldice.")

        await page.get_by_role("link", name="Chat").click()
        await page.get_by_label("Message").fill("Roll a die")
        await page.get_by_label("Only these tool ids").fill("rolldice")
        await page.get_by_role("button", name="Send").click()
        approvals = page.get_by_role("region", name="Approvals")
        await expect(approvals.get_by_role("group")).to_contain_text("roll_dice (call_")
        await expect(approvals.get_by_label("Arguments of roll_dice")).to_have_text(
            json.dumps({"d": 6}, indent=2)
        )
        events = page.get_by_role("list", name="Events")
        await expect(events.locator(".event-approval_required")).to_contain_text(
            'Waiting for a person: roll_dice {"d":6}'
        )
        await expect(events.locator(".event-tool_result")).to_have_count(0)  # nothing ran
        await expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
        assert await unlabelled(page) == []
        await shot(page, "chat-approval")
        waiting = await page.evaluate("document.querySelector('.event-done').textContent")

        body = await continued(page, "Approve", "fine by Ada")
        await expect(events.locator(".event-done")).to_contain_text("Done (completed)")
        await expect(events.locator(".event-tool_result")).to_contain_text("Result ok")
        conversation = page.get_by_role("list", name="Conversation")
        await expect(conversation).to_contain_text("person: Approved roll_dice (fine by Ada)")
        await expect(conversation.locator(".answer").last).to_contain_text("Tool results: ")
        await expect(approvals).to_have_count(0)
        [user, assistant] = body["messages"]
        [call] = assistant["tool_calls"]
        assert "approval_required" in waiting and user == {"role": "user", "content": "Roll a die"}
        assert body == {
            "tool_ids": ["rolldice"],
            "messages": [user, assistant],
            "approvals": [
                {
                    "call_id": call["id"],
                    "approved": True,
                    "tool": "roll_dice",
                    "arguments": {"d": 6},
                    "reason": "fine by Ada",
                }
            ],
            "stream": True,
        }

        await page.get_by_label("Message").fill("Roll a die")
        await page.get_by_role("button", name="Send").click()
        body = await continued(page, "Refuse", "not now")
        assert body["approvals"][0]["approved"] is False
        await expect(conversation.locator(".answer").last).to_have_text(
            re.compile(r"^Tool results: .*Error: a person refused this call: not now$")
        )
        await expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()

        await page.get_by_role("button", name="New conversation").click()
        await page.get_by_label("Message").fill("Please count_slowly for me.")
        await page.get_by_label("Only these tool ids").fill("count-slowly")
        await page.get_by_role("button", name="Send").click()
        await expect(events.locator(".event-done")).to_contain_text("Done (completed)")
        progress = events.locator(".event-tool_progress")
        await expect(progress).to_have_count(1)  # each report updates the call's line
        await expect(progress).to_have_text(
            "tool_progress count_slowly: counted 3 of 3 100% (report 3)"
        )
        await expect(progress.get_by_label("Progress of count_slowly")).to_have_attribute(
            "value", "1"
        )
        await expect(events.locator(".event-tool_result")).to_contain_text("counted to 3")
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_categories_are_made_edited_and_deleted_with_their_tools(
    service: ConsoleService,
) -> None:
    async with browser_tab(service.url, height=1000) as (page, tab):
        await new_tenant(page, service, "categorized")
        await page.get_by_role("link", name="Categories").click()
        form = page.get_by_role("heading", name="New category")
        await expect(form).to_be_visible()
        await page.get_by_label("Name", exact=True).fill("bad name!")
        await page.get_by_role("button", name="Create category").click()
        await expect(page.get_by_role("alert")).to_contain_text("$.name")
        await page.get_by_label("Name", exact=True).fill("weather")
        await page.get_by_label("Description").fill("Forecasts and tides")
        await page.get_by_label("Usage hints").fill("Use for weather questions only.")
        await page.get_by_role("button", name="Create category").click()
        await expect(page.locator("#status")).to_have_text("Saved the category weather.")
        row = page.locator("tbody tr", has_text="weather")
        await expect(row).to_contain_text("Use for weather questions only.")
        await page.get_by_label("Name", exact=True).fill("weather")  # a name taken: 409
        await page.get_by_role("button", name="Create category").click()
        await expect(page.get_by_role("alert")).to_contain_text("already exists")

        # Edit: the name stays, the rest is replaced.
        await page.get_by_role("button", name="Edit category weather").click()
        await expect(page.get_by_role("heading", name="Edit weather")).to_be_visible()
        await expect(page.get_by_label("Name", exact=True)).to_have_attribute("readonly", "")
        await expect(page.get_by_label("Usage hints")).to_have_value(
            "Use for weather questions only."
        )
        await page.get_by_label("Enabled").uncheck()
        await page.get_by_role("button", name="Save category").click()
        await expect(row.locator("td").nth(2)).to_have_text("no")
        await page.get_by_role("button", name="Edit category default").click()
        await page.get_by_label("Enabled").uncheck()
        await page.get_by_role("button", name="Save category").click()
        problem = page.get_by_role("alert")
        await expect(problem).to_contain_text("The 'default' category cannot be disabled")
        await expect(problem).to_contain_text("$.enabled: 'default' is always enabled")
        await page.get_by_role("button", name="Cancel editing").click()
        await expect(page.get_by_role("heading", name="New category")).to_be_visible()
        await expect(page.get_by_role("button", name="Delete category default")).to_have_count(0)

        # A tool in the category goes with it; the second press says so.
        await page.goto(f"{service.url}/console#/edit")
        await expect(page.get_by_role("heading", name="New tool")).to_be_focused()
        tool = {**WEATHER, "category": "weather"}
        await page.get_by_label("Tool document (JSON)").fill(json.dumps(tool, indent=2))
        await page.get_by_role("button", name="Create tool").click()
        await expect(page.locator("#status")).to_have_text("Saved weather-api.")
        await page.get_by_role("link", name="Categories").click()
        await expect(row.locator("td").nth(4)).to_have_text("1")
        await shot(page, "categories")
        delete = page.get_by_role("button", name="Delete category weather")
        await delete.click()
        await expect(
            page.get_by_role("button", name="Delete weather and its 1 tool?")
        ).to_be_visible()
        await page.get_by_role("button", name="Delete weather and its 1 tool?").click()
        await expect(page.locator("#status")).to_have_text(
            "Deleted weather and 1 tool: weather-api."
        )
        await expect(row).to_have_count(0)
        await page.get_by_role("link", name="Tools").click()
        await expect(page.get_by_role("link", name="rolldice")).to_be_visible()
        await expect(page.get_by_role("link", name="weather-api")).to_have_count(0)
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_model_providers_name_a_secret_and_never_show_a_key(
    service: ConsoleService,
) -> None:
    async with browser_tab(service.url, height=1100) as (page, tab):
        await new_tenant(page, service, "providers")
        await page.get_by_role("link", name="Secrets").click()
        await expect(page.get_by_role("heading", name="Secrets", exact=True)).to_be_focused()
        await page.get_by_label("Name", exact=True).fill("openai_key")
        await page.get_by_label("Value (write-only)").fill("sk-never-shown-0123456789")
        await page.get_by_role("button", name="Save secret").click()
        await expect(page.get_by_role("table")).to_contain_text("openai_key")

        await page.get_by_role("link", name="Model providers").click()
        await expect(
            page.get_by_role("heading", name="Model providers", exact=True)
        ).to_be_focused()
        await page.get_by_label("Name", exact=True).fill("openai")
        await page.get_by_label("API", exact=True).select_option("responses")
        await page.get_by_label("Base URL").fill("http://127.0.0.1:9/v1")  # not a public host
        await page.get_by_label("API key secret").select_option("openai_key")
        await page.get_by_label("Default model").fill("gpt-4o-mini")
        await page.get_by_label("Other models chats may name").fill("gpt-4o")
        await page.get_by_label("The tenant's default provider").check()
        await page.get_by_role("button", name="Create provider").click()
        problem = page.get_by_role("alert")
        await expect(problem).to_contain_text("The model provider cannot be used as given.")
        await expect(problem).to_contain_text("$.base_url")
        await page.get_by_label("Base URL").fill("https://api.openai.com/v1")
        await page.get_by_role("button", name="Create provider").click()
        await expect(page.locator("#status")).to_have_text("Saved the model provider openai.")
        row = page.locator("tbody tr", has_text="openai")
        for text in ("responses", "https://api.openai.com/v1", "openai_key", "gpt-4o-mini, gpt-4o"):
            await expect(row).to_contain_text(text)
        await expect(row.locator("td").nth(6)).to_have_text("yes")

        await page.get_by_role("button", name="Edit provider openai").click()
        await expect(page.get_by_role("heading", name="Edit openai")).to_be_visible()
        await expect(page.get_by_label("API key secret")).to_have_value("openai_key")
        await expect(page.get_by_label("Other models chats may name")).to_have_value("gpt-4o")
        await page.get_by_label("Default model").fill("gpt-4o")
        await page.get_by_label("Other models chats may name").fill("")
        await page.get_by_role("button", name="Save provider").click()
        await expect(page.locator("#status")).to_have_text("Saved the model provider openai.")
        await expect(row.locator("td").nth(5)).to_have_text("gpt-4o")
        await shot(page, "providers")
        assert "sk-never-shown" not in await page.content()

        await page.get_by_role("button", name="Delete provider openai").click()
        await page.get_by_role("button", name="Delete openai?").click()  # confirmed
        await expect(page.locator("#status")).to_have_text("Deleted the model provider openai.")
        await expect(page.get_by_role("table")).to_contain_text("0 model providers")
    assert not [r for r in tab.requests if "sk-never-shown" in r]
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_hostile_names_descriptions_and_outputs_stay_text(service: ConsoleService) -> None:
    async with browser_tab(service.url, height=1000) as (page, tab):
        await page.add_init_script(
            "window.violations = []; document.addEventListener('securitypolicyviolation',"
            " e => window.violations.push(e.violatedDirective + ' ' + e.blockedURI))"
        )
        await new_tenant(page, service, "hostile")
        await expect(page.get_by_text("onerror=\"window.pwned = 'description'\"")).to_be_visible()
        await page.goto(f"{service.url}/console#/invoke/hostile")
        await page.get_by_label("text (required): string").fill('<img src="y" onerror="pwned=1">')
        await page.get_by_role("button", name="Run the tool").click()
        output = page.get_by_role("region", name="Result").locator("pre")
        await expect(output).to_have_text(f'{HOSTILE} <img src="y" onerror="pwned=1">')
        run_link = page.get_by_role("region", name="Result").get_by_role("link")
        await run_link.click()
        await expect(page.get_by_role("table", name="Tool calls")).to_contain_text("hostile")
        pwned = await page.evaluate("window.pwned ?? null")
        violations = await page.evaluate("window.violations")
        injected = await page.evaluate(
            "document.querySelectorAll('main img, main script, main b, a[href^=javascript]').length"
        )
    assert (pwned, injected, violations) == (None, 0, [])
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_admin_edits_an_allow_list_and_rotates_a_key(service: ConsoleService) -> None:
    async with browser_tab(service.url, height=900) as (page, tab):
        await new_tenant(page, service, "allowed")
        tenant_tab = page
        page = await page.context.new_page()  # its own session storage: the admin's tab
        await page.goto(f"{service.url}/console")
        await sign_in(page, ADMIN_KEY)
        row = page.locator("tbody tr", has_text="allowed")
        await expect(row).to_be_visible()
        await shot(page, "tenants")
        await row.get_by_role("button", name="Rotate the key of allowed").click()
        await row.get_by_role("button", name="Rotate the key of allowed").click()  # confirmed
        await expect(page.get_by_label("The key of allowed: shown only now")).to_be_visible()
        # The tenant's tab held the old key: its next request sends it back to sign in.
        await tenant_tab.get_by_role("link", name="Runs").click()
        await expect(tenant_tab.get_by_role("heading", name="Sign in")).to_be_visible()
        await expect(tenant_tab.get_by_role("alert")).to_contain_text("API key is not valid")
        await page.get_by_role("link", name="Allow list").first.click()
        entries = page.get_by_label("Entries, one per line")
        await entries.fill("api.example.com\n127.0.0.1:8080")
        await page.get_by_role("button", name="Save allow list").click()
        await expect(page.locator(".problem")).to_contain_text("force")  # loopback needs force
        await page.get_by_label("Accept entries that open every address").check()
        await page.get_by_role("button", name="Save allow list").click()
        await expect(page.get_by_text("Saved 2 entries.")).to_be_visible()
        await shot(page, "allow-list")
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_every_control_has_a_label_and_the_keyboard_reaches_it(
    service: ConsoleService,
) -> None:
    unnamed: dict[str, list[str]] = {}
    reached: dict[str, str | None] = {}
    async with browser_tab(service.url, height=900) as (page, tab):
        await new_tenant(page, service, "labels")
        routes = ("tools", "edit", "import", "invoke/rolldice", "chat", "runs", "tokens", "secrets")
        for route in (*routes, "usage", "mcp-servers", "categories", "providers"):
            await page.goto(f"{service.url}/console#/{route}")
            await expect(page.locator("main h1")).to_be_focused()
            await page.wait_for_load_state("networkidle")
            shown = await page.locator("main").inner_text()
            assert "[object " not in shown and "null" not in shown.split(), (route, shown)
            unnamed[route] = await unlabelled(page)
            # From the heading, Tab reaches the page's first control (a link, field, button
            # or chart), never the end of the page.
            await page.keyboard.press("Tab")
            reached[route] = await page.evaluate(
                "(() => { const a = document.activeElement;"
                " return a && a.closest('main') && a !== document.querySelector('main h1')"
                " ? a.tagName : null; })()"
            )
        # Each collection the service has (MCP servers, categories, model providers) is listed.
        nav = page.get_by_role("navigation")
        await expect(nav.get_by_role("link", name="MCP servers")).to_be_visible()
        await expect(nav.get_by_role("link", name="Categories")).to_be_visible()
        await expect(nav.get_by_role("link", name="Model providers")).to_be_visible()
        # Tab from the heading reaches the first control of the page; Enter on a link follows it.
        await page.goto(f"{service.url}/console#/tools")
        await expect(page.locator("main h1")).to_be_focused()
        await page.keyboard.press("Tab")
        await expect(page.get_by_role("link", name="New tool")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("heading", name="New tool")).to_be_focused()
    assert {route: names for route, names in unnamed.items() if names} == {}
    assert [route for route, tag in reached.items() if tag is None] == []
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_import_from_a_file_lists_its_problems_and_stores_nothing(
    service: ConsoleService, tmp_path: Path
) -> None:
    document = tmp_path / "shop.yaml"
    document.write_text(yaml.safe_dump(SHOP))
    async with browser_tab(service.url, height=900) as (page, tab):
        await new_tenant(page, service, "importer")
        await page.get_by_role("link", name="Import", exact=True).click()
        await page.get_by_label("From a file").check()
        await page.get_by_label("Document file (JSON or YAML)").set_input_files(document)
        await page.get_by_label("Prefix for tool ids and names").fill("bad prefix!")
        await page.get_by_role("button", name="Preview (dry run)").click()
        await expect(page.get_by_role("alert")).to_contain_text("$.prefix")
        await page.get_by_label("Prefix for tool ids and names").fill("")
        await page.get_by_label("Server URL").fill("http://127.0.0.1:9/")  # not a public host
        await page.get_by_role("button", name="Preview (dry run)").click()
        # A tool the rules refuse is that operation's verdict (issue 45), with the rule's path.
        skipped = page.get_by_role("table", name="2 operations skipped")  # and a binary upload
        await expect(skipped).to_contain_text("$.function.url")
        await expect(page.get_by_role("button", name="Import 0 tools")).to_be_disabled()
        await page.get_by_role("link", name="Tools").click()
        await expect(page.get_by_role("link", name="getOrder")).to_have_count(0)
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_a_wrong_key_is_refused_with_the_services_words(service: ConsoleService) -> None:
    async with browser_tab(service.url, height=700) as (page, tab):
        await page.goto(f"{service.url}/console")
        await sign_in(page, "tg_not-a-key")
        await expect(page.get_by_role("alert")).to_contain_text("The API key is not valid")
        assert await page.evaluate("sessionStorage.length") == 0
    assert (tab.cut, unexpected(tab)) == ([], [])


async def test_show_runs_pressed_twice_sends_one_request(service: ConsoleService) -> None:
    """While "Show runs" is out, its form is busy: a second press (or Enter) sends nothing, and
    the list shows each run once (two loads in flight once showed every run twice)."""
    async with browser_tab(service.url, height=700) as (page, tab):
        await new_tenant(page, service, "twice")
        await page.goto(f"{service.url}/console#/invoke/rolldice")
        await page.get_by_label("d (required): integer").fill("6")
        await page.get_by_role("button", name="Run the tool").click()
        await expect(page.get_by_role("region", name="Result")).to_contain_text("ok")
        await page.goto(f"{service.url}/console#/runs")
        rows = page.locator("tbody tr")

        async def listed() -> bool:  # run records are written just after the answer
            if await rows.count():
                return True
            await page.get_by_role("button", name="Show runs").click()
            return False

        await within(listed, 10, every_s=0.1)
        await expect(rows).to_have_count(1)

        held = Held()
        await page.route(re.compile(r"/runs\?"), held.hold)
        show = page.get_by_role("button", name="Show runs")
        await show.click()
        await held.arrival()
        await expect(show).to_have_attribute("aria-disabled", "true")
        await expect(show).to_be_disabled()  # as assistive technology and Playwright read it
        await show.dispatch_event("click")  # pressed anyway, and Enter in the filter
        await page.get_by_label("Tool id").press("Enter")
        await held.routes[0].continue_()
        await expect(show).not_to_have_attribute("aria-disabled", "true")
        await expect(rows).to_have_count(1)
        assert len(held.routes) == 1
    assert unexpected(tab) == []
