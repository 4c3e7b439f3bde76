"""Builders of the identity parts: tenants' identity providers (their JWTs checked), toolgate's
own OAuth server, and the trusted-proxy rule the public URLs are built with."""

from __future__ import annotations

from contextlib import AsyncExitStack

from app.config import Settings
from app.http.forwarded import TrustedProxies
from app.limits.local import RateLimiter
from app.repositories.database import Database
from app.repositories.identity import IdentityRepository
from app.repositories.oauth import OAuthRepository
from app.services.changes import Publish
from app.services.client_tokens import ClientTokenService
from app.services.identity import IdentityService
from app.services.jwks import IssuerDocuments, JwksCache
from app.services.oauth_server import Lifetimes, OAuthServer
from app.services.outbound import TenantOutbound


def build_identity(
    settings: Settings,
    database: Database,
    outbound: TenantOutbound,
    stack: AsyncExitStack,
    publish: Publish,
) -> IdentityService:
    documents = IssuerDocuments(
        outbound=outbound, timeout_s=settings.jwks_timeout_s, max_bytes=settings.jwks_max_bytes
    )
    keys = JwksCache(
        documents,
        ttl_s=settings.jwks_cache_ttl_s,
        refresh_interval_s=settings.jwks_refresh_interval_s,
    )
    identity = IdentityService(
        providers=IdentityRepository(database),
        documents=documents,
        keys=keys,
        leeway_s=settings.jwt_leeway_s,
        cache_ttl_s=settings.auth_cache_ttl_s,
        stale_if_error_s=settings.cache_stale_if_error_s,
        publish=publish,
    )
    stack.push_async_callback(identity.aclose)
    return identity


def build_proxies(settings: Settings) -> TrustedProxies:
    return TrustedProxies(settings.trusted_proxies)


def build_oauth_server(
    settings: Settings,
    database: Database,
    client_tokens: ClientTokenService,
    identity: IdentityService,
    stack: AsyncExitStack,
) -> OAuthServer:
    server = OAuthServer(
        grants=OAuthRepository(database),
        client_tokens=client_tokens,
        documents=identity.documents,
        key_secret=settings.effective_api_key_secret,
        lifetimes=Lifetimes(
            access_s=settings.oauth_access_token_ttl_s,
            refresh_s=settings.oauth_refresh_token_ttl_s,
            link_s=settings.connect_link_ttl_s,
        ),
        cache_ttl_s=settings.auth_cache_ttl_s,
        rate=RateLimiter(
            settings.oauth_rate_limit_per_minute,
            what="OAuth requests",
            per="this client address",
        ),
    )
    stack.push_async_callback(server.aclose)
    return server
