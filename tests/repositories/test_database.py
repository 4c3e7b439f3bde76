"""`Database.unreachable`: a database nobody can reach versus one that answers too slowly, on
real clients (the shared limits take their share only in the first case)."""

from __future__ import annotations

import pytest
from pymongo.errors import (
    AutoReconnect,
    ExecutionTimeout,
    NetworkTimeout,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from app.repositories.database import Database
from tests.support.apps import make_settings
from tests.support.secantus import SecantusServer, free_port


async def test_a_port_where_nothing_listens_is_unreachable() -> None:
    settings = make_settings(f"mongodb://127.0.0.1:{free_port()}/", mongodb_timeout_ms=300)
    database = Database.from_settings(settings)
    try:
        with pytest.raises(ServerSelectionTimeoutError) as failed:
            await database.collection("limits").find_one({})
        assert database.unreachable(failed.value)  # the driver's last word: refused
    finally:
        await database.close()


async def test_a_server_that_answers_is_slow_not_unreachable(
    secantus_server: SecantusServer,
) -> None:
    database = Database.from_settings(make_settings(secantus_server.url))
    try:
        await database.collection("limits").find_one({})  # the driver knows the server
        for slow in (
            ServerSelectionTimeoutError("no connection in time"),  # e.g. a full pool
            NetworkTimeout("timed out"),
            ExecutionTimeout("operation exceeded time limit", 50),
        ):
            assert not database.unreachable(slow), slow
        assert database.unreachable(AutoReconnect("connection refused"))
        assert not database.unreachable(OperationFailure("not authorized", 13))
    finally:
        await database.close()


async def test_every_wait_on_the_database_is_bounded_by_the_configured_timeout() -> None:
    """A dead or silent database fails a request in MONGODB_TIMEOUT_MS (503 fast), never the
    driver's 30 s default: server selection, connecting and each operation."""
    settings = make_settings(f"mongodb://127.0.0.1:{free_port()}/", mongodb_timeout_ms=1500)
    database = Database.from_settings(settings)
    try:
        options = database._client.options
        assert options.server_selection_timeout == 1.5
        assert options.pool_options.connect_timeout == 1.5
        assert options.timeout == 1.5  # the client-side operation timeout (timeoutMS)
    finally:
        await database.close()
