"""Tool parameters as JSON Schema: the subset tools take, its checks, and its compiled validator.

Stored parameters are JSON Schema (draft 2020-12) in the subset every major provider accepts
(docs/tools.md): objects, arrays, `anyOf`/`oneOf`/`allOf`, `enum`/`const` of scalars, `format`,
`pattern`, numeric and length bounds, `default`, type lists with `"null"`, and local
`$defs`/`$ref`. The seed's vocabulary (`min_items`, `in`, `items` that default to strings) is
still read at the top level. `schema_problems` is the one check of a schema's keywords (each
node once, under `MAX_SCHEMA_NODES` and `MAX_SCHEMA_DEPTH`); `compiled` builds the validator
once per tool version (jsonschema-rs; why: docs/performance.md, "Why the code is shaped as it is").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jsonschema_rs

Problem = tuple[str, str]

MAX_SCHEMA_NODES = 2_000  # subschemas in one tool's parameters
MAX_SCHEMA_DEPTH = 24  # subschemas nested in one another
PROPERTY_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")  # Anthropic's rule for property names
TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
_RENAMED = {"min_items": "minItems", "max_items": "maxItems"}
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_CHOICES = ("anyOf", "oneOf", "allOf")
_TEXTS = {"description": 4096, "title": 256, "format": 64, "pattern": 1024, "$ref": 256}
_FREE = ("default", "examples", "uniqueItems")
KEYWORDS = frozenset(
    (
        "type",
        "enum",
        "const",
        "items",
        "properties",
        "required",
        "additionalProperties",
        *_NUMBERS,
        *_COUNTS,
        *_CHOICES,
        *tuple(_TEXTS),
        *_FREE,
    )
)
# Top-level parameters only: where an external tool sends it, and the seed's names.
_LEGACY = frozenset(("in", "style", "explode", "min_items", "max_items"))
# Keywords that mean something for one family of types only: a typed schema that states one of
# another family's is a mistake worth a 422 (the seed refused `items` on a string).
_FAMILY = {
    "array": ("items", "minItems", "maxItems", "uniqueItems", "min_items", "max_items"),
    "object": ("properties", "required", "additionalProperties", "minProperties", "maxProperties"),
    "string": ("pattern", "minLength", "maxLength"),
    "number": _NUMBERS,
}
_PAIRS = (
    ("minimum", "maximum"),
    ("minLength", "maxLength"),
    ("minItems", "maxItems"),
    ("min_items", "max_items"),
    ("minProperties", "maxProperties"),
)


def parameter_json_schema(parameter: dict[str, Any]) -> dict[str, Any]:
    """One stored top-level parameter as JSON Schema: the seed's names renamed, `in`, `style`
    and `explode` dropped (how an external tool sends it is not for the model), items without
    a type strings."""
    schema: dict[str, Any] = {}
    for key, value in parameter.items():
        if value is None or key in ("in", "style", "explode"):
            continue
        schema[_RENAMED.get(key, key)] = value
    items = schema.get("items")
    if isinstance(items, dict) and not (set(items) & {"type", "$ref", "const", *_CHOICES}):
        schema["items"] = {"type": "string", **items}  # the seed's default item type
    return schema


def parameters_json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """The LLM-visible parameters: context parameters are never among them."""
    properties = parameters.get("properties", {})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: parameter_json_schema(p) for name, p in properties.items()},
        "required": list(parameters.get("required", [])),
        "additionalProperties": False,
    }
    if parameters.get("$defs"):
        schema["$defs"] = parameters["$defs"]
    return schema


def _refuse_remote(uri: str) -> Any:
    raise ValueError(f"'{uri[:100]}' is not a schema of this tool: only #/$defs/ references")


def compiled(schema: dict[str, Any]) -> Any:
    """The validator of `schema`, built once (formats checked; nothing fetched)."""
    return jsonschema_rs.validator_for(schema, validate_formats=True, retriever=_refuse_remote)


def compile_problem(schema: dict[str, Any]) -> str | None:
    """Why the validator cannot be built (a pattern it cannot read, ...), or None."""
    try:
        compiled(schema)
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        return str(exc).splitlines()[0][:300]
    return None


def schema_problems(parameters: dict[str, Any], path: str) -> list[Problem]:
    """Every way the stored parameters (`properties` and `$defs`) leave the subset, by path.
    Iterative, each node once, stopping at the stated budgets."""
    defs = parameters.get("$defs") or {}
    pending: list[tuple[Any, str, int, bool, str | None]] = [
        (schema, f"{path}.properties.{name}", 1, True, None)
        for name, schema in (parameters.get("properties") or {}).items()
    ]
    pending += [(schema, f"{path}.$defs.{name}", 1, False, name) for name, schema in defs.items()]
    problems: list[Problem] = []
    edges: dict[str, set[str]] = {name: set() for name in defs}
    seen = 0
    while pending:
        node, where, depth, top, owner = pending.pop()
        seen += 1
        if seen > MAX_SCHEMA_NODES:
            return [*problems, (path, f"the schema has more than {MAX_SCHEMA_NODES} subschemas")]
        if depth > MAX_SCHEMA_DEPTH:
            problems.append((where, f"schemas nest deeper than {MAX_SCHEMA_DEPTH} levels"))
            continue
        if not isinstance(node, dict):
            problems.append((where, "a schema is a JSON object"))
            continue
        problems += _node_problems(node, where, top, defs)
        ref = node.get("$ref")
        if owner is not None and isinstance(ref, str) and ref[len("#/$defs/") :] in defs:
            edges[owner].add(ref[len("#/$defs/") :])
        for child, child_path in _children(node, where):
            pending.append((child, child_path, depth + 1, False, owner))
    return problems + _cycle_problems(edges, f"{path}.$defs")


def _children(node: dict[str, Any], where: str) -> Iterator[tuple[Any, str]]:
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            yield child, f"{where}.properties.{name}"
    if isinstance(node.get("items"), dict):
        yield node["items"], f"{where}.items"
    if isinstance(node.get("additionalProperties"), dict):
        yield node["additionalProperties"], f"{where}.additionalProperties"
    for keyword in _CHOICES:
        choices = node.get(keyword)
        if isinstance(choices, list):
            for index, child in enumerate(choices):
                yield child, f"{where}.{keyword}[{index}]"


def _node_problems(
    node: dict[str, Any], where: str, top: bool, defs: dict[str, Any]
) -> list[Problem]:
    problems: list[Problem] = []
    for key in node:
        if key in KEYWORDS or (top and key in _LEGACY):
            continue
        if key in _LEGACY:
            reason = f"'{key}' applies to top-level parameters only"
        elif key in ("$defs", "definitions"):
            reason = "$defs belong at the top of the parameters, beside properties"
        else:
            reason = f"'{key[:64]}' is not a keyword tool parameters take (see docs/tools.md)"
        problems.append((f"{where}.{key}", reason))
    types = _types(node.get("type"))
    if types is None:
        problems.append((f"{where}.type", f"type is one of {', '.join(TYPES)}, or a list of them"))
    problems += _value_problems(node, where, types or ())
    problems += _shape_problems(node, where, defs)
    return problems


def _types(value: Any) -> tuple[str, ...] | None:
    """The node's types (empty: untyped), or None when `type` is not valid."""
    if value is None:
        return ()
    listed = value if isinstance(value, list) else [value]
    if not listed or len(set(map(str, listed))) != len(listed):
        return None
    if not all(isinstance(t, str) and t in TYPES for t in listed):
        return None
    return tuple(listed)


