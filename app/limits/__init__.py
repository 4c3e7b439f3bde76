"""Per-tenant limits: rates, concurrent runs and object caps.

`local.py` holds the interface services see (`Limits`, `Fence`, `TooManyRequestsError`) and the
in-process implementation (the embedded store's, `LIMITS=local`). `shared.py` counts in MongoDB,
exact across replicas (`LIMITS=shared`), with `fence.py` (object caps), `writes.py` (the write
rate) and `shares.py` (what a replica admits alone while the database does not answer). The
database is reached only through `repository.py`, which raises the project's own
`DatabaseError`/`DatabaseUnavailable`, never a driver error.
"""
