"""What the console's browser tests run against: the service with the demo fake model, a
function whose description and output carry script and markup payloads, and one that reports
progress."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.fake_model import FakeModelApp
from app.main import create_app
from app.tools.builtin import roll_dice
from app.tools.progress import Progress
from app.tools.registry import FunctionRegistry
from tests.support.apps import make_settings
from tests.support.screenshots import DOCS_SCREENSHOTS
from tests.support.servers import ThreadedServer

# Each run screenshots every page; the pictures in docs/console/ are replaced only when asked
# (TOOLGATE_UPDATE_SCREENSHOTS=1), so a test run leaves the checkout as it found it.
SCREENSHOTS = (
    DOCS_SCREENSHOTS
    if os.environ.get("TOOLGATE_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "toolgate-console-screenshots"
)
# Each payload sets window.pwned if it ever runs as script or markup.
HOSTILE = (
    '<script>window.pwned = "script"</script>'
    '<img src="x" onerror="window.pwned = \'img\'">'
    "<a href=\"javascript:window.pwned='link'\">click</a>"
)

registry = FunctionRegistry()
registry.register(roll_dice, tool_id="rolldice", tags=["games"])


@registry.register(tool_id="hostile", tags=["games"])
def hostile_echo(text: str) -> str:
    """<img src="x" onerror="window.pwned = 'description'"><b>Echo</b> the text back."""
    return f"{HOSTILE} {text}"


@registry.register(tool_id="count-slowly", tags=["demo"])
async def count_slowly(count: int) -> AsyncIterator[Progress | str]:
    """Count to `count`, reporting each step.

    Args:
        count: How far to count.
    """
    for step in range(1, count + 1):
        yield Progress(f"counted {step} of {count}", step / count)
    yield f"counted to {count}"


OTHER_CALLS = {"count_slowly": '{"count": 3}'}


class ConsoleModel(FakeModelApp):
    """The demo fake model (it calls roll_dice), except that a user message naming another
    offered function in `OTHER_CALLS` gets a call of that one, with its arguments."""

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages") or [{}]
        offered = {t["function"]["name"] for t in request.get("tools") or []}
        said = str(messages[-1].get("content")) if messages[-1].get("role") == "user" else ""
        for name, arguments in OTHER_CALLS.items():
            if name in offered and name in said:
                other = FakeModelApp(tool=name, arguments=arguments, calls=1, latency_s=0)
                return other.answer(request)
        return super().answer(request)


@dataclass(frozen=True)
class ConsoleService:
    url: str
    model_url: str


@contextmanager
def console_service() -> Iterator[ConsoleService]:
    """The service on a real socket, its model the demo fake (`scripts/run --fake-model`)."""
    model = ThreadedServer(
        ConsoleModel(tool="roll_dice", arguments='{"d": 6}', calls=1, latency_s=0)
    ).start()
    settings = make_settings(openai_base_url=f"{model.url}/v1", openai_api_key="fake")
    service = ThreadedServer(create_app(settings, registry=registry), lifespan="on").start()
    try:
        yield ConsoleService(service.url, model.url)
    finally:
        service.stop()
        model.stop()