def _value_problems(node: dict[str, Any], where: str, types: tuple[str, ...]) -> list[Problem]:
    problems: list[Problem] = []
    if types:
        allowed = set(types) | ({"number"} if "integer" in types else set())
        for family, keywords in _FAMILY.items():
            if family in allowed or (family == "number" and "integer" in allowed):
                continue
            for keyword in keywords:
                if keyword in node:
                    only = f"{family} parameters" if family != "number" else "numbers"
                    problems.append((f"{where}.{keyword}", f"{keyword} is only allowed on {only}"))
    for keyword in ("enum", "const"):
        values = node.get(keyword)
        if values is None:
            continue
        listed = values if keyword == "enum" else [values]
        if keyword == "enum" and (not isinstance(values, list) or not 0 < len(values) <= 256):
            problems.append((f"{where}.enum", "enum is a list of 1 to 256 values"))
        elif not all(_is_scalar(v) and value_fits(v, types) for v in listed):
            kinds = " or ".join(types) if types else "JSON scalar"
            problems.append((f"{where}.{keyword}", f"{keyword} values must be of type {kinds}"))
    for keyword in _NUMBERS:
        value = node.get(keyword)
        if value is not None and (not _is_number(value) or abs(value) > 2**63):
            problems.append((f"{where}.{keyword}", f"{keyword} is a number"))
    if _is_number(node.get("multipleOf")) and node["multipleOf"] <= 0:
        problems.append((f"{where}.multipleOf", "multipleOf is greater than 0"))
    for keyword in (*_COUNTS, "min_items", "max_items"):
        value = node.get(keyword)
        if value is not None and not (_is_integer(value) and 0 <= value <= 100_000):
            problems.append((f"{where}.{keyword}", f"{keyword} is an integer from 0 to 100000"))
    for low, high in _PAIRS:
        if _is_number(node.get(low)) and _is_number(node.get(high)) and node[low] > node[high]:
            problems.append((f"{where}.{low}", f"{low} is greater than {high}"))
    return problems


