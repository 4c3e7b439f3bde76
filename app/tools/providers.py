"""A tool in each major provider's tool format, converted down to what the provider accepts, and
what a provider cannot take (`provider_problems`, the tool's `incompatible_providers`).

Context parameters never appear: they are not among a tool's LLM-visible parameters.
- openai (chat completions): {"type": "function", "function": {name, description, parameters}};
  the JSON Schema as it is. Strict mode (`strict: true`) takes less: what it cannot take is
  listed under `openai-strict`.
- openai-strict: as openai, with `strict: true` and the parameters in the form strict mode
  takes (`strict_schema`: objects closed, every member required, optional ones nullable,
  `oneOf` as `anyOf`); a tool that cannot be converted is given as openai (no `strict`).
- openai-responses: {"type": "function", name, description, parameters}; as openai.
- anthropic: {name, description, input_schema}; the JSON Schema as it is.
- gemini: {name, description, parameters} in the OpenAPI 3.0 subset Gemini accepts: upper-case
  types, `nullable` for `["X", "null"]`, `$ref`s inlined, `oneOf` as `anyOf`, objects of an
  `allOf` merged, `const` as a one-value enum, `format: enum` on string enums, int64 bounds as
  strings; what it has no field for (`additionalProperties`, `multipleOf`, exclusive bounds,
  other formats, enums of numbers) is said in the description or dropped; no `parameters` at
  all for a function without any.
"""

from __future__ import annotations

from typing import Any

from app.schemas.fields import Provider, name_problems

MAX_GEMINI_NODES = 5_000  # inlining $refs can multiply a schema: stop here
MAX_GEMINI_DEPTH = 32
_INT64 = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
_GEMINI_FORMATS = {
    "STRING": ("date-time", "enum"),
    "INTEGER": ("int32", "int64"),
    "NUMBER": ("float", "double"),
}
_STRICT_UNSUPPORTED = (
    "allOf",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "uniqueItems",
)


def shaped(
    provider: Provider,
    name: str,
    description: str,
    parameters: dict[str, Any],
    *,
    gemini_convert: bool = True,
) -> dict[str, Any]:
    """A function declaration in `provider`'s format. For Gemini, the JSON Schema is converted to
    its OpenAPI subset unless `gemini_convert` is false (a schema it cannot express)."""
    if provider == "openai":
        return {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters},
        }
    if provider == "openai-strict":  # the strict form where it can be made, else as `openai`
        strict, problems = strict_schema(parameters)
        function = {"name": name, "description": description}
        if problems:
            return {"type": "function", "function": {**function, "parameters": parameters}}
        return {"type": "function", "function": {**function, "parameters": strict, "strict": True}}
    if provider == "openai-responses":
        return {
            "type": "function",
            "name": name,
            "description": description,
            "parameters": parameters,
        }
    if provider == "anthropic":
        return {"name": name, "description": description, "input_schema": parameters}
    declaration: dict[str, Any] = {"name": name, "description": description}
    if parameters.get("properties"):
        declaration["parameters"] = gemini_schema(parameters) if gemini_convert else parameters
    return declaration


def provider_problems(name: str, parameters: dict[str, Any]) -> dict[str, list[str]]:
    """Providers that cannot take the tool (its name, its schema even converted), with why."""
    problems: dict[str, list[str]] = {}
    gemini: list[str] = []
    gemini_schema(parameters, gemini)
    if gemini:
        problems["gemini"] = gemini
    strict = strict_problems(parameters)
    if strict:
        problems["openai-strict"] = strict
    for provider, reasons in name_problems(name).items():  # the one name rule
        problems.setdefault(provider, []).extend(reasons)
    return problems


def gemini_schema(schema: dict[str, Any], problems: list[str] | None = None) -> dict[str, Any]:
    """The JSON Schema in Gemini's subset; what cannot be converted is added to `problems`."""
    converter = _Gemini(schema.get("$defs") or {}, problems if problems is not None else [])
    return converter.convert(schema, "", 0, ())


