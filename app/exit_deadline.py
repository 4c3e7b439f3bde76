"""The process ends in time after SIGTERM, whatever hangs.

uvicorn drains connections for at most its graceful-shutdown timeout (CHAT_DEADLINE_S + 5 s),
then runs the lifespan's shutdown: clients closed, run records flushed once. Something can still
hang past that: a database call of a wedged driver (seen after a long outage: SIGTERM did not
stop the process), a tool function blocking its thread (the interpreter joins worker threads at
exit). So when the shutdown starts, a timer thread is armed: past SHUTDOWN_S it logs an ERROR
and ends the process at once (`os._exit`). Nothing is lost to it: every run record is in the
journal before its answer was sent (app/repositories/run_journal.py), and the next start, or a
replica sharing the journal's volume, replays it.

The Deployment's `terminationGracePeriodSeconds` (135) covers the preStop delay (5 s), the
drain (125 s at the defaults) and this (5 s).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

SHUTDOWN_S = 5.0
EXIT_CODE = 70  # EX_SOFTWARE: the shutdown did not finish by itself


def arm(seconds: float = SHUTDOWN_S, *, end: Callable[[int], None] = os._exit) -> threading.Timer:
    """Start the timer (a daemon thread: a shutdown that finishes in time ends before it)."""

    def expire() -> None:
        logger.error(
            "shutdown did not finish within %g s (a database call or a tool's thread hangs): "
            "ending the process now; run records wait in the journal",
            seconds,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        end(EXIT_CODE)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.name = "exit deadline"
    timer.start()
    return timer
