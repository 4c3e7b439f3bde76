"""Tool documents -> the JSON Schema and tool list a model is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.tools.definitions import referenced_secrets

_RENAMED = {"min_items": "minItems", "max_items": "maxItems"}


def parameter_json_schema(parameter: dict[str, Any]) -> dict[str, Any]:
    """One stored parameter (seed vocabulary) as JSON Schema."""
    schema: dict[str, Any] = {}
    for key, value in parameter.items():
        if value is None:
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


def openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A stored tool in the OpenAI chat-completions `tools` format."""
    function = tool["function"]
    return {
        "type": "function",
        "function": {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": parameters_json_schema(function.get("parameters", {})),
        },
    }


@dataclass(frozen=True)
class PreparedTool:
    """A stored tool with its model schema, built once per catalog load rather than per chat."""

    doc: dict[str, Any]
    schema: dict[str, Any]
    secrets: frozenset[str] = frozenset()  # names of the tenant secrets it needs to run

    @property
    def name(self) -> str:
        return str(self.doc["function"]["name"])

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> PreparedTool:
        return cls(doc, openai_tool(doc), frozenset(referenced_secrets(doc)))