def _shape_problems(node: dict[str, Any], where: str, defs: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for keyword, limit in _TEXTS.items():
        value = node.get(keyword)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            problems.append((f"{where}.{keyword}", f"{keyword} is text of at most {limit} chars"))
    if isinstance(node.get("pattern"), str):
        try:
            re.compile(node["pattern"])
        except re.error as exc:
            problems.append((f"{where}.pattern", f"not a regular expression: {exc}"))
    ref = node.get("$ref")
    if isinstance(ref, str) and ref[len("#/$defs/") :] not in defs:
        problems.append((f"{where}.$ref", "a $ref is '#/$defs/NAME', NAME one of the $defs"))
    properties = node.get("properties")
    if properties is not None and not isinstance(properties, dict):
        problems.append((f"{where}.properties", "properties is an object of schemas"))
    for name in properties if isinstance(properties, dict) else ():
        if not PROPERTY_NAME.fullmatch(name):
            problems.append((f"{where}.properties", f"'{name[:64]}' is not [a-zA-Z0-9_.-]{{1,64}}"))
    required = node.get("required")
    if required is not None:
        names = required if isinstance(required, list) else None
        if names is None or not all(isinstance(n, str) for n in names):
            problems.append((f"{where}.required", "required is a list of member names"))
        elif len(set(names)) != len(names):
            problems.append((f"{where}.required", "a name is listed twice"))
        elif isinstance(properties, dict) and set(names) - set(properties):
            missing = sorted(set(names) - set(properties))[0]
            problems.append((f"{where}.required", f"'{missing[:64]}' is not in properties"))
    for keyword in ("items", "additionalProperties"):
        value = node.get(keyword)
        if value is not None and not isinstance(value, dict | bool):
            problems.append((f"{where}.{keyword}", f"{keyword} is a schema"))
    for keyword in _CHOICES:
        value = node.get(keyword)
        if value is not None and not (isinstance(value, list) and 0 < len(value) <= 64):
            problems.append((f"{where}.{keyword}", f"{keyword} is a list of 1 to 64 schemas"))
    return problems


def _cycle_problems(edges: dict[str, set[str]], path: str) -> list[Problem]:
    """$defs that reach themselves through $refs: refused (providers that inline references
    cannot take them, and a cycle is never needed for tool arguments)."""
    problems: list[Problem] = []
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    for start in sorted(edges):
        if state.get(start):
            continue
        walk: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        state[start] = 1
        while walk:
            name, targets = walk[-1]
            target = next(targets, None)
            if target is None:
                state[name] = 2
                walk.pop()
            elif state.get(target) == 1:
                problems.append((f"{path}.{target}", f"'{target}' refers to itself (a $ref cycle)"))
            elif not state.get(target):
                state[target] = 1
                walk.append((target, iter(sorted(edges[target]))))
    return problems


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def value_fits(value: Any, types: tuple[str, ...]) -> bool:
    """Whether a scalar is of one of `types` (none: any); the one rule for enum, const and
    default values, written tools and imported ones alike."""
    if not types:
        return True
    if value is None:
        return "null" in types
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return bool({"integer", "number"} & set(types))
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value.is_integer())
    return "string" in types
