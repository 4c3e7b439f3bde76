"""The garbage collector in a process that serves the app.

The objects start-up leaves, which live as long as the process (modules, the SDKs' types, the
validators, the OpenAPI document), are frozen once start-up is done (`gc.freeze`): later
collections walk only what was built since. The young generation is collected every
YOUNG_THRESHOLD net allocations instead of CPython's 700.
Speed: docs/performance.md, "Sixth round".

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