class _Gemini:
    def __init__(self, defs: Any, problems: list[str]) -> None:
        self._defs = defs if isinstance(defs, dict) else {}
        self._problems = problems
        self._nodes = 0

    def _fail(self, problem: str) -> dict[str, Any]:
        if problem not in self._problems and len(self._problems) < 20:
            self._problems.append(problem)
        return {"type": "STRING"}

    def convert(self, node: Any, where: str, depth: int, refs: tuple[str, ...]) -> dict[str, Any]:
        self._nodes += 1
        shown = where or "the parameters"
        if self._nodes > MAX_GEMINI_NODES or depth > MAX_GEMINI_DEPTH:
            return self._fail("the schema is too large for Gemini once its $refs are inlined")
        if not isinstance(node, dict):
            return self._fail(f"{shown}: a schema that is not an object")
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/$defs/")
            if name in refs:
                return self._fail(f"{shown}: a recursive $ref ({name}), which Gemini cannot take")
            if name not in self._defs:
                return self._fail(f"{shown}: a $ref Gemini cannot follow ({ref[:100]})")
            rest = {k: v for k, v in node.items() if k != "$ref"}
            merged = {**self._defs[name], **rest}
            return self.convert(merged, where, depth + 1, (*refs, name))
        if isinstance(node.get("allOf"), list):
            node = self._merged(node, where)
        return self._typed(node, where, depth, refs)

    def _merged(self, node: dict[str, Any], where: str) -> dict[str, Any]:
        """`allOf` of objects as one object: properties and required joined."""
        merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            part = self._inlined(part)
            if not isinstance(part, dict) or set(part) & {"anyOf", "oneOf", "allOf"}:
                self._fail(f"{where or 'the parameters'}: an allOf Gemini cannot merge")
                continue
            properties = {**merged.get("properties", {}), **(part.get("properties") or {})}
            required = [*merged.get("required", []), *(part.get("required") or [])]
            merged = {**part, **merged, "properties": properties, "required": required}
        if not merged.get("properties"):
            merged.pop("properties", None)
        return merged

    def _inlined(self, node: Any) -> Any:
        for _ in range(MAX_GEMINI_DEPTH):  # a chain of plain $refs
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            node = self._defs.get(node["$ref"].removeprefix("#/$defs/"))
        return None

    def _typed(
        self, node: dict[str, Any], where: str, depth: int, refs: tuple[str, ...]
    ) -> dict[str, Any]:
        shown = where or "the parameters"
        out: dict[str, Any] = {}
        notes: list[str] = []
        types = node.get("type")
        listed = [types] if isinstance(types, str) else list(types or [])
        if "null" in listed:
            out["nullable"] = True
        real = [t for t in listed if t != "null"]
        choices = node.get("anyOf") or node.get("oneOf")
        if len(real) > 1:
            choices = [{**node, "type": t} for t in real]
        elif not real and not choices:
            real = [_value_type(node)]
        if isinstance(choices, list) and any(_is_null(c) for c in choices):
            out["nullable"] = True  # `X or null`: Gemini says nullable
            choices = [c for c in choices if not _is_null(c)]
            if len(choices) == 1:
                rest = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
                single = self.convert({**choices[0], **rest}, where, depth + 1, refs)
                return {**single, "nullable": True}
        if choices and isinstance(choices, list):
            out["anyOf"] = [
                self.convert(c, f"{where}|{i}", depth + 1, refs) for i, c in enumerate(choices)
            ]
        else:
            if real[0] is None:
                return self._fail(f"{shown}: Gemini needs a type for every parameter")
            out["type"] = str(real[0]).upper()
            self._keywords(node, out, notes)
            self._nested(node, out, where, depth, refs)
        description = node.get("description")
        text = " ".join(
            p for p in [description if isinstance(description, str) else "", *notes] if p
        )
        if text:
            out["description"] = text
        return out

    def _keywords(self, node: dict[str, Any], out: dict[str, Any], notes: list[str]) -> None:
        kind = out["type"]
        values = (
            node.get("enum") if "enum" in node else [node["const"]] if "const" in node else None
        )
        if isinstance(values, list):
            if kind == "STRING":
                out["format"] = "enum"
                out["enum"] = [str(v) for v in values if v is not None]
            else:
                notes.append(f"(one of: {', '.join(map(_text, values))[:500]})")
        fmt = node.get("format")
        if isinstance(fmt, str) and "format" not in out:
            if fmt in _GEMINI_FORMATS.get(kind, ()):
                out["format"] = fmt
            else:
                notes.append(f"(format: {fmt[:64]})")
        for key in ("pattern", "minimum", "maximum", "default", "title"):
            if key in node:
                out[key] = node[key]
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if key in node:
                notes.append(f"({bound} {_text(node[key])}, exclusive)")
        if "multipleOf" in node:
            notes.append(f"(a multiple of {_text(node['multipleOf'])})")
        for key in _INT64:
            if key in node:
                out[key] = str(node[key])  # int64 fields are strings in Gemini's JSON

    def _nested(
        self,
        node: dict[str, Any],
        out: dict[str, Any],
        where: str,
        depth: int,
        refs: tuple[str, ...],
    ) -> None:
        if out["type"] == "ARRAY":  # Gemini wants item types; ours default to strings
            items = node.get("items") or {"type": "string"}
            out["items"] = self.convert(items, f"{where}[]", depth + 1, refs)
        if out["type"] != "OBJECT":
            return
        properties = node.get("properties")
        if not isinstance(properties, dict) or not properties:
            if where:  # the top level may be empty: then no `parameters` is sent at all
                self._fail(f"{where}: an object without properties, which Gemini cannot take")
            return
        out["properties"] = {
            name: self.convert(sub, f"{where}.{name}" if where else name, depth + 1, refs)
            for name, sub in properties.items()
        }
        required = [r for r in node.get("required") or [] if r in properties]
        if required:
            out["required"] = list(dict.fromkeys(required))


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null"


