"""Property: any JSON or YAML value anywhere in a real OpenAPI document makes POST /tools/import
answer 200 (operations skipped with their reasons) or 422 naming where, never 500.

The documents are the real ones in tests/fixtures/openapi, mutated by Hypothesis
(tests/support/openapi_mutations.py) and sent to the app served by uvicorn on 127.0.0.1, as
JSON (`document`) or as YAML text (`document_text`, where YAML-only values can appear). The
example count is bounded so the test takes a few seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.main import create_app
from tests.support import functions
from tests.support.apps import ADMIN, make_settings
from tests.support.openapi_mutations import as_yaml, mutated
from tests.support.servers import ThreadedServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openapi"
DOCUMENTS = [
    yaml.safe_load((FIXTURES / "petstore-3.0.yaml").read_text()),
    json.loads((FIXTURES / "non-oauth-scopes-3.1.json").read_text()),
]
SECURITY = {"petstore_auth": "token", "api_key": "token", "bearerAuth": "token"}


@pytest.fixture(scope="module")
def served() -> Iterator[httpx.Client]:
    """The app on a real socket, one tenant's credentials on the client."""
    app = create_app(make_settings(rate_limit_writes_per_minute=0), registry=functions.registry)
    server = ThreadedServer(app, lifespan="on").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            created = client.post("/tenants", json={"tenant_id": "fuzz"}, headers=ADMIN)
            client.headers["Authorization"] = f"Bearer {created.json()['api_key']}"
            yield client
    finally:
        server.stop()


def _cases() -> st.SearchStrategy[tuple[bool, dict[str, Any]]]:
    return st.tuples(st.sampled_from(DOCUMENTS), st.booleans()).flatmap(
        lambda pair: st.tuples(st.just(pair[1]), mutated(pair[0], yaml_values=pair[1]))
    )


@pytest.mark.fuzz
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=_cases(), server_url=st.sampled_from([None, *["https://api.example.com"] * 3]))
def test_any_value_anywhere_is_200_or_422_never_500(
    served: httpx.Client, case: tuple[bool, dict[str, Any]], server_url: str | None
) -> None:
    as_text, document = case
    body: dict[str, Any] = {"dry_run": True, "security": SECURITY, "server_url": server_url}
    if as_text:
        body["document_text"] = as_yaml(document)
    else:
        body["document"] = document
    answer = served.post("/tools/import", json=body)
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        errors = answer.json()["errors"]
        assert errors and all(error["path"].startswith("$") for error in errors), errors
    else:
        for skipped in answer.json()["skipped"]:
            assert skipped["reason"], skipped
