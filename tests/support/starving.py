"""Emulated CPU starvation of a process (a pod throttled by its CPU limit, a noisy node): it
is stopped (SIGSTOP) most of the time and let run (SIGCONT) for short slices, so its timers
fire late and its timeouts expire in the middle of whatever it was doing. The stops and slices
are real time by design: that is what starvation is."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def starved(pid: int, *, stopped_s: float = 0.2, running_s: float = 0.05) -> Iterator[None]:
    """While inside: `pid` runs `running_s` out of every `stopped_s + running_s` seconds."""
    done = threading.Event()

    def cycle() -> None:
        while not done.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            done.wait(stopped_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            time.sleep(running_s)

    thread = threading.Thread(target=cycle, name="starving", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
