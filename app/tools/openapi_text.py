"""An OpenAPI document's text -> JSON data (objects, arrays, strings, numbers, booleans, null).

JSON first (orjson), else YAML (1.2's core schema) through libyaml's C loader where PyYAML
has it (docs/performance.md, "Why the code is shaped as it is"). The work is bounded by the
text's size before PyYAML sees it: flow collections (`[`, `{`) nested deeper than
`MAX_FLOW_NESTING` are refused by a linear pre-scan (PyYAML's pure-Python scanner is quadratic
in that depth: 100 KB of `[` took 17 s), aliases are refused at their first reuse (an alias bomb
expands without bound downstream), and YAML-only values become JSON ones: keys such as `200` or
`true` become their text; binary data and sets are refused with the path where they stand.
Pure: no I/O, run off the event loop by the importer.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, ClassVar

import orjson
import yaml

MAX_FLOW_NESTING = 64
LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TextError(Exception):
    """The text is not a document the importer reads; the message says why."""


class _AliasUsed(Exception):
    pass


_BaseLoader: Any = yaml.CSafeLoader if LIBYAML else yaml.SafeLoader


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader with YAML 1.2's core schema (OpenAPI documents are YAML 1.2: `on`, `no`,
    `012` and `1:20` are a string, a string, 12 and a string, not True, False, 10 and 80; no
    timestamps), refusing a node that is constructed twice (the reuse of an anchor)."""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if node in self.constructed_objects:
            raise _AliasUsed
        return super().construct_object(node, deep)

    def construct_core_int(self, node: Any) -> int:
        value = str(self.construct_scalar(node))
        if value.startswith(("0o", "0x")):
            return int(value[2:], 8 if value[1] == "o" else 16)
        return int(value)


_CORE_SCHEMA = (  # YAML 1.2.2, 10.3: tag, pattern, the characters a match may start with
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        "float",
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+.0123456789",
    ),
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
)
for _tag, _pattern, _first in _CORE_SCHEMA:
    _Loader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_tag}", re.compile(f"^(?:{_pattern})$"), list(_first)
    )
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_core_int)


def parse_document(text: str) -> Any:
    """The document as JSON data; `TextError` says why it cannot be read."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    if flow_nesting(text, stop=MAX_FLOW_NESTING) > MAX_FLOW_NESTING:
        raise TextError(f"its brackets nest deeper than {MAX_FLOW_NESTING} levels")
    try:
        data = yaml.load(text, Loader=_Loader)  # a safe loader
    except _AliasUsed:
        raise TextError("YAML anchors and aliases are not accepted") from None
    except yaml.YAMLError as exc:
        raise TextError(f"neither JSON nor YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise TextError("it is nested too deeply") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise TextError(f"a value cannot be read: {str(exc)[:100]}") from None
    return json_data(data)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's context and problem, and where they are (line and column)."""
    if not isinstance(error, yaml.MarkedYAMLError):
        return str(error).splitlines()[0]
    said = ": ".join(part for part in (error.context, error.problem) if part)
    mark = error.problem_mark or error.context_mark
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return f"{said}{where}"


def flow_nesting(text: str, *, stop: int) -> int:
    """An upper bound of the nesting of `[` and `{` (quoted ones count too), in linear time;
    the count stops past `stop`."""
    depth = deepest = 0
    for char in _NOT_BRACKETS.sub("", text):
        if char in "[{":
            depth += 1
            if depth > stop:
                return depth
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def json_data(data: Any) -> Any:
    """YAML data as JSON data, without recursion; `TextError` names the path of a value that
    has no JSON form."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, str]] = [(data, root, 0, "$")]
    while stack:
        value, parent, slot, path = stack.pop()
        if isinstance(value, dict):
            copy: dict[str, Any] = {}
            for key, item in value.items():
                name = _scalar_text(key, path)
                if name in copy:
                    raise TextError(f"{path}: the key '{name[:100]}' appears twice")
                copy[name] = None
                stack.append((item, copy, name, _child(path, name)))
            parent[slot] = copy
        elif isinstance(value, list):
            items: list[Any] = [None] * len(value)
            stack.extend((item, items, i, f"{path}[{i}]") for i, item in enumerate(value))
            parent[slot] = items
        elif value is None or isinstance(value, str | int | float):
            parent[slot] = value
        elif isinstance(value, datetime.date):
            parent[slot] = value.isoformat()
        else:
            raise TextError(f"{path}: {_yaml_kind(value)} has no JSON form")
    return root[0]


def _scalar_text(key: Any, path: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int | float):
        return str(key)
    if isinstance(key, datetime.date):
        return key.isoformat()
    raise TextError(f"{path}: a key that is {_yaml_kind(key)}")


def _yaml_kind(value: Any) -> str:
    if isinstance(value, bytes):
        return "binary data (!!binary)"
    if isinstance(value, set):
        return "a set (!!set)"
    return f"a YAML {type(value).__name__}"


def _child(path: str, name: str) -> str:
    if _IDENTIFIER.match(name):
        return f"{path}.{name}"
    return f"{path}[{orjson.dumps(name[:100]).decode()}]"
