"""Pointers to the manual from the code, the settings example and the start-up log lead somewhere
that exists: the manual lives in docs/, one page per topic (the README is a first screen and a
tour, and its sections move)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import functions
from tests.support.apps import make_settings, running_app

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / ".env.example", *sorted((ROOT / "app").rglob("*.py"))]


def test_no_pointer_to_a_readme_section_and_every_page_named_exists() -> None:
    readme = [f"{p.relative_to(ROOT)}" for p in SOURCES if "README" in p.read_text()]
    pages = {m for p in SOURCES for m in re.findall(r"docs/[\w-]+\.md", p.read_text())}
    assert readme == []
    assert pages and {page for page in pages if not (ROOT / page).exists()} == set()


def test_every_section_named_beside_a_page_is_a_heading_of_it() -> None:
    """`docs/<page>.md, "<title>"` in the code names (part of) a heading of that page (a title
    may run over lines of a comment or docstring)."""
    named = {
        (page, " ".join(word for word in title.split() if word != "#"))
        for p in SOURCES
        for page, title in re.findall(r'(docs/[\w-]+\.md),? \(?"([^"]+)"', p.read_text())
    }
    headings = {
        page: [
            line.lstrip("#").strip().lower()
            for line in (ROOT / page).read_text().splitlines()
            if line.startswith("#")
        ]
        for page, _ in named
        if (ROOT / page).exists()
    }
    missing = {
        (page, title)
        for page, title in named
        if not any(title.lower() in heading for heading in headings.get(page, []))
    }
    assert named and missing == set()


def test_the_model_client_choice_is_described_as_it_is() -> None:
    example = (ROOT / ".env.example").read_text()
    comment = example.split("\nMODEL_CLIENT=", 1)[0].rsplit("\n", 1)[-1]
    assert "aiohttp" not in comment and "openai-sdk" in comment


async def test_the_start_up_warnings_name_the_settings_page(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING")
    settings = make_settings(admin_api_key=None, api_key_secret=None)
    async with running_app(settings, functions.registry):
        pass
    warned = [r.getMessage() for r in caplog.records if "development value" in r.getMessage()]
    assert warned and all("docs/settings.md" in line for line in warned), warned
