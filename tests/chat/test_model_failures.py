"""The model endpoint misbehaves: each failure is a clear problem response, never a 500."""

from __future__ import annotations

import pytest

from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel


async def test_rate_limit_then_success_is_retried(
    chat: ChatClient, fake: FakeModel, model_retry_waits: list[float]
) -> None:
    fake.reset(script.status(429, {"Retry-After": "1.5"}), script.text("finally"))
    response = await chat.chat()
    assert response.status_code == 200 and response.json()["message"]["content"] == "finally"
    assert len(fake.requests) == 2
    assert model_retry_waits == [1.5]  # Retry-After was honoured


async def test_persistent_rate_limit_is_503_with_retry_after(
    chat: ChatClient, fake: FakeModel, model_retry_waits: list[float]
) -> None:
    fake.reset(repeat=script.status(429, {"Retry-After": "1"}))
    response = await chat.chat()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert len(fake.requests) == 3  # one call and two retries
    assert model_retry_waits == [1.0, 1.0]
    assert response.headers["content-type"] == "application/problem+json"


async def test_always_500_is_502_after_retries(
    chat: ChatClient, fake: FakeModel, model_retry_waits: list[float]
) -> None:
    fake.reset(repeat=script.status(500))
    response = await chat.chat()
    assert response.status_code == 502
    assert "HTTP 500" in response.json()["detail"]
    assert len(fake.requests) == 3
    first, second = model_retry_waits  # exponential backoff, jittered by up to 25%
    assert 0.375 <= first <= 0.5 and 0.75 <= second <= 1.0  # the SDK's: the same


@pytest.mark.settings(model_timeout_s=0.5, model_max_retries=0)
async def test_hanging_model_is_504(chat: ChatClient, fake: FakeModel) -> None:
    """The model's timeout ends the call: a 504, where the late answer (an empty object, not a
    completion) would have been a 502."""
    fake.reset(script.hang(3))
    response = await chat.chat()
    assert response.status_code == 504, response.text
    assert len(fake.requests) == 1  # MODEL_MAX_RETRIES=0: not asked again


@pytest.mark.settings(chat_deadline_s=0.5, tool_timeout_s=5)
async def test_chat_deadline_is_504(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.tool_calls(("sleep_async", {"seconds": 2})), script.text("late"))
    response = await chat.chat()
    assert response.status_code == 504
    assert "deadline of 0.5 s" in response.json()["detail"]


@pytest.mark.parametrize("code", [401, 403])
async def test_upstream_auth_failure_is_502_saying_so(
    chat: ChatClient, fake: FakeModel, code: int
) -> None:
    fake.reset(script.status(code))
    response = await chat.chat()
    assert response.status_code == 502
    assert "credentials" in response.json()["detail"]
    assert "sk-test-key" not in response.text


@pytest.mark.parametrize(
    "step",
    [
        script.raw(b"this is not json"),
        script.raw(b'{"id": "x", "choices": []}'),
        script.raw(b'{"unexpected": true}'),
        script.raw(b"<html>gateway error</html>", "text/html"),
    ],
    ids=["not-json", "no-choices", "wrong-shape", "html"],
)
async def test_malformed_model_answers_are_502(
    chat: ChatClient, fake: FakeModel, step: script.Step
) -> None:
    fake.reset(step)
    response = await chat.chat()
    assert response.status_code == 502, response.text
    assert response.json()["title"] == "Bad Gateway"


@pytest.mark.settings(model_max_retries=0)
async def test_unreachable_model_is_502(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.status(404))
    response = await chat.chat(model="no-such-model")
    assert response.status_code == 502 and "HTTP 404" in response.json()["detail"]


@pytest.mark.settings(openai_base_url=None, openai_api_key=None)
async def test_model_not_configured_is_503(chat: ChatClient) -> None:
    response = await chat.chat()
    assert response.status_code == 503
    assert "OPENAI_BASE_URL" in response.json()["detail"]


# Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
@pytest.mark.settings(openai_base_url="http://127.0.0.1:9/v1?key=never-shown", model_max_retries=0)
async def test_an_unreachable_model_endpoint_is_named_in_the_answer_and_the_log(
    chat: ChatClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING")
    response = await chat.chat()
    assert response.status_code == 502
    assert response.json()["detail"] == "Cannot reach the model endpoint at 127.0.0.1:9."
    logged = [r.getMessage() for r in caplog.records if "model endpoint" in r.getMessage()]
    assert len(logged) == 1 and "127.0.0.1:9" in logged[0], logged
    assert "never-shown" not in caplog.text + response.text  # the host only, never the URL
