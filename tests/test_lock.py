"""The lock files (scripts/lock) pin what pyproject.toml asks for: every dependency, runtime and
dev, is pinned once, to a version its range allows, with hashes; the runtime lock holds no test
tool. A dependency added to pyproject.toml fails here until `scripts/lock` is run."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", re.M)


def _pins(name: str) -> dict[str, str]:
    text = (ROOT / name).read_text()
    pins = {canonicalize_name(package): version for package, version in _PIN.findall(text)}
    assert text.count("--hash=sha256:") >= len(pins), f"{name}: a pin without its hashes"
    return pins


def _requirements(*groups: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(line) for line in project["dependencies"]]
    for group in groups:
        found += [Requirement(line) for line in project["optional-dependencies"][group]]
    return found


def _unmet(requirements: list[Requirement], pins: dict[str, str]) -> list[str]:
    unmet = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = pins.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement} (locked: {version})")
    return unmet


def test_the_runtime_lock_pins_every_dependency_within_its_range() -> None:
    pins = _pins("requirements.lock")
    assert _unmet(_requirements(), pins) == [], "run scripts/lock"
    assert "pytest" not in pins and "secantusdb" not in pins  # test tools stay out of the image


def test_the_dev_lock_pins_every_dependency_and_agrees_with_the_runtime_lock() -> None:
    runtime, dev = _pins("requirements.lock"), _pins("requirements-dev.lock")
    assert _unmet(_requirements("dev"), dev) == [], "run scripts/lock"
    assert {name: dev.get(name) for name in runtime} == runtime


def test_setup_docker_and_ci_install_from_the_locks() -> None:
    setup = (ROOT / "scripts" / "setup").read_text()
    assert 'lock="requirements${extras:+-$extras}.lock"' in setup
    assert '--require-hashes --no-deps -r "$lock"' in setup
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()  # which runs scripts/setup --dev
    assert "scripts/setup --dev" in (ROOT / "scripts" / "test").read_text()
