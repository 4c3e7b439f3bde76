"""Run ids and `recording`: ids that list in start order and never repeat (their random half:
`app.kit.crypto.random_hex`, tests/test_crypto.py), and a record queued once however the run
inside is left."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

import pytest

from app.errors import NotFoundError
from app.limits.local import WRITTEN, Release, once
from app.repositories.database import utc_now
from app.services.invocations import PreparedRun
from app.services.runs import RunRecording, new_run_id, recording


def test_run_ids_are_32_hex_digits_in_start_order_and_never_repeat() -> None:
    ids = [new_run_id() for _ in range(5_000)]  # more than one 4 KB block of randomness
    assert all(len(run_id) == 32 and int(run_id, 16) >= 0 for run_id in ids)
    assert len(set(ids)) == len(ids)
    assert len({run_id[16:] for run_id in ids}) == len(ids)  # the random half alone
    assert [run_id[:16] for run_id in ids] == sorted(run_id[:16] for run_id in ids)


def test_now_is_to_the_millisecond_bson_keeps() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    now = utc_now()
    assert now.tzinfo is UTC and now.microsecond % 1000 == 0 and now >= before


class _Recorder:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def record(self, document: dict[str, Any], *, tenant_id: str) -> None:
        self.records.append({**document, "tenant": tenant_id})


def test_a_run_left_normally_keeps_the_status_it_set() -> None:
    recorder, counted = _Recorder(), list[RunRecording]()
    with recording(recorder, tenant_id="t", kind="invoke", done=counted.append) as run:  # type: ignore[arg-type]
        run.status = "completed"
    [record] = recorder.records
    assert (record["stop_reason"], record["tenant"], record["kind"]) == ("completed", "t", "invoke")
    assert counted == [run] and record["run_id"] == run.run_id


def test_a_run_left_by_an_app_error_is_an_error_with_its_message() -> None:
    recorder = _Recorder()
    with pytest.raises(NotFoundError), recording(recorder, tenant_id="t", kind="invoke"):  # type: ignore[arg-type]
        raise NotFoundError("tool 'x' does not exist")
    [record] = recorder.records
    assert (record["stop_reason"], record["error"]) == ("error", "tool 'x' does not exist")


def test_a_run_left_by_another_exception_is_an_error() -> None:
    recorder = _Recorder()
    with pytest.raises(KeyError), recording(recorder, tenant_id="t", kind="chat", run_id="r1"):  # type: ignore[arg-type]
        raise KeyError("x")
    [record] = recorder.records
    assert (record["run_id"], record["stop_reason"], record["error"]) == ("r1", "error", None)


def test_a_cancelled_run_is_recorded_as_cancelled() -> None:
    recorder = _Recorder()
    with (
        pytest.raises(asyncio.CancelledError),
        recording(recorder, tenant_id="t", kind="invoke"),  # type: ignore[arg-type]
    ):
        raise asyncio.CancelledError
    assert [r["stop_reason"] for r in recorder.records] == ["cancelled"]


def test_a_prepared_run_dropped_unrun_frees_its_slot_once() -> None:
    """A streamed invoke whose client left before its run started drops its `PreparedRun`:
    collecting it frees the run slot; a run that freed it already frees nothing twice."""
    freed: list[str] = []

    def slot(name: str) -> Release:
        def release() -> Awaitable[None]:
            freed.append(name)
            return WRITTEN

        return once(release)

    def prepared(release: Release) -> PreparedRun:
        return PreparedRun(
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            {},
            tenant_id="t",
            kind="invoke",
            release=release,
        )

    unrun = prepared(slot("unrun"))
    del unrun
    gc.collect()
    assert freed == ["unrun"]
    ran = prepared(slot("ran"))
    ran._release()  # as `run` does before it answers
    del ran
    gc.collect()
    assert freed == ["unrun", "ran"]
