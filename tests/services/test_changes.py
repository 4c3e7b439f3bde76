"""The change stamps on a real MongoDB-wire server: each change is signalled once, to readers."""

from __future__ import annotations

from app.repositories.changes import ChangeStampRepository
from app.repositories.database import Database
from app.services.changes import ChangeFeed
from tests.support.apps import make_settings
from tests.support.secantus import SecantusServer


async def test_each_change_is_signalled_once_and_the_first_read_only_learns(
    secantus_server: SecantusServer,
) -> None:
    settings = make_settings(secantus_server.url)
    writer_db, reader_db = Database.from_settings(settings), Database.from_settings(settings)
    writer = ChangeFeed(ChangeStampRepository(writer_db), interval_s=0)
    reader = ChangeFeed(ChangeStampRepository(reader_db), interval_s=0)
    forgotten: list[str] = []
    reader.listen(forgotten.append)
    try:
        await writer.publish("acme")  # before the reader started: nothing of it is cached
        assert await reader.poll() == []
        assert await reader.poll() == []

        await writer.publish("acme")
        await writer.publish("globex")
        await writer.publish("globex")  # two changes between reads: one signal
        assert sorted(await reader.poll()) == ["acme", "globex"]
        assert await reader.poll() == []  # within the overlap window, seen versions are quiet
        await writer.publish("acme")
        assert await reader.poll() == ["acme"]
        assert sorted(forgotten) == ["acme", "acme", "globex"]
    finally:
        await writer_db.close()
        await reader_db.close()


async def test_a_replicas_own_change_is_not_signalled_back_unless_another_hides_behind_it(
    secantus_server: SecantusServer,
) -> None:
    """What a replica caches for a tenant it just changed stays cached (an outage right after
    finds it there), but a change of another replica is signalled even when this replica's
    later change is all the stamp shows."""
    settings = make_settings(secantus_server.url)
    one_db, other_db = Database.from_settings(settings), Database.from_settings(settings)
    one = ChangeFeed(ChangeStampRepository(one_db), interval_s=0)
    other = ChangeFeed(ChangeStampRepository(other_db), interval_s=0)
    forgotten: list[str] = []
    one.listen(forgotten.append)
    try:
        assert await one.poll() == []  # the first read learns where the stamps stand
        await one.publish("acme")  # a new tenant's first stamp, this replica's own
        assert await one.poll() == []
        await one.publish("acme")  # again, after the version this replica saw
        assert await one.poll() == []

        await other.publish("acme")  # another replica's change...
        await one.publish("acme")  # ...hidden behind this replica's
        assert await one.poll() == ["acme"]
        await other.publish("globex")
        assert await one.poll() == ["globex"]
        assert forgotten == ["acme", "globex"]
    finally:
        await one_db.close()
        await other_db.close()
