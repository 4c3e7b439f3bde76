"""A stored tool in each major provider's tool format, and what a provider cannot express.

Context parameters never appear: they are not among a tool's LLM-visible parameters.
- openai (chat completions): {"type": "function", "function": {name, description, parameters}}
- openai-responses: {"type": "function", name, description, parameters}
- anthropic: {name, description, input_schema}
- gemini: {name, description, parameters} in the OpenAPI 3.0 subset Gemini accepts: upper-case
  types, `format: enum` on string enums, int64 bounds as strings, no additionalProperties, and
  no `parameters` at all for a function without any.
"""

from __future__ import annotations

from typing import Any

from app.schemas.fields import Provider


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


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    converted: dict[str, Any] = {"type": str(schema["type"]).upper()}
    for key in ("description", "required"):
        if schema.get(key):
            converted[key] = schema[key]
    if "enum" in schema:
        converted["format"] = "enum"
        converted["enum"] = schema["enum"]
    for key in ("minItems", "maxItems"):
        if key in schema:
            converted[key] = str(schema[key])  # int64 fields are strings in Gemini's JSON
    if converted["type"] == "ARRAY":  # Gemini wants item types; ours default to strings
        converted["items"] = gemini_schema(schema.get("items") or {"type": "string"})
    if "properties" in schema:
        converted["properties"] = {
            name: gemini_schema(prop) for name, prop in schema["properties"].items()
        }
    return converted  # additionalProperties has no Gemini equivalent: dropped
