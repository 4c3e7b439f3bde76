"""JSON logs (request id, tenant, route, status, duration; redaction in one place, checked with
canaries) and Prometheus metrics, on real chats against the fake model and a real HTTP API."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from app.kit.crypto import new_key
from app.observe.logs import JsonFormatter, hiding, redact
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.logs import JsonLines
from tests.support.servers import ThreadedServer

CONTEXT_CANARY = "ctx-canary-0b7d5e12"
SECRET_CANARY = "sec-canary-93f1aa07"


async def test_access_lines_carry_request_id_tenant_route_status_and_duration(
    chat: ChatClient, json_logs: JsonLines
) -> None:
    response = await chat.http.get(
        "/tools/rolldice", headers={**chat.tenant.headers, "X-Request-ID": "req-42"}
    )
    assert response.headers["x-request-id"] == "req-42"
    missing = await chat.http.get("/tools/nope", headers=chat.tenant.headers)
    access = [e for e in json_logs.entries() if e["logger"] == "app.access"]
    first, second = access[-2:]
    assert first["request_id"] == "req-42" and first["tenant"] == "acme"
    assert first["route"] == "/tools/{tool_id}" and first["method"] == "GET"
    assert first["status"] == 200 and first["duration_ms"] > 0
    assert first["message"] == "GET /tools/{tool_id} 200" and first["level"] == "INFO"
    assert second["status"] == 404 and second["request_id"] == missing.headers["x-request-id"]
    unauthenticated = await chat.http.get("/tools/rolldice")
    last = [e for e in json_logs.entries() if e["logger"] == "app.access"][-1]
    assert last["status"] == 401 and "tenant" not in last
    assert last["request_id"] == unauthenticated.headers["x-request-id"]


async def test_no_key_context_value_or_secret_reaches_any_log_line(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer, json_logs: JsonLines
) -> None:
    put = await chat.http.put(
        "/secrets/k", json={"value": SECRET_CANARY}, headers=chat.tenant.headers
    )
    assert put.status_code == 201
    tool = external(
        "echo",
        f"{upstream.url}/echo",
        "GET",
        context_parameters=[{"name": "user_id"}],
    )
    tool["function"]["headers"] = {"Authorization": "Bearer {secret:k}"}
    await chat.add_tool(tool)
    fake.reset(
        script.tool_calls(("echo", {"city": "Paris"}), ("explode", {"reason": CONTEXT_CANARY})),
        script.text("done"),
    )
    response = await chat.chat(context_arguments={"user_id": CONTEXT_CANARY})
    assert response.status_code == 200, response.text
    await chat.http.get("/tenants", headers=ADMIN)
    text = "\n".join(json_logs.lines)
    assert json_logs.lines, "nothing was logged: the test would prove nothing"
    # External calls go through the aiohttp client, which logs no request line (httpx logged
    # each at INFO, the query string redacted): what is logged is the access log and failures.
    assert not any("/echo" in line for line in json_logs.lines)
    for canary in (
        CONTEXT_CANARY,
        SECRET_CANARY,
        chat.tenant.api_key,
        ADMIN["Authorization"].split()[1],
        "sk-test-key",  # the model endpoint's key
    ):
        assert canary not in text, canary


async def test_a_thread_run_function_logs_in_its_request_context(
    chat: ChatClient, fake: FakeModel, json_logs: JsonLines
) -> None:
    """Plain functions run in worker threads; their log lines still carry the request id and
    tenant, and the chat's context values are redacted from them."""
    fake.reset(script.tool_calls(("log_token", {})), script.text("done"))
    response = await chat.chat(context_arguments={"api_token": CONTEXT_CANARY})
    assert response.status_code == 200, response.text
    [line] = [e for e in json_logs.entries() if e["logger"] == "tests.tools"]
    assert line["message"] == "debug: called with token [redacted]"
    assert line["request_id"] == response.headers["x-request-id"] and line["tenant"] == "acme"