def _value_type(node: dict[str, Any]) -> str | None:
    """The type an untyped schema's `enum` or `const` implies."""
    values = node.get("enum") if isinstance(node.get("enum"), list) else None
    if values is None and "const" in node:
        values = [node["const"]]
    kinds = {type(v) for v in values or [] if v is not None}
    if not values or len(kinds) != 1:
        return "object" if isinstance(node.get("properties"), dict) else None
    return {str: "string", bool: "boolean", int: "integer", float: "number"}.get(kinds.pop())


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


MAX_STRICT_DEPTH = 10  # OpenAI: "up to 10 levels of nesting"
MAX_STRICT_PROPERTIES = 5_000  # OpenAI: "up to 5000 object properties total"


def strict_problems(schema: dict[str, Any]) -> list[str]:
    """What OpenAI's strict mode (`strict: true`) cannot take even converted (`strict_schema`):
    keywords it does not accept, objects open to members of any name (a map), nesting or
    property counts past its limits."""
    return strict_schema(schema)[1]


def strict_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The parameters as OpenAI's strict mode takes them: every object closed
    (`additionalProperties: false`) with every member required, an optional member made
    nullable (a model then sends `null` for what it leaves out), `oneOf` as `anyOf` (strict
    mode refuses `oneOf`; the tool's own check still runs on the call). The problems say what
    cannot be converted; the schema is only sent when there are none."""
    converter = _Strict()
    converted = converter.convert(schema, "", 0)
    defs = schema.get("$defs")
    if isinstance(defs, dict):
        converted["$defs"] = {
            name: converter.convert(sub, f"$defs.{name}", 1) for name, sub in defs.items()
        }
    return converted, converter.problems


class _Strict:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.properties = 0

    def _problem(self, problem: str) -> None:
        if problem not in self.problems and len(self.problems) < 10:
            self.problems.append(problem)

    def convert(self, node: Any, where: str, depth: int) -> Any:
        shown = where or "the parameters"
        if not isinstance(node, dict):
            return node
        if depth > MAX_STRICT_DEPTH:
            self._problem(f"{shown}: nested deeper than {MAX_STRICT_DEPTH} levels")
            return node
        used = sorted(k for k in _STRICT_UNSUPPORTED if k in node)
        if used:
            self._problem(f"{shown}: {', '.join(used)}")
        out: dict[str, Any] = {
            k: v for k, v in node.items() if k not in ("$defs", "in", "style", "explode")
        }
        if "oneOf" in out:
            choices = out.pop("oneOf")
            out["anyOf"] = [*out.get("anyOf", []), *choices] if "anyOf" in out else choices
        for keyword in ("anyOf", "allOf"):
            if isinstance(out.get(keyword), list):
                out[keyword] = [
                    self.convert(c, f"{where}|{i}", depth + 1) for i, c in enumerate(out[keyword])
                ]
        if isinstance(out.get("items"), dict):
            out["items"] = self.convert(out["items"], f"{where}[]", depth + 1)
        if _is_object(out):
            self._closed(out, where, depth)
        return out

    def _closed(self, out: dict[str, Any], where: str, depth: int) -> None:
        shown = where or "the parameters"
        if out.get("additionalProperties") not in (None, False):
            self._problem(f"{shown}: an object open to members of any name")
        found = out.get("properties")
        properties: dict[str, Any] = found if isinstance(found, dict) else {}
        self.properties += len(properties)
        if self.properties > MAX_STRICT_PROPERTIES:
            self._problem(f"more than {MAX_STRICT_PROPERTIES} object properties in all")
        required = set(out.get("required") or [])
        converted = {}
        for name, sub in properties.items():
            member = self.convert(sub, f"{where}.{name}" if where else name, depth + 1)
            converted[name] = member if name in required else _nullable(member)
        out["properties"] = converted
        out["required"] = list(converted)
        out["additionalProperties"] = False


def _is_object(node: dict[str, Any]) -> bool:
    types = node.get("type")
    listed = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    return "object" in listed or (not listed and isinstance(node.get("properties"), dict))


def _nullable(node: Any) -> Any:
    """`node` or null: a scalar's type list gains "null" (an enum, `None`); an object, an
    array or a choice becomes `anyOf: [node, {"type": "null"}]`."""
    if not isinstance(node, dict):
        return node
    types = node.get("type")
    listed = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
    composite = {"object", "array"} & set(listed) or "$ref" in node or "anyOf" in node
    if listed and not composite:
        if "null" in listed:
            return node
        out = {**node, "type": [*listed, "null"]}
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    if any(isinstance(c, dict) and c.get("type") == "null" for c in node.get("anyOf") or []):
        return node
    return {"anyOf": [node, {"type": "null"}]}
