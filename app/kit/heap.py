"""The garbage collector in a process that serves the app.

Start-up leaves about 160,000 tracked objects that live as long as the process (modules, the
SDKs' types, the validators, the OpenAPI document). CPython's full collection walks all of them:
120-190 ms on this project's 2-core machine, with the GIL held, so every request in flight
stalls that long, every few thousand requests. Freezing them once start-up is done
(`gc.freeze`) leaves later collections only what was built since: a full collection after 40,000
requests took 2-6 ms. The young generation is collected every YOUNG_THRESHOLD net allocations
instead of CPython's 700: a request's short-lived objects are freed by reference counting, and
the collector ran 480 times in 40,000 requests for little (4.5 us a request in all; 1 us at
10,000).

Only a process's entry point turns this on (`create_app(tune_gc=True)` in `app/asgi.py`): it
changes interpreter-wide state, which an app built inside another program (a test, an
embedding host) must leave alone.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger("app")

YOUNG_THRESHOLD = 10_000


@contextmanager
def settled_heap() -> Iterator[None]:
    """From start-up's end to shutdown: what start-up built is frozen, and the young generation
    is collected less often. The threshold is put back on exit; the frozen objects stay frozen
    (the process is ending, and `gc.unfreeze` would also release what others froze)."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    logger.debug("froze %d objects built at start-up", gc.get_freeze_count())
    try:
        yield
    finally:
        gc.set_threshold(*before)
