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


def test_compose_passes_every_model_setting_and_reads_dotenv() -> None:
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["toolgate"]
    assert service["env_file"] == [{"path": ".env", "required": False}]
    environment = service["environment"]
    model_settings = {
        name: field.default
        for name, field in Settings.model_fields.items()
        if name.startswith(("openai_", "model_"))
    }
    for name, default in model_settings.items():
        value = environment[name.upper()]
        assert value.startswith(f"${{{name.upper()}:-"), name  # the shell or .env wins
        if default is not None and name != "openai_api_key":  # the same default as Settings
            assert value == f"${{{name.upper()}:-{default}}}", name


def test_compose_demo_profile_adds_the_fake_model_the_service_defaults_to() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service, model = compose["services"]["toolgate"], compose["services"]["fake-model"]
    assert model["profiles"] == ["demo"] and "profiles" not in service
    assert model["image"] == service["image"]  # the service's own image: `python -m app`
    command = model["entrypoint"]
    assert command[:4] == ["python", "-m", "app", "fake-model"]
    port = command[command.index("--port") + 1]
    assert service["environment"]["OPENAI_BASE_URL"] == (
        f"${{OPENAI_BASE_URL:-http://fake-model:{port}/v1}}"
    )
    assert service["depends_on"]["fake-model"] == {
        "condition": "service_started",
        "required": False,
    }


def test_env_example_documents_every_setting() -> None:
    text = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", text, flags=re.M))
    assert documented == {name.upper() for name in Settings.model_fields}
    for name in documented:  # each setting has a comment right above it
        before = text.split(f"\n{name}=")[0].rstrip().splitlines()[-1]
        assert before.startswith("#"), name


def test_settings_page_lists_every_setting() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    table = page.split("## Service settings", 1)[1].split("\n## ", 1)[0]
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
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("\nscripts/test")


def test_docs_links_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+\.md|LICENSE)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_license_matches_the_package_metadata() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()
