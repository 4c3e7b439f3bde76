"""The Docker build context (.dockerignore): what the Dockerfile copies, and nothing else: no
virtualenv, caches, git history or `.env` holding keys (759 MB after a test run without it)."""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]


def _patterns() -> list[tuple[bool, str]]:
    """(excludes, pattern) in file order; the last pattern that matches a path decides."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return [(not rule.startswith("!"), rule.lstrip("!").strip("/")) for rule in rules]


def excluded(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """Docker's rule: a path is left out when the last pattern matching it, or one of its
    parent directories, excludes; `**` matches any number of directories."""
    parts = path.split("/")
    verdict = False
    for excludes, pattern in patterns:
        regex = fnmatch.translate(pattern).replace(".*.*/", "(.*/)?")
        if any(re.match(regex, "/".join(parts[: i + 1])) for i in range(len(parts))):
            verdict = excludes
    return verdict


def context_files() -> list[Path]:
    patterns = _patterns()
    found = []
    for folder, directories, files in os.walk(ROOT):
        relative = Path(folder).relative_to(ROOT)
        directories[:] = [
            d for d in directories if not excluded((relative / d).as_posix(), patterns)
        ]
        found += [relative / f for f in files if not excluded((relative / f).as_posix(), patterns)]
    return found


def test_the_context_holds_what_the_dockerfile_copies() -> None:
    patterns = _patterns()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (ROOT / "Dockerfile").read_text(), re.M)
    sources = [source for line in copied for source in line.split()]
    assert sources and {s for s in sources if excluded(s, patterns)} == set()
    assert not excluded("app/console/assets/main.js", patterns)  # the console's static files


def test_secrets_environments_and_caches_stay_out() -> None:
    patterns = _patterns()
    for path in (
        ".env",
        ".env.local",
        ".venv/bin/python",
        ".git/HEAD",
        "tests/test_deploy.py",
        "app/__pycache__/main.cpython-311.pyc",
        ".mypy_cache/3.11/x.json",
        "bench-results/run.json",
        "data/db/file",
    ):
        assert excluded(path, patterns), path
    size = sum((ROOT / path).stat().st_size for path in context_files())
    assert size < 5_000_000, f"the build context is {size} bytes"


def test_the_installed_package_carries_the_consoles_static_files() -> None:
    """The image installs the package (`pip install .`): files that are not Python go in only
    when pyproject's package-data names them, or /console would be missing from the image."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["app"]
    files = [p.relative_to(ROOT / "app").as_posix() for p in (ROOT / "app" / "console").rglob("*")]
    files = [f for f in files if (ROOT / "app" / f).is_file()]
    assert "console/index.html" in files and "console/assets/main.js" in files
    # As setuptools globs: `*` stays within one directory.
    missing = [
        f
        for f in files
        if not any(
            len(PurePosixPath(p).parts) == len(PurePosixPath(f).parts) and PurePosixPath(f).match(p)
            for p in patterns
        )
    ]
    assert missing == []


def test_the_image_carries_the_license() -> None:
    """Issue 43: the image had no LICENSE (Apache-2.0 asks that copies carry it)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^COPY LICENSE /usr/share/licenses/toolgate/LICENSE$", final_stage, re.M)
    assert not excluded("LICENSE", _patterns())  # in the build context
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
