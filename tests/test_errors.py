"""The error tree drawn in app/errors.py's docstring names every AppError the app defines."""

from __future__ import annotations

import importlib
import pkgutil
import re

import app
from app import errors
from app.errors import AppError

NOT_IMPORTED = {"app.asgi", "app.__main__"}  # entry points: they build an app when imported


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_the_docstring_tree_names_every_app_error_and_where_it_lives() -> None:
    for module in pkgutil.walk_packages(app.__path__, "app."):
        if module.name not in NOT_IMPORTED:
            importlib.import_module(module.name)
    doc = errors.__doc__ or ""
    lines = {m[1]: m[0] for m in re.finditer(r"^ *\* (\w+).*$", doc, re.MULTILINE)}
    defined = {c for c in _subclasses(AppError) | {AppError} if c.__module__.startswith("app.")}
    for cls in defined:
        assert cls.__name__ in lines, f"{cls.__name__} is missing from app/errors.py's tree"
        if "status_code" in vars(cls):
            assert f"({cls.status_code}" in lines[cls.__name__], cls.__name__
        package = cls.__module__.rsplit(".", 1)[0].replace(".", "/")
        assert cls.__module__ == "app.errors" or package in doc, f"where {cls.__name__} lives"
    assert set(lines) == {cls.__name__ for cls in defined}  # no name of a class that is gone
