"""An OpenAPI schema (3.0 or 3.1) -> a tool parameter's JSON Schema (app/tools/schema.py).

Nested objects, arrays of anything and choices are kept. What the subset has no keyword for and
only narrows what is valid (`not`, `patternProperties`, `xml`, `example`, ...) is left out: the
tool accepts a little more than the API, never less. OpenAPI 3.0's `nullable` becomes a type
list with "null", its boolean `exclusiveMinimum` the 2020-12 number. A schema that contains
itself (a tree) is unfolded RECURSION_DEPTH levels deep, as tool schemas hold no `$ref` cycle.
An optional member that cannot be expressed (a file, recursion past that depth, a name
providers refuse) is left out with a note; a required one skips the operation. Each `$ref`
target is converted once and shared; the size of the result is counted without walking shared
parts twice (`weight`), so a document whose schemas fan out cannot make a tool grow without
bound.
"""

from __future__ import annotations

import math
import re
from typing import Any

from app.tools.openapi_fields import kind, short
from app.tools.openapi_refs import Resolver, Skip
from app.tools.schema import PROPERTY_NAME, TYPES, compile_problem, value_fits

_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_FAMILY = {
    "array": ("items", "minItems", "maxItems", "uniqueItems"),
    "object": ("properties", "required", "additionalProperties", "minProperties", "maxProperties"),
    "string": ("pattern", "minLength", "maxLength"),
    "number": _NUMBERS,
}


# How often a schema may contain itself (a tree, a linked list) before the recursion stops:
# past that an optional member is left out, a list is empty and a required member skips the
# operation (no finite value fits it).
RECURSION_DEPTH = 2


class Recursion(Skip):
    """A schema met inside itself more than RECURSION_DEPTH times; `endless` once a required
    member holds it (no finite value fits)."""

    def __init__(self, message: str, endless: bool = False) -> None:
        super().__init__(message)
        self.endless = endless


