"""The approvals repository keeps one contract on the embedded store and on a MongoDB-wire server
(the real driver): stops listed newest first (every holder's, or one's), an operator's decisions
written once, a stop taken only when no call waits for an operator, a held stop of before the
operator field taken as before, nothing of another tenant's reached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from app.repositories.approvals import ApprovalRepository
from app.repositories.database import Database
from tests.support.apps import make_settings
from tests.support.secantus import SecantusServer

NOW = datetime.now(UTC).replace(microsecond=0)


def held(index: int, *, holder: str | None, operator: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "approval_id": f"{index:032x}",
        "key": f"k{index}",
        "holder": holder,
        "calls": [{"id": f"c{index}", "tool": "t", "arguments": {}, "decided_by": "operator"}],
        "operator_pending": operator,
        "decisions": {},
        "held_at": NOW - timedelta(seconds=100 - index),
        "expires_at": NOW + timedelta(hours=1),
        **extra,
    }


@pytest.fixture(
    params=["memory", pytest.param("secantus", marks=[pytest.mark.processes, pytest.mark.slow])]
)
async def repo(request: pytest.FixtureRequest) -> AsyncIterator[ApprovalRepository]:
    url = None
    if request.param == "secantus":
        server: SecantusServer = request.getfixturevalue("secantus_server")
        url = server.url
    settings = make_settings(url)
    database = Database.from_settings(settings)
    yield ApprovalRepository(database)
    if url is not None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
        await client.drop_database(settings.mongodb_database)
        await client.close()
    await database.close()


async def test_the_approval_store_contract(repo: ApprovalRepository) -> None:
    await repo.hold(held(1, holder="tok_a"), tenant_id="acme")
    await repo.hold(held(2, holder=None), tenant_id="acme")
    await repo.hold(held(3, holder="tok_a", operator=1), tenant_id="acme")
    await repo.hold(
        held(4, holder="tok_b", expires_at=NOW - timedelta(seconds=1)), tenant_id="acme"
    )
    old = held(5, holder="tok_a")
    del old["operator_pending"], old["decisions"]  # held before operators decided anything
    await repo.hold(old, tenant_id="acme")

    def ids(docs: list[dict[str, Any]]) -> list[str]:
        return [doc["approval_id"][-1] for doc in docs]

    every = await repo.waiting(
        NOW, tenant_id="acme", holder=None, every_holder=True, limit=10, offset=0
    )
    assert ids(every) == ["5", "3", "2", "1"]  # newest first, the expired one left out
    mine = await repo.waiting(
        NOW, tenant_id="acme", holder="tok_a", every_holder=False, limit=2, offset=1
    )
    assert ids(mine) == ["3", "1"]
    keys = await repo.waiting(
        NOW, tenant_id="acme", holder=None, every_holder=False, limit=10, offset=0
    )
    assert ids(keys) == ["2"]
    assert (
        await repo.waiting(
            NOW, tenant_id="globex", holder=None, every_holder=True, limit=10, offset=0
        )
        == []
    )

    # An operator's decisions: written once, and only on a stop that waits for them.
    approval = f"{3:032x}"
    assert await repo.take("k3", "tok_a", NOW, tenant_id="acme") is None  # waits for them
    assert await repo.decide(approval, {"c3": {"approved": True}}, NOW, tenant_id="globex") is None
    decided = await repo.decide(approval, {"c3": {"approved": True}}, NOW, tenant_id="acme")
    assert decided is not None and decided["decisions"] == {"c3": {"approved": True}}
    assert decided["operator_pending"] == 0
    assert await repo.decide(approval, {"c3": {"approved": False}}, NOW, tenant_id="acme") is None
    assert (await repo.one(approval, NOW, tenant_id="acme") or {})["decisions"] == {
        "c3": {"approved": True}
    }
    taken = await repo.take("k3", "tok_a", NOW, tenant_id="acme")
    assert taken is not None and taken["decisions"] == {"c3": {"approved": True}}
    assert await repo.one(approval, NOW, tenant_id="acme") is None

    # Other stops are taken as before; no tenant reaches another's.
    assert await repo.take("k1", "tok_a", NOW, tenant_id="globex") is None
    assert await repo.take("k1", "tok_a", NOW, tenant_id="acme") is not None
    assert await repo.take("k5", "tok_a", NOW, tenant_id="acme") is not None
    assert await repo.held("k2", None, NOW, tenant_id="acme") is not None
    assert await repo.one(f"{2:032x}", NOW, tenant_id="globex") is None
