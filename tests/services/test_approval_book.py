"""The approval book on the embedded store and on a real MongoDB-wire server (two databases
clients as two replicas): calls held by one replica are decided once, by the caller that
stopped, within APPROVAL_WAIT_S (a clock of the test's own)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from app.chat.approval import PendingCall
from app.chat.model import ModelToolCall
from app.errors import UnprocessableError
from app.repositories.approvals import ApprovalRepository
from app.repositories.database import Database
from app.schemas.chat import ApprovalDecision
from app.services.approvals import ApprovalBook, waiting_key
from tests.support.apps import make_settings
from tests.support.secantus import SecantusServer

PENDING = [
    PendingCall("c1", "delete_everything", {"scope": "tmp", "force": True}),
    PendingCall("c2", "delete_everything", {"scope": "logs"}),
]
CALLS = [ModelToolCall(p.id, p.tool, "{}") for p in PENDING]
YES = [
    ApprovalDecision(call_id="c1", approved=True),
    ApprovalDecision(call_id="c2", approved=False),
]


class Clock:
    """Starts at the real time (the stores' TTL monitors remove documents past it) and moves
    only when the test moves it."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["memory", pytest.param("secantus", marks=pytest.mark.slow)])
async def databases(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[Database, Database]]:
    """Two clients of one database (two replicas), embedded or on SecantusDB."""
    if request.param == "memory":
        database = Database.from_settings(make_settings(None))
        yield database, database
        await database.close()
        return
    server: SecantusServer = request.getfixturevalue("secantus_server")
    settings = make_settings(server.url, mongodb_database=f"approvals_{id(request)}")
    first, second = Database.from_settings(settings), Database.from_settings(settings)
    yield first, second
    await first.close()
    await second.close()


def _books(databases: tuple[Database, Database], clock: Clock) -> tuple[ApprovalBook, ...]:
    return tuple(
        ApprovalBook(ApprovalRepository(database), wait_s=60, clock=clock) for database in databases
    )


async def _decides(book: ApprovalBook, tenant_id: str = "acme", holder: str | None = None) -> bool:
    try:
        resume, decisions = await book.decided(
            YES, CALLS, PENDING, tenant_id=tenant_id, holder=holder
        )
    except UnprocessableError as exc:
        assert exc.errors is not None and exc.errors[0]["path"] == "$.approvals"
        return False
    assert resume == CALLS and decisions["c1"].approved and not decisions["c2"].approved
    return True


async def test_held_calls_are_decided_once_on_any_replica(
    databases: tuple[Database, Database],
) -> None:
    a, b = _books(databases, Clock())
    await a.hold(PENDING, tenant_id="acme", holder=None)
    assert not await _decides(b, tenant_id="globex")  # another tenant
    assert not await _decides(b, holder="tok_alice")  # a client token, not the tenant key
    results = await asyncio.gather(_decides(a), _decides(b))  # both replicas at once
    assert sorted(results) == [False, True]
    assert not await _decides(b)  # and never again


async def test_held_calls_wait_for_approval_wait_s(databases: tuple[Database, Database]) -> None:
    clock = Clock()
    a, b = _books(databases, clock)
    await a.hold(PENDING, tenant_id="acme", holder="tok_alice")
    clock.now += timedelta(seconds=59)
    assert await _decides(b, holder="tok_alice")
    await a.hold(PENDING, tenant_id="acme", holder="tok_alice")
    clock.now += timedelta(seconds=61)
    assert not await _decides(b, holder="tok_alice")


async def test_nothing_waiting_resumes_nothing_and_bad_decisions_take_nothing(
    databases: tuple[Database, Database],
) -> None:
    a, _ = _books(databases, Clock())
    assert await a.decided([], CALLS, [], tenant_id="acme", holder=None) == ([], {})
    await a.hold(PENDING, tenant_id="acme", holder=None)
    with pytest.raises(UnprocessableError):  # one call undecided: checked before taking
        await a.decided(YES[:1], CALLS, PENDING, tenant_id="acme", holder=None)
    assert await _decides(a)  # still held


def test_the_key_is_the_calls_in_any_order_and_nothing_else() -> None:
    assert waiting_key(PENDING) == waiting_key(list(reversed(PENDING)))
    changed = [PENDING[0], PendingCall("c2", "delete_everything", {"scope": "all"})]
    assert waiting_key(changed) != waiting_key(PENDING)
    renamed = [PENDING[0], PendingCall("c3", "delete_everything", {"scope": "logs"})]
    assert waiting_key(renamed) != waiting_key(PENDING)
