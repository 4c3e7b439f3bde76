"""The clients of toolgate's own OAuth server (app/services/oauth_server.py).

- **Registered** by RFC 7591 (`/oauth/register`, the SDK's handler): stored, and forgotten after
  a day unless a consent bound the client to a client token (registration needs no credential,
  so what nobody used does not pile up).
- **Client ID Metadata Documents**: a client id that is an https URL names a JSON document the
  client publishes about itself (`client_id` equal to the URL, its `redirect_uris`, no secret).
  It is fetched under the operator's outbound policy (a URL inside the network is refused unless
  OUTBOUND_ALLOW opens it), bounded in time and size like an issuer's documents, and kept for
  five minutes, a refusal too (a flood of made-up URLs costs one fetch each, at most every five
  minutes).
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from mcp.shared.auth import OAuthClientInformationFull
from pydantic import ValidationError

from app.kit.cache import LoadingCache
from app.repositories.database import utc_now
from app.repositories.oauth import OAuthRepository
from app.services.jwks import IssuerDocuments, IssuerFetchError

UNBOUND_CLIENT_TTL_S = 86_400
CLIENT_DOCUMENT_TTL_S = 300.0
MAX_DOCUMENTS = 10_000


class OAuthClients:
    def __init__(self, grants: OAuthRepository, documents: IssuerDocuments) -> None:
        self._grants = grants
        self._documents = documents
        self._by_url: LoadingCache[str, OAuthClientInformationFull | None] = LoadingCache(
            self._described,
            ttl_s=CLIENT_DOCUMENT_TTL_S,
            max_entries=MAX_DOCUMENTS,
            name="client id metadata documents",
        )

    async def get(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id.startswith("https://"):
            return await self._by_url.get(client_id)
        found = await self._grants.find_client(client_id, utc_now())
        return None if found is None else OAuthClientInformationFull.model_validate(found["info"])

    async def register(self, client_info: OAuthClientInformationFull) -> None:
        now = utc_now()
        await self._grants.insert_client(
            {
                "client_id": client_info.client_id,
                "info": client_info.model_dump(mode="json", exclude_none=True),
                "registered_at": now,
                "expires_at": now + timedelta(seconds=UNBOUND_CLIENT_TTL_S),
            }
        )

    async def keep(self, client_id: str) -> None:
        """A consent bound the client: a registered one is kept from now on."""
        if not client_id.startswith("https://"):
            await self._grants.keep_client(client_id)

    async def _described(self, url: str) -> OAuthClientInformationFull | None:
        """The client whose id is `url`, as its document describes it (a public client: no
        secret), or None when it cannot be had or does not name itself."""
        parts = urlsplit(url)
        if parts.path in ("", "/") or parts.fragment:
            return None
        try:
            document = await self._documents.fetch_public(url)
        except IssuerFetchError:
            return None
        if document.get("client_id") != url or "client_secret" in document:
            return None
        method = document.get("token_endpoint_auth_method", "none")
        if method != "none" or not document.get("redirect_uris"):
            return None
        try:
            return OAuthClientInformationFull.model_validate(
                {**document, "token_endpoint_auth_method": "none"}
            )
        except ValidationError:
            return None

    async def aclose(self) -> None:
        await self._by_url.aclose()
