"""Documents made storable: what BSON or MongoDB would refuse, replaced by a marker saying why.

Run records carry what a model or a caller sent (tool arguments, messages): an integer beyond 64
bits, a NUL or a leading `$` in a key, nesting past MongoDB's 100 levels or a document past its
16 MiB. Rather than lose the record, the offending values are replaced and the rest is kept.
"""

from __future__ import annotations

from typing import Any

import bson

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_STORED_DEPTH = 90  # MongoDB refuses 100 levels; a record wraps what it stores in a few
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024 - 64 * 1024  # the 16 MiB limit, less room for the wrapper


def unstorable(reason: str) -> str:
    return f"[unstorable: {reason}]"


def storable(value: Any, *, max_depth: int = MAX_STORED_DEPTH) -> Any:
    """A copy of `value` with every part BSON or MongoDB refuses replaced by a marker."""
    return _bounded(value, max_depth)


def _bounded(value: Any, depth_left: int) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return value
        return unstorable("an integer beyond 64 bits")
    if isinstance(value, dict | list):
        if depth_left <= 0:
            return unstorable(f"nested deeper than {MAX_STORED_DEPTH} levels")
        if isinstance(value, list):
            return [_bounded(item, depth_left - 1) for item in value]
        return {_safe_key(str(key)): _bounded(item, depth_left - 1) for key, item in value.items()}
    return value  # datetimes and the like, which the driver encodes


def _safe_key(key: str) -> str:
    """NUL is refused in a key, and a leading `$` reads as an operator."""
    key = key.replace("\x00", "\\u0000")
    return "\\u0024" + key[1:] if key.startswith("$") else key


def storable_record(record: dict[str, Any], *, bulky: tuple[str, ...]) -> dict[str, Any]:
    """The record, storable: values replaced where needed, and the `bulky` fields (messages,
    say) replaced whole if it would still pass the document size limit."""
    safe: dict[str, Any] = storable(record)
    for field in bulky:
        if len(bson.encode(safe)) <= MAX_DOCUMENT_BYTES:
            break
        if field in safe:
            safe[field] = [{"unstorable": "the record would pass MongoDB's 16 MiB"}]
    return safe
