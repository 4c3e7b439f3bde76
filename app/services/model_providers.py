"""Each tenant's own model providers (`/model-providers`) and the choice of a chat's model.

A provider's key is one of the tenant's secrets, opened only to build its client; its base URL
passes the tenant's outbound policy when written and at every connection (the operator's
endpoint is exempt, as it is the operator's). Clients are built once per provider version, key
and policy, and closed a while after they are replaced.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from app.chat.apis import build_model_api
from app.chat.http_model_client import MAX_ANSWER_BYTES, HTTPModelClient
from app.chat.model import ModelClient
from app.chat.strict_tools import StrictToolsAPI
from app.errors import ConflictError, NotFoundError, UnprocessableError, field_error
from app.http.netguard import OutboundPolicy, guarded_connector, url_problems
from app.http.wire import HeaderError, header_problem
from app.kit.cache import LoadingCache
from app.limits.local import Fence, local_fence
from app.repositories.model_providers import ModelProviderRepository
from app.schemas.model_providers import ModelProvider, ModelProviderPut
from app.services.outbound import TenantOutbound
from app.services.secrets import SecretService

MAX_CLIENTS = 256  # provider clients open at once; the least used is closed first
CLOSE_DELAY_S = 60.0  # a replaced client is closed once the calls it carries have ended
CONNECT_LOOKUP_S = 10.0  # a provider's host name lookup, at each new connection
_SHOWN = (
    "name", "api", "base_url", "api_key_secret", "default_model", "allowed_models", "default",
    "timeout_s", "max_retries", "max_tokens", "previous_response_id", "tool_search",
    "strict_tools", "created_at", "updated_at",
)  # fmt: skip


MAX_CACHED_TENANTS = 100_000  # tenants whose providers are cached


@dataclass(frozen=True)
class ChosenModel:
    """Where a chat's model calls go: a tenant provider's client, or the operator's (None)."""

    client: ModelClient | None
    provider: str | None
    model: str
    api: str | None = None  # the provider's model API; None: the operator's (MODEL_API)
    tool_search: str | None = None  # the provider's `tool_search`; None: MODEL_TOOL_SEARCH


