"""Each tenant's outbound policy: the operator's (OUTBOUND_ALLOW, OUTBOUND_PORTS) plus the
tenant's own allow list, which only the admin sets (`PUT /tenants/{tenant_id}/outbound`).

A tenant with a list of its own gets its own HTTP client for external tools. Pooled keep-alive
connections are checked only when they are opened, so one client shared by every tenant would
let a connection that tenant A's list allowed carry a call of tenant B, whose list does not.
MCP sessions open their own connections each time, with the tenant's policy.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from app.cache import LoadingCache
from app.errors import NotFoundError, UnprocessableError, field_error
from app.repositories.tenants import TenantStore
from app.services.changes import Publish, unpublished
from app.tools.netguard import OutboundPolicy, allow_entry_problem, forced_entry_problem
from app.tools.outbound_client import OutboundClient

MAX_CACHED_TENANTS = 100_000
MAX_CLIENTS = 256  # distinct allow lists with a client open; the least used is closed first
CLOSE_DELAY_S = 60.0  # a retired client is closed once the calls it carries have ended

Allow = tuple[str, ...]


class TenantOutbound:
    def __init__(
        self,
        *,
        tenants: TenantStore,
        base: OutboundPolicy,
        client_for: Callable[[OutboundPolicy], OutboundClient],
        ttl_s: float,
        stale_if_error_s: float = 0.0,
        publish: Publish = unpublished,
    ) -> None:
        self._tenants = tenants
        self._publish = publish
        self.base = base
        self.client_for = client_for  # a new client under a policy (the caller closes it)
        self._lists: LoadingCache[str, Allow] = LoadingCache(
            self._read,
            ttl_s=ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED_TENANTS,
            name="outbound allow lists",
        )
        self._policies: dict[Allow, OutboundPolicy] = {}
        self._clients: OrderedDict[Allow, OutboundClient] = OrderedDict()
        self._retiring: set[asyncio.Task[None]] = set()

    async def _read(self, tenant_id: str) -> Allow:
        return tuple(await self._tenants.outbound_allow(tenant_id=tenant_id) or ())

    async def policy(self, tenant_id: str) -> OutboundPolicy:
        """What this tenant's tools and MCP servers may reach."""
        return self._policy(await self._lists.get(tenant_id))

    def _policy(self, allow: Allow) -> OutboundPolicy:
        if not allow:
            return self.base
        policy = self._policies.get(allow)
        if policy is None:
            if len(self._policies) >= MAX_CLIENTS:
                self._policies.clear()
            policy = self._policies[allow] = self.base.extended(allow)
        return policy

    async def http_client(self, tenant_id: str) -> OutboundClient | None:
        """The tenant's own client for external tools, or None for the shared one."""
        allow = await self._lists.get(tenant_id)
        if not allow:
            return None
        client = self._clients.get(allow)
        if client is not None:
            self._clients.move_to_end(allow)
            return client
        client = self._clients[allow] = self.client_for(self._policy(allow))
        while len(self._clients) > MAX_CLIENTS:
            self._retire(self._clients.popitem(last=False)[1])
        return client

    def _retire(self, client: OutboundClient) -> None:
        async def close_later() -> None:
            try:
                await asyncio.sleep(CLOSE_DELAY_S)
            finally:  # also when cancelled at shutdown
                await client.aclose()

        task = asyncio.create_task(close_later())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def allow_list(self, tenant_id: str) -> list[str]:
        allow = await self._tenants.outbound_allow(tenant_id=tenant_id)
        if allow is None:
            raise NotFoundError(f"tenant '{tenant_id}' does not exist")
        return allow

    async def set_allow_list(
        self, tenant_id: str, allow: list[str], *, force: bool = False
    ) -> list[str]:
        """Replace the tenant's list; 422 naming every malformed entry, and every entry that
        opens everything, loopback or link-local unless `force`. Applies at once here and
        within CACHE_SYNC_INTERVAL_S on other replicas (docs/replicas.md)."""
        errors = [
            field_error(f"$.allow[{index}]", problem)
            for index, entry in enumerate(allow)
            if (problem := allow_entry_problem(entry))
        ]
        if errors:
            raise UnprocessableError("Some allow-list entries are malformed.", errors=errors)
        errors = [
            field_error(f"$.allow[{index}]", f'{problem}; send "force": true to open it anyway')
            for index, entry in enumerate(allow)
            if not force and (problem := forced_entry_problem(entry))
        ]
        if errors:
            raise UnprocessableError(
                "Some allow-list entries open the service's own host or metadata.", errors=errors
            )
        entries = list(dict.fromkeys(entry.strip() for entry in allow))
        if not await self._tenants.set_outbound_allow(entries, tenant_id=tenant_id):
            raise NotFoundError(f"tenant '{tenant_id}' does not exist")
        self._lists.invalidate(tenant_id)
        await self._publish(tenant_id)
        return entries

    def forget(self, tenant_id: str) -> None:
        """The tenant was deleted, or changed on another replica."""
        self._lists.invalidate(tenant_id)

    async def aclose(self) -> None:
        await self._lists.aclose()
        retiring = list(self._retiring)
        for task in retiring:
            task.cancel()
        await asyncio.gather(*retiring, return_exceptions=True)
        clients = list(self._clients.values())
        self._clients.clear()
        await asyncio.gather(*(client.aclose() for client in clients), return_exceptions=True)
