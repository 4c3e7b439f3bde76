"""Stored parameters (the seed's vocabulary) -> the JSON Schema a model is given."""

from __future__ import annotations

from typing import Any

_RENAMED = {"min_items": "minItems", "max_items": "maxItems"}


def parameter_json_schema(parameter: dict[str, Any]) -> dict[str, Any]:
    """One stored parameter (seed vocabulary) as JSON Schema."""
    schema: dict[str, Any] = {}
    for key, value in parameter.items():
        if value is None or key == "in":  # where an external tool sends it: not for the model
            continue
        if key == "items":
            schema["items"] = parameter_json_schema(value)
        else:
            schema[_RENAMED.get(key, key)] = value
    return schema


def parameters_json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """The LLM-visible parameters: context parameters are never among them."""
    properties = parameters.get("properties", {})
    return {
        "type": "object",
        "properties": {name: parameter_json_schema(p) for name, p in properties.items()},
        "required": list(parameters.get("required", [])),
        "additionalProperties": False,
    }