class SchemaConverter:
    """Converts the schemas of one document; `notes` collects what was left out, per call."""

    def __init__(self, resolver: Resolver, *, max_depth: int = 16) -> None:
        self._resolver = resolver
        self._max_depth = max_depth
        self._done: dict[str, dict[str, Any]] = {}  # ref -> converted, shared
        self._weights: dict[int, tuple[int, int]] = {}
        self._cut_refs: set[str] = set()  # refs whose conversion left something out
        self.notes: list[str] = []
        self.cuts = 0  # parts left out or shown loosely so far: a `oneOf` cut turns `anyOf`

    def convert(self, node: Any, where: str, depth: int = 0, active: tuple[str, ...] = ()) -> Any:
        """`node` as a tool's JSON Schema; Skip when it cannot be expressed at all."""
        if not isinstance(node, dict):
            raise Skip(f"{_place(where)} has no schema")
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in self._done:
                self.cuts += ref in self._cut_refs
                return self._done[ref]
            if active.count(ref) >= RECURSION_DEPTH:
                raise Recursion(
                    f"{_place(where)} contains its own schema ({short(ref)}) more than "
                    f"{RECURSION_DEPTH} levels deep"
                )
            target = self._resolver.follow(ref)
            cuts = self.cuts
            converted = self.convert(target, where, depth, (*active, ref))
            self._done[ref] = converted
            if self.cuts != cuts:
                self._cut_refs.add(ref)
            return converted
        if depth >= self._max_depth:
            self.cuts += 1
            return loose(node)
        out = self._keywords(node, where)
        types = schema_types(out.get("type"))
        self._nested(node, out, where, depth, active)
        for family, keywords in _FAMILY.items():  # keywords of another type family: dropped
            if types and family not in types and not (family == "number" and "integer" in types):
                for keyword in keywords:
                    out.pop(keyword, None)
        return out

    def _keywords(self, node: dict[str, Any], where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        types = _node_types(node)
        if "file" in types:
            raise Skip(f"{_place(where)} is a file, which tools cannot send")
        if types:
            out["type"] = types[0] if len(types) == 1 else types
        description = node.get("description")
        if isinstance(description, str) and description:
            out["description"] = description[:4096]
        if "enum" in node:
            self._enum(node["enum"], types, out, where)
        const = node.get("const")
        if const is not None and _fits(const, types):
            out["const"] = node["const"]
        fmt, pattern = node.get("format"), node.get("pattern")
        if isinstance(fmt, str) and 0 < len(fmt) <= 64:
            out["format"] = fmt
        if isinstance(pattern, str) and len(pattern) <= 1024 and _compiles(pattern):
            out["pattern"] = pattern
        for key in _NUMBERS:
            value = node.get(key)
            if isinstance(value, int | float) and _is_number(value) and math.isfinite(value):
                if abs(value) < 2**63:
                    out[key] = value
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if node.get(key) is True and _is_number(node.get(bound)):  # OpenAPI 3.0's boolean
                out[key] = out.pop(bound)
        if _is_number(out.get("multipleOf")) and out["multipleOf"] <= 0:
            del out["multipleOf"]
        for key in _COUNTS:
            value = node.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100_000:
                out[key] = value
        if isinstance(node.get("uniqueItems"), bool):
            out["uniqueItems"] = node["uniqueItems"]
        if "default" in node and _fits(node["default"], types) and _is_scalar(node["default"]):
            out["default"] = node["default"]
        return out

    def _enum(self, values: Any, types: list[str], out: dict[str, Any], where: str) -> None:
        """The values that fit the type; a note says what was left out."""
        place = _place(where)
        if not isinstance(values, list) or not 0 < len(values) <= 256:
            shown = kind(values) if not isinstance(values, list) else f"{len(values)} values"
            self.notes.append(f"{place} has an 'enum' of {shown}: any value of its type is taken")
            return
        # A number listed for a string (Zoom's `type: string, enum: [1, 3]`) is its text: what
        # the API reads on the wire either way.
        numbers_as_text = "string" in types and not _fits(1, types)
        kept = [
            str(v) if numbers_as_text and _is_number(v) and not _fits(v, types) else v
            for v in values
        ]
        kept = [v for i, v in enumerate(kept) if _fits(v, types) and not _listed(v, kept[:i])]
        if not kept or any(isinstance(v, str) and len(v) > 256 for v in kept):
            self.notes.append(
                f"{place} has an 'enum' no value of which it can take (of its type, 256 "
                "characters at most): any value of its type is taken"
            )
            return
        if len(kept) < len(values):
            left = len(values) - len(kept)
            self.notes.append(f"{place} has {left} 'enum' value(s) not of its type: left out")
        out["enum"] = kept

    def _nested(
        self,
        node: dict[str, Any],
        out: dict[str, Any],
        where: str,
        depth: int,
        active: tuple[str, ...],
    ) -> None:
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
            # which members a call must send is not known: no tool rather than a wrong one
            place = _place(where)
            shown = kind(required) if not isinstance(required, list) else "a list of non-names"
            raise Skip(f"{place} has a 'required' that is {shown}, not a list of member names")
        items = node.get("items")
        if isinstance(items, dict):
            try:
                out["items"] = self.convert(items, f"{where}[]", depth + 1, active)
            except Recursion as why:  # a tree's children: the list ends there
                out["maxItems"] = 0
                self.cuts += 1
                self.notes.append(f"{why}: an empty list there")
        properties = node.get("properties")
        if isinstance(properties, dict):
            out["properties"], kept = self.members(properties, required, where, depth, active)
            if kept:
                out["required"] = kept
        elif required:  # a part that only narrows (`allOf`): merged, or cleared (`tidied`)
            out["required"] = list(dict.fromkeys(required))
        extra = node.get("additionalProperties")
        if isinstance(extra, bool):
            out["additionalProperties"] = extra
        elif isinstance(extra, dict):
            try:
                out["additionalProperties"] = self.convert(extra, f"{where}{{}}", depth + 1, active)
            except Skip as why:
                self.notes.append(f"{why}: any value is taken there")
        for keyword in ("anyOf", "oneOf", "allOf"):
            choices = node.get(keyword)
            if isinstance(choices, list) and choices:
                self._choices(keyword, choices[:64], out, where, depth, active)

    def members(
        self,
        properties: dict[str, Any],
        required: list[str],
        where: str,
        depth: int,
        active: tuple[str, ...],
    ) -> tuple[dict[str, Any], list[str]]:
        """An object's members: optional ones that cannot be expressed left out with a note."""
        converted: dict[str, Any] = {}
        for name, member in list(properties.items())[:256]:
            path = f"{where}.{name}" if where else name
            try:
                if isinstance(member, dict) and member.get("readOnly") is True:
                    continue  # sent by the server only
                if not PROPERTY_NAME.fullmatch(name):
                    raise Skip(f"'{short(path)}' is not a name tools accept ([a-zA-Z0-9_.-])")
                converted[name] = self.convert(member, path, depth + 1, active)
            except Recursion as why:
                if name in required and not why.endless:
                    raise Recursion(
                        f"{why}, required at every level: no finite value fits", True
                    ) from why
                if name in required:
                    raise
                self.cuts += 1
                self.notes.append(f"{why}: left out (optional)")
            except Skip as why:
                if name in required:
                    raise
                self.cuts += 1
                self.notes.append(f"{why}: left out (optional)")
        # A name required but not a member here narrows an `allOf` sibling's member (kept, then
        # merged or `tidied`); a member left out (read-only, inexpressible) is not required.
        kept = [n for n in dict.fromkeys(required) if n in converted or n not in properties]
        return converted, kept

    def _choices(
        self,
        keyword: str,
        choices: list[Any],
        out: dict[str, Any],
        where: str,
        depth: int,
        active: tuple[str, ...],
    ) -> None:
        kept = []
        cuts = self.cuts
        for index, choice in enumerate(choices):
            try:
                kept.append(self.convert(choice, f"{where}|{index}", depth + 1, active))
            except Skip as why:
                if keyword == "allOf":
                    raise
                self.notes.append(f"{why}: that choice is left out")
        if keyword == "oneOf" and self.cuts != cuts:
            # Branches shown loosely may all accept the same value, which `oneOf` then refuses
            # (exactly one must match): any of them will do.
            keyword = "anyOf"
            self.notes.append(f"{_place(where)}: a oneOf whose choices were cut is an anyOf")
        if not kept:
            return
        if keyword == "allOf":
            out.setdefault("allOf", []).extend(kept)
        elif keyword in out:  # beside the schema's own anyOf: both must hold
            out.setdefault("allOf", []).append({keyword: kept})
        else:
            out[keyword] = kept

    def weight(self, node: Any) -> tuple[int, int]:
        """(subschemas, approximate JSON bytes) of a converted schema, as written out whole;
        shared parts are counted once per use, but walked once. The memory is per measurement:
        it is keyed by `id`, and the ids of a freed tool's nodes are reused by the next one's."""
        self._weights = {}
        try:
            return self._weight(node)
        finally:
            self._weights = {}

    def _weight(self, node: Any) -> tuple[int, int]:
        if not isinstance(node, dict | list):
            return 0, len(str(node)) + 4
        known = self._weights.get(id(node))
        if known is not None:
            return known
        nodes, size = (1 if isinstance(node, dict) else 0), 2
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            sub_nodes, sub_size = self._weight(value)
            nodes += sub_nodes
            size += sub_size + (len(str(key)) + 4 if isinstance(node, dict) else 1)
        self._weights[id(node)] = (nodes, size)
        return nodes, size


def loose(node: dict[str, Any]) -> dict[str, Any]:
    """A schema past the depth limit: its type and description, members not shown."""
    out: dict[str, Any] = {}
    types = _node_types(node)
    if types:
        out["type"] = types[0] if len(types) == 1 else types
    if isinstance(node.get("description"), str):
        out["description"] = node["description"][:4096]
    return out


def _node_types(node: dict[str, Any]) -> list[str]:
    found = node.get("type")
    listed = [found] if isinstance(found, str) else found if isinstance(found, list) else []
    # Only strings are types: a list in the list (`type: [["string"]]`) is not hashable either.
    named = [t for t in listed if isinstance(t, str) and (t in TYPES or t == "file")]
    types = list(dict.fromkeys(named))
    if not types and isinstance(node.get("properties"), dict):
        types = ["object"]
    if types and node.get("nullable") is True and "null" not in types:
        types.append("null")
    return types


def schema_types(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _listed(value: Any, values: list[Any]) -> bool:
    """`value` is among `values`, type and all (`1`, `True` and `1.0` differ here)."""
    return any(type(v) is type(value) and v == value for v in values)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fits(value: Any, types: list[str]) -> bool:
    return _is_scalar(value) and value_fits(value, tuple(types))


def _compiles(pattern: str) -> bool:
    """Both Python and the validator read it (ECMA 262 and Python regexes differ)."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return compile_problem({"type": "string", "pattern": pattern}) is None


def _place(where: str) -> str:
    """Where in the document a note or a skip is about: a member's path, else the body."""
    return f"'{short(where)}'" if where else "the body"
