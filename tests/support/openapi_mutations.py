"""Hypothesis strategies that mutate real OpenAPI documents: any JSON or YAML value anywhere.

A mutation picks a place in the document (a third of the time near its root, a third in the
first levels of an operation, where the converter looks closest, a third anywhere) and
replaces its value, replaces its key, or deletes it. YAML mutations may use
values JSON has no form for (binary data, timestamps, sets, keys that are numbers or dates).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import strategies as st

Location = tuple[Any, ...]

_TEXT = st.text(max_size=12)
_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
    | st.sampled_from(["/", "#/components/schemas/Pet", "application/json", "object", "array"])
)
_YAML_LEAVES = _JSON_LEAVES | st.binary(max_size=8) | st.dates() | st.datetimes() | st.just(1.5e300)
_YAML_KEYS = _TEXT | st.integers(-5, 300) | st.booleans() | st.none() | st.dates()


def _values(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=6,
    )


JSON_VALUES = _values(_JSON_LEAVES, _TEXT)
YAML_VALUES = _values(_YAML_LEAVES, _YAML_KEYS) | st.sets(st.integers(0, 9), max_size=3)


def locations(document: Any) -> list[Location]:
    """Every place in the document (a path of keys and indexes), the root's children first."""
    found: list[Location] = []
    stack: list[tuple[Location, Any]] = [((), document)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, dict):
            children = list(node.items())
        else:
            children = list(enumerate(node)) if isinstance(node, list) else []
        for key, child in children:
            found.append((*at, key))
            stack.append(((*at, key), child))
    return found


@st.composite
def mutated(draw: st.DrawFn, document: dict[str, Any], *, yaml_values: bool) -> dict[str, Any]:
    """A copy of `document` with one to three mutations."""
    values = YAML_VALUES if yaml_values else JSON_VALUES
    keys = _YAML_KEYS if yaml_values else _TEXT
    result = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, 3))):
        places = locations(result)
        pools = [
            [place for place in places if len(place) <= 2 and place[0] != "openapi"],
            [place for place in places if place[0] == "paths" and len(place) <= 6],  # operations
            places,
        ]
        pool = draw(st.sampled_from([pool for pool in pools if pool] or [[]]))
        if not pool:
            break
        *parents, last = draw(st.sampled_from(pool))
        parent = result
        for step in parents:
            parent = parent[step]
        action = draw(st.sampled_from(["value", "key", "delete"]))
        if action == "value" or isinstance(parent, list):
            parent[last] = draw(values)
        elif action == "key":
            parent[draw(keys)] = parent.pop(last)
        else:
            del parent[last]
    return result


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def as_yaml(document: Any) -> str:
    return yaml.dump(document, Dumper=_NoAliases, allow_unicode=True, sort_keys=False)
