"""Model answers too large to parse on the event loop, parsed in a worker process.

A model answer is JSON the model's endpoint wrote (a tenant's own provider among them), read
whole into memory; the GIL a parse holds stops every request of the process, so a thread does
not help (figures: docs/performance.md, "Why the code is shaped as it is").
An answer past `OFF_LOOP_BYTES` is given to one worker process (started on first use, `spawn`:
nothing of the service's state is copied into it), which runs the API's reader (`ModelAPI.reader`,
a pure function) and sends back only what the reader keeps: the turn, a few strings, never the
parsed document. A parse past `DEADLINE_S` ends the worker (the next answer starts another).
Answers past MODEL_ANSWER_MAX_BYTES are never read this far (`app/http/wire.py`'s cap).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.pool import Pool
from typing import Any

logger = logging.getLogger(__name__)

OFF_LOOP_BYTES = 256 * 1024
DEADLINE_S = 10.0


class ReaderFailedError(Exception):
    """The reader refused the answer (`kind`: its exception's type), in the worker."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _read(reader: Callable[[bytes], Any], raw: bytes) -> tuple[bool, Any]:
    """In the worker: (True, what the reader returned) or (False, the type of its error)."""
    try:
        return True, reader(raw)
    except Exception as exc:
        return False, type(exc).__name__


class AnswerWorker:
    """One worker process for the whole service process, started on first use."""

    def __init__(self) -> None:
        self._pool: Pool | None = None
        self._lock = threading.Lock()

    async def read(self, reader: Callable[[bytes], Any], raw: bytes) -> Any:
        """`reader(raw)` in the worker, within DEADLINE_S (TimeoutError past it);
        `ReaderFailedError` when the reader raised."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[bool, Any]] = loop.create_future()

        def settle(outcome: tuple[bool, Any] | BaseException) -> None:
            if done.done():
                return
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

        pool = self._started()
        pool.apply_async(
            _read,
            (reader, raw),
            callback=lambda outcome: loop.call_soon_threadsafe(settle, outcome),
            error_callback=lambda error: loop.call_soon_threadsafe(settle, error),
        )
        try:
            async with asyncio.timeout(DEADLINE_S):
                ok, value = await done
        except TimeoutError:
            logger.error("a model answer of %d bytes was not parsed in %g s", len(raw), DEADLINE_S)
            await asyncio.to_thread(self._stop, pool)
            raise
        if not ok:
            raise ReaderFailedError(value)
        return value

    def _started(self) -> Pool:
        with self._lock:
            if self._pool is None:
                self._pool = multiprocessing.get_context("spawn").Pool(processes=1)
            return self._pool

    def _stop(self, pool: Pool) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.terminate()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()


_WORKER = AnswerWorker()


def answer_worker() -> AnswerWorker:
    """The process's worker (each service process, each uvicorn worker, has its own)."""
    return _WORKER