class ModelProviderService:
    def __init__(
        self,
        *,
        providers: ModelProviderRepository,
        secrets: SecretService,
        outbound: TenantOutbound,
        operator_model: str,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_providers: int = 20,
        fence: Fence | None = None,
        ttl_s: float = 0.0,
        stale_if_error_s: float = 0.0,
    ) -> None:
        self._providers = providers
        # Every chat reads its tenant's providers: from a cache (stale-if-error like the tool
        # catalog), so a database outage does not turn every chat into a 503.
        self._snapshots: LoadingCache[str, list[dict[str, Any]]] = LoadingCache(
            self._read,
            ttl_s=ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED_TENANTS,
            name="model providers",
        )
        self._secrets = secrets
        self._outbound = outbound
        self._operator_model = operator_model
        self._max_answer_bytes = max_answer_bytes
        self._max = max_providers
        self._fence = fence or local_fence()
        self._clients: OrderedDict[tuple[Any, ...], HTTPModelClient] = OrderedDict()
        self._retiring: set[asyncio.Task[None]] = set()

    async def put(
        self, name: str, body: ModelProviderPut, *, tenant_id: str
    ) -> tuple[ModelProvider, bool]:
        """Create or replace a provider: 422 for a URL the tenant's policy refuses or a secret
        it does not have, 409 past the cap."""
        problems = url_problems(body.base_url, await self._outbound.policy(tenant_id))
        errors = [field_error("$.base_url", problem) for problem in problems]
        found = await self._secrets.resolve({body.api_key_secret}, tenant_id=tenant_id)
        key = found.get(body.api_key_secret)
        if key is None:
            problem = f"the tenant has no secret named '{body.api_key_secret}' (PUT /secrets/...)"
            errors.append(field_error("$.api_key_secret", problem))
        elif header_problem("Authorization", key) is not None:
            errors.append(field_error("$.api_key_secret", _unsendable(body.api_key_secret)))
        if errors:
            raise UnprocessableError("The model provider cannot be used as given.", errors=errors)
        document = body.model_dump()
        allowed = body.allowed_models or []
        document["allowed_models"] = list(dict.fromkeys([body.default_model, *allowed]))
        async with self._fence(tenant_id, "model providers"):  # the cap holds exactly
            existing = await self._providers.get(name, tenant_id=tenant_id)
            if existing is None and await self._providers.count(tenant_id=tenant_id) >= self._max:
                raise ConflictError(
                    f"the tenant already has {self._max} model providers; delete one first"
                )
            stored, created = await self._providers.put(name, document, tenant_id=tenant_id)
            if body.default:
                await self._providers.clear_default(keep=name, tenant_id=tenant_id)
        self._snapshots.invalidate(tenant_id)
        return _shown(stored), created

    async def _read(self, tenant_id: str) -> list[dict[str, Any]]:
        return await self._providers.all(tenant_id=tenant_id)

    async def all(self, *, tenant_id: str) -> list[ModelProvider]:
        return [_shown(doc) for doc in await self._providers.all(tenant_id=tenant_id)]

    async def get(self, name: str, *, tenant_id: str) -> ModelProvider:
        doc = await self._providers.get(name, tenant_id=tenant_id)
        if doc is None:
            raise NotFoundError(f"no model provider named '{name}'")
        return _shown(doc)

    async def delete(self, name: str, *, tenant_id: str) -> None:
        deleted = await self._providers.delete(name, tenant_id=tenant_id)
        self._snapshots.invalidate(tenant_id)
        if not deleted:
            raise NotFoundError(f"no model provider named '{name}'")

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._providers.drop_all(tenant_id=tenant_id)
        self._snapshots.invalidate(tenant_id)

    async def choose(
        self, provider: str | None, model: str | None, *, tenant_id: str
    ) -> ChosenModel:
        """The chat's provider (the named one, else the tenant's default, else the operator's)
        and model (the named one, if the provider allows it, else its default); 422 otherwise."""
        docs = await self._snapshots.get(tenant_id)
        if provider is None:
            doc = next((d for d in docs if d.get("default")), None)
        else:
            doc = next((d for d in docs if d["name"] == provider), None)
            if doc is None:
                problem = f"the tenant has no model provider named '{provider}'"
                raise UnprocessableError(
                    "Unknown model provider.", errors=[field_error("$.provider", problem)]
                )
        if doc is None:
            return ChosenModel(None, None, model or self._operator_model)
        chosen = model or doc["default_model"]
        if chosen not in doc["allowed_models"]:
            problem = (
                f"model provider '{doc['name']}' allows only: {', '.join(doc['allowed_models'])}"
            )
            raise UnprocessableError(
                "The model is not allowed.", errors=[field_error("$.model", problem)]
            )
        client = await self._client(doc, tenant_id=tenant_id)
        return ChosenModel(client, doc["name"], chosen, doc.get("api"), doc.get("tool_search"))

    async def model_names(self, *, tenant_id: str) -> list[tuple[str | None, str, str]]:
        """Every `(provider, model, name)` a chat may name as one string (OpenAI's `model`):
        the default's models bare (the tenant's default provider's, else the operator's model),
        and every provider's as `provider/model`."""
        docs = await self._snapshots.get(tenant_id)
        default = next((d for d in docs if d.get("default")), None)
        named: list[tuple[str | None, str, str]]
        if default is None:
            named = [(None, self._operator_model, self._operator_model)]
        else:
            named = [(default["name"], model, model) for model in default["allowed_models"]]
        for doc in docs:
            named += [(doc["name"], m, f"{doc['name']}/{m}") for m in doc["allowed_models"]]
        return named

    async def split_model_name(self, name: str, *, tenant_id: str) -> tuple[str | None, str | None]:
        """One string naming a model, as `(provider, model)` for `choose`: `provider/model`, a
        provider's name (its default model), `default` (the default's), or a bare model name
        (of the default)."""
        if name == "default":
            return None, None
        providers = {doc["name"] for doc in await self._snapshots.get(tenant_id)}
        prefix, slash, rest = name.partition("/")
        if slash and prefix in providers:
            return prefix, rest or None
        if name in providers:
            return name, None
        return None, name

    async def _client(self, doc: dict[str, Any], *, tenant_id: str) -> HTTPModelClient:
        secret = doc["api_key_secret"]
        key = (await self._secrets.resolve({secret}, tenant_id=tenant_id)).get(secret)
        if key is None:
            problem = f"model provider '{doc['name']}' reads secret '{secret}', which is missing"
            raise UnprocessableError(
                "The model provider's key is missing.", errors=[field_error("$.provider", problem)]
            )
        policy = await self._outbound.policy(tenant_id)
        digest = hashlib.sha256(key.encode()).hexdigest()
        cache_key = (tenant_id, doc["name"], doc["updated_at"], digest, policy.allow)
        client = self._clients.get(cache_key)
        if client is not None:
            self._clients.move_to_end(cache_key)
            return client
        try:
            client = self._new_client(doc, key, policy)
        except HeaderError:  # the secret changed since the provider was written
            raise UnprocessableError(
                "The model provider's key cannot be sent.",
                errors=[field_error("$.provider", f"{doc['name']}: {_unsendable(secret)}")],
            ) from None
        except ValueError as exc:  # a URL that passed an older version's checks
            raise UnprocessableError(
                "The model provider's base URL is not usable.",
                errors=[field_error("$.provider", f"{doc['name']}: {exc}")],
            ) from None
        self._clients[cache_key] = client
        while len(self._clients) > MAX_CLIENTS:
            self._retire(self._clients.popitem(last=False)[1])
        return client

    def _new_client(self, doc: dict[str, Any], key: str, policy: OutboundPolicy) -> HTTPModelClient:
        secret = doc["api_key_secret"]
        api = build_model_api(
            doc["api"], max_tokens=doc["max_tokens"], chain=bool(doc.get("previous_response_id"))
        )
        if doc.get("strict_tools") and doc["api"] != "anthropic_messages":
            api = StrictToolsAPI(api)
        return HTTPModelClient(
            base_url=doc["base_url"],
            api_key=key,
            timeout_s=doc["timeout_s"],
            max_retries=doc["max_retries"],
            api=api,
            connect=guarded_connector(policy, lookup_s=CONNECT_LOOKUP_S),
            ssl_context=policy.ssl_context(),
            credentials=f"secret '{secret}' of model provider '{doc['name']}'",
            max_answer_bytes=self._max_answer_bytes,
        )

    def _retire(self, client: HTTPModelClient) -> None:
        async def close_later() -> None:
            try:
                await asyncio.sleep(CLOSE_DELAY_S)
            finally:  # also when cancelled at shutdown
                await client.close()

        task = asyncio.create_task(close_later())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def aclose(self) -> None:
        await self._snapshots.aclose()
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        clients = list(self._clients.values())
        self._clients.clear()
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


def _unsendable(secret: str) -> str:
    return (
        f"the secret '{secret}' holds a character a header cannot carry (CR, LF, NUL or another "
        "control character): it cannot be sent as a model key"
    )


def _shown(doc: dict[str, Any]) -> ModelProvider:
    return ModelProvider.model_validate({key: doc[key] for key in _SHOWN if key in doc})
