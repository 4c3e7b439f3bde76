"""OpenAPI documents are YAML 1.2 (issue 29): its core schema, not PyYAML's YAML 1.1."""

from __future__ import annotations

import pytest

from app.tools.openapi_text import TextError, parse_document


def test_yaml_is_read_with_the_1_2_core_schema() -> None:
    text = (
        "enum: [on, off, yes, no, y, n, true, False, TRUE]\n"
        "numbers: [012, 0o17, 0x1F, 1:20, 1e3, .5, 1_000, '3']\n"
        "dates: [2024-01-01]\n"
        "nothing: [~, null, ]\n"
    )
    assert parse_document(text) == {
        "enum": ["on", "off", "yes", "no", "y", "n", True, False, True],
        "numbers": [12, 15, 31, "1:20", 1000.0, 0.5, "1_000", "3"],
        "dates": ["2024-01-01"],
        "nothing": [None, None],
    }


def test_an_integer_too_long_to_convert_is_a_text_error() -> None:
    with pytest.raises(TextError):
        parse_document("a: " + "1" * 5000 + "\nb: [x")


def test_libyamls_c_loader_reads_documents_where_it_is_installed() -> None:
    """PyYAML's pure-Python scanner took 17.5 s on 100 KB of brackets and 1.1-1.4 s on a real
    680 KB document: where PyYAML has libyaml (the wheels on PyPI do), its C loader is used."""
    import yaml

    from app.tools import openapi_text

    assert yaml.__with_libyaml__, "this PyYAML lacks libyaml: imports would use the slow scanner"
    assert openapi_text.LIBYAML and issubclass(openapi_text._Loader, yaml.CSafeLoader)
