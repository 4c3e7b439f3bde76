"""Deployment files cannot run here (no Docker engine): keep them correct by checking them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_compose_runs_the_service_after_a_healthy_mongo() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mongo, service = compose["services"]["mongo"], compose["services"]["toolgate"]
    assert mongo["image"] == "mongo:8"
    assert "healthcheck" in mongo
    assert mongo["volumes"][0].split(":")[0] in compose["volumes"]
    assert service["depends_on"]["mongo"]["condition"] == "service_healthy"
    assert service["environment"]["MONGODB_URL"].startswith("mongodb://mongo:")
    assert service["environment"]["APP_ENV"] == "production"


def test_env_example_documents_every_setting() -> None:
    text = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", text, flags=re.M))
    assert documented == {name.upper() for name in Settings.model_fields}
    for name in documented:  # each setting has a comment right above it
        before = text.split(f"\n{name}=")[0].rstrip().splitlines()[-1]
        assert before.startswith("#"), name


def test_readme_settings_table_lists_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Settings", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([A-Z_]+)` \|", table, flags=re.M))
    assert listed == {name.upper() for name in Settings.model_fields}


def test_dockerfile_runs_as_non_root_through_the_checking_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "python:3.11-slim" in text
    assert re.search(r"^USER (?!root)\w+", text, flags=re.M)
    assert '"-m", "app", "serve"' in text


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:30])
    assert "scripts/run" in first_screen and "scripts/test" in first_screen
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()
