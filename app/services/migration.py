"""`python -m app migrate`: an installation brought to the current layout in one pass.

The service also does this by itself, tenant by tenant (app/services/seeding.py: at a tenant's
first use and in the background sweep); the command does it now, whole, and reports. It is
idempotent and resumable (stop it anywhere and run it again), and safe while replicas serve:

1. the shared collections' indexes;
2. every tenant whose stamp is not current is reconciled: the collections of the layout before
   shared collections moved into the shared ones (or its tools from another TOOL_COLLECTIONS
   placement), its tool index, the function dictionary's new tools;
3. collections of the layout before that are still there are moved too (a replica of the
   older version wrote them after its tenant was migrated, during a rolling upgrade), and those
   of tenants that no longer exist are dropped.

What could not be moved (a tool whose function name a newer tool of the tenant took) stays in
its old collection and is listed; the command then exits 1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.repositories.database import Database
from app.repositories.migration import LayoutMigration
from app.repositories.tenants import TenantStore
from app.services.seeding import Reconciler

logger = logging.getLogger(__name__)
PAGE = 200


@dataclass
class MigrationReport:
    reconciled: int = 0  # tenants brought to the current stamp
    moved: int = 0  # records moved from collections of the layout before
    dropped: int = 0  # collections of tenants that no longer exist
    pending_indexes: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # not moved, and why

    def lines(self) -> list[str]:
        found = [
            f"{self.reconciled} tenant(s) reconciled; {self.moved} record(s) moved from the "
            f"layout before; {self.dropped} collection(s) of deleted tenants dropped",
        ]
        if self.pending_indexes:
            found.append(f"indexes not created yet: {', '.join(self.pending_indexes)}")
        found.extend(f"  - not moved: {reason}" for reason in self.kept)
        return found


async def migrate_installation(
    database: Database,
    tenants: TenantStore,
    reconciler: Reconciler,
    migration: LayoutMigration,
) -> MigrationReport:
    """See the module's docstring."""
    report = MigrationReport(pending_indexes=await database.ensure_indexes())
    after = ""
    while stale := await tenants.stale_after(reconciler.stamp, after, limit=PAGE):
        for tenant_id, stamp in stale:
            report.moved += await reconciler.reconcile(tenant_id, stamp)
            report.reconciled += 1
        after = stale[-1][0]
    for tenant_id, resources in sorted((await migration.legacy_collections()).items()):
        exists, _ = await tenants.stamp_of(tenant_id=tenant_id)
        for resource in resources:
            if not exists:
                await migration.drop_legacy(resource, tenant_id=tenant_id)
                report.dropped += 1
                continue
            moved = await migration.move_legacy(resource, tenant_id=tenant_id)
            report.moved += moved.moved
            report.kept.extend(f"tenant {tenant_id}: {reason}" for reason in moved.kept)
    return report
