"""Small shared pieces with no knowledge of tools, tenants or HTTP: the per-process cache
(`cache.py`), sealing at rest and random ids (`crypto.py`), hidden values and the escapes that
disguise them (`hidden.py`, `unescape.py`), the garbage collector's settings (`heap.py`)."""