def test_redaction_rules() -> None:
    cases = {
        "Authorization: Bearer abc.def-123": "Authorization: Bearer [redacted]",
        "{'authorization': 'Basic dXNlcjpwYXNz'}": "{'authorization': 'Basic [redacted]'}",
        'sent {"api_key": "k-998877", "city": "Paris"}': (
            'sent {"api_key": "[redacted]", "city": "Paris"}'
        ),
        "password=hunter2&user=bob": "password=[redacted]&user=bob",
        "key tg_abcdefghijklmnopqrstuvwxyz012345 used": "key tg_[redacted] used",
        "model key sk-proj-abcdef123456": "model key sk-[redacted]",
        "GET https://api.example.com/w?user_id=u-1&x=2 done": (
            "GET https://api.example.com/w?[redacted] done"
        ),
        "nothing to hide here": "nothing to hide here",
    }
    for given, expected in cases.items():
        assert redact(given) == expected
    with hiding(["tenant-value-123", True, ["list-item-456"], "abc"]):
        assert redact("got tenant-value-123 and list-item-456 and abc") == (
            "got [redacted] and [redacted] and abc"  # values under 4 characters stay
        )
    assert redact("tenant-value-123") == "tenant-value-123"  # only while hidden
    value = 'v/a+l=u&e "x<é'
    with hiding([value]):  # a log line may carry an upstream's echo of it, encoded
        for encoded in (
            "v%2Fa%2Bl%3Du%26e%20%22x%3C%C3%A9",  # quote(safe="")
            "v%2fa%2bl%3du%26e+%22x%3c%c3%a9",  # quote_plus, lower-case hex
            'v/a+l=u&e \\"x<\\u00e9',  # JSON-escaped
            "v/a+l=u&amp;e &quot;x&lt;é",  # HTML-escaped
        ):
            assert redact(f"upstream said {encoded}!") == "upstream said [redacted]!", encoded


def test_extra_fields_named_like_credentials_are_dropped() -> None:
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "call", None, None)
    record.headers = {"Authorization": "Bearer x"}
    record.api_key = "k"
    record.url = "https://h/p?token=t"
    record.status = 200
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry["headers"] == entry["api_key"] == "[redacted]"
    assert entry["url"] == "https://h/p?[redacted]" and entry["status"] == 200


def sample(metrics: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        metric, _, label_text = key.partition("{")
        found = ",".join(sorted(label_text.rstrip("}").split(","))) if label_text else ""
        if metric == name and found == wanted:
            return float(value)
    return 0.0


async def test_metrics_count_requests_chats_model_and_tool_calls(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(
        script.tool_calls(("roll_dice", {"d": 6}), ("explode", {"reason": "boom"})),
        script.text("done"),
    )
    assert (await chat.chat()).status_code == 200
    await chat.http.get("/tools/rolldice", headers=chat.tenant.headers)
    await chat.http.get("/nowhere")
    response = await chat.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert (
        sample(text, "toolgate_http_requests_total", method="POST", route="/chat", status="200")
        == 1
    )
    assert (
        sample(
            text,
            "toolgate_http_requests_total",
            method="GET",
            route="/tools/{tool_id}",
            status="200",
        )
        == 1
    )
    assert (
        sample(text, "toolgate_http_requests_total", method="GET", route="unmatched", status="404")
        == 1
    )
    assert sample(text, "toolgate_chats_total", stop_reason="completed") == 1
    assert sample(text, "toolgate_chat_iterations_count") == 1
    assert sample(text, "toolgate_chat_iterations_sum") == 2
    assert sample(text, "toolgate_model_call_duration_seconds_count") == 2
    assert sample(text, "toolgate_tool_call_duration_seconds_count", type="function") == 2
    assert sample(text, "toolgate_tool_errors_total", type="function", kind="exception") == 1
    assert sample(text, "toolgate_active_chats") == 0
    assert sample(text, "toolgate_mcp_open_sessions") == 0


@pytest.mark.settings(metrics_token="metrics-token-123")
async def test_metrics_can_be_protected(chat: ChatClient) -> None:
    assert (await chat.http.get("/metrics")).status_code == 401
    wrong = await chat.http.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = await chat.http.get("/metrics", headers={"Authorization": "Bearer metrics-token-123"})
    assert right.status_code == 200 and "toolgate_http_requests_total" in right.text


@pytest.mark.parametrize(
    ("overrides", "anonymous", "with_token"),
    [
        ({}, 403, 403),  # production, no token: closed
        ({"metrics_public": True}, 200, 200),  # the operator said so
        ({"metrics_token": "metrics-token-123"}, 401, 200),
    ],
)
async def test_metrics_are_not_public_in_production_unless_said(
    overrides: dict[str, Any], anonymous: int, with_token: int
) -> None:
    settings = make_settings(
        None,
        app_env="production",
        admin_api_key="a" * 40,
        api_key_secret="b" * 40,
        secrets_key=new_key(),
        **overrides,
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        assert (await http.get("/metrics")).status_code == anonymous
        token = {"Authorization": "Bearer metrics-token-123"}
        answer = await http.get("/metrics", headers=token)
        assert answer.status_code == with_token
        if with_token == 403:
            assert "METRICS_PUBLIC" in answer.json()["detail"]
