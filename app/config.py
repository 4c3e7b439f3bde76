"""Settings: the one place the environment is read."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.crypto import parse_key
from app.forwarded import parse_proxies
from app.outbound import DEFAULT_BLOCKED_PORTS, DEFAULT_PORTS, parse_ports
from app.wire import header_problem

# Documented development fall-backs (docs/settings.md, .env.example). Never accepted in production.
DEV_ADMIN_API_KEY = "dev-admin-key"
DEV_API_KEY_SECRET = "dev-api-key-secret-not-for-production"
# 32 bytes of base64 (the SHA-256 of "toolgate-dev-secrets-key"): readable by anyone, dev only.
DEV_SECRETS_KEY = "pCTfG1LZvvfHbnSft9kSHEzasn2h0jJZ4YR5IptCFIk="

_PLACEHOLDERS = frozenset(
    {
        "",
        "changeme",
        "change-me",
        "change_me",
        "secret",
        "password",
        "admin",
        "replace-me",
        "xxx",
        DEV_ADMIN_API_KEY,
        DEV_API_KEY_SECRET,
    }
)
MIN_SECRET_LENGTH = 32
MEMORY_URL = "memory://"
# Which dotenv file to read (default `.env` in the working directory); empty: none at all.
ENV_FILE_VARIABLE = "TOOLGATE_ENV_FILE"


ModelApiName = Literal["chat_completions", "responses", "anthropic_messages"]


def env_file() -> str | None:
    return os.environ.get(ENV_FILE_VARIABLE, ".env") or None


def _is_placeholder(value: SecretStr | None) -> bool:
    if value is None:
        return True
    raw = value.get_secret_value()
    return raw.strip().lower() in _PLACEHOLDERS or raw.lower().startswith("change")


class Settings(BaseSettings):
    """Every setting of the service; see .env.example for the documented list."""

    # hide_input_in_errors: a validation error must never print the secrets it was given.
    model_config = SettingsConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)

    def __init__(self, **values: Any) -> None:
        # The dotenv file (TOOLGATE_ENV_FILE, default .env) is chosen when settings are read,
        # not when this module is imported.
        values.setdefault("_env_file", env_file())
        super().__init__(**values)

    app_env: Literal["development", "production"] = "development"
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"
    access_log: bool = True
    metrics_token: SecretStr | None = None
    # In production /metrics is closed unless METRICS_TOKEN is set or this says it is public.
    metrics_public: bool = False

    mongodb_url: str | None = None
    mongodb_database: str = Field(default="toolgate", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    mongodb_timeout_ms: int = Field(default=2000, ge=100, le=60_000)
    # Where each tenant's tool collection lives (docs/replicas.md, "Sharding"): all in
    # MONGODB_DATABASE (`tools.<tenant>`), or each in a database of its own
    # (`<MONGODB_DATABASE>-<tenant>`), which a sharded cluster can place on any shard.
    tool_collections: Literal["one_database", "database_per_tenant"] = "one_database"
    # Liveness (/healthz) fails when no database call of this process has completed and its
    # driver has not checked the server for this long while a fresh client reaches the
    # database: the driver is wedged, and only a restart brings it back.
    database_wedged_s: float = Field(default=60.0, ge=1, le=3600)

    admin_api_key: SecretStr | None = None
    api_key_secret: SecretStr | None = None
    auth_cache_ttl_s: float = Field(default=2.0, ge=0, le=300)
    # How often each replica reads the change stamps other replicas write (tool edits, key
    # rotations, revocations), so their changes are seen here within about this (0: only TTLs).
    cache_sync_interval_s: float = Field(default=1.0, ge=0, le=60)
    # How long past their TTL cached keys and tools are still served while the database cannot
    # be read (app/cache.py); 0: never.
    cache_stale_if_error_s: float = Field(default=30.0, ge=0, le=3600)

    functions_module: str = "app.tools.builtin:registry"
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    # Idle keep-alive connections are closed after this. Longer than clients' and load
    # balancers' own idle limits (httpx 5 s, ALB and nginx 60 s), so the client always closes
    # first: a request sent on a connection the server is closing at that instant fails.
    keepalive_timeout_s: int = Field(default=75, ge=1, le=3600)
    body_timeout_s: float = Field(default=15.0, ge=0.1, le=600)
    # A connection whose request head (request line and headers) is not complete this long
    # after it opened, or after the first byte following a response, is closed (app/http_server).
    header_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # Open connections one process keeps, and one client address of them; past either, an idle
    # keep-alive connection is closed first, and only when none is idle is one more refused.
    max_connections: int = Field(default=1000, ge=1, le=1_000_000)
    max_connections_per_client: int = Field(default=256, ge=1, le=1_000_000)

    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_model: str = "gpt-4o-mini"
    model_client: Literal["http", "openai-sdk"] = "http"
    # The operator's model API (docs/chat.md, "Model APIs"); tenants' own providers name theirs.
    model_api: ModelApiName = "chat_completions"
    # Output tokens a turn may use: Anthropic's Messages API requires the field (the other APIs
    # leave it to the model's own limit).
    model_max_tokens: int = Field(default=4096, ge=1, le=1_000_000)
    # Responses API: send previous_response_id and only the items after it (the endpoint must
    # store responses), instead of the whole conversation each turn.
    model_responses_chain: bool = False
    model_timeout_s: float = Field(default=60.0, gt=0, le=600)
    # The largest model answer read (whole or streamed; every provider's): past it, a 502.
    model_answer_max_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    model_max_retries: int = Field(default=2, ge=0, le=2)
    chat_deadline_s: float = Field(default=120.0, gt=0, le=3600)
    chat_max_iterations: int = Field(default=10, ge=1, le=100)
    chat_stream_keepalive_s: float = Field(default=15.0, gt=0, le=300)
    run_retention_days: int = Field(default=30, ge=1, le=3650)
    run_store_messages: bool = False
    run_memory_limit: int = Field(default=1000, ge=10, le=1_000_000)
    # While the database is away, run records are held in memory up to these bounds, then only
    # in the journal on local disk (docs/operating.md, "Run records").
    run_queue_max_records: int = Field(default=100_000, ge=100, le=10_000_000)
    run_queue_max_bytes: int = Field(default=64 * 1_048_576, ge=1_048_576, le=16 * 1_073_741_824)
    # The journal: each record on local disk before its answer completes, until stored.
    # `auto`: on with MONGODB_URL (the in-memory store loses its records on restart anyway).
    run_journal: Literal["auto", "on", "off"] = "auto"
    run_journal_dir: str = "data/run-journal"
    run_journal_max_bytes: int = Field(default=1_073_741_824, ge=1_048_576, le=1_099_511_627_776)
    # fsync each record: survives a machine crash too, at the disk's sync cost per chat.
    run_journal_fsync: bool = False
    # Every this many seconds, claim and replay the segments of processes that stopped (a
    # replica killed on another host, when RUN_JOURNAL_DIR is a volume every replica mounts);
    # 0: only at start (docs/replicas.md, "Run records that outlive their pod").
    run_journal_adopt_s: float = Field(default=10.0, ge=0, le=3600)

    # Limits (docs/operating.md, "Limits"); 0 turns a rate limit or cap off.
    rate_limit_chat_per_minute: int = Field(default=60, ge=0, le=1_000_000)
    rate_limit_writes_per_minute: int = Field(default=120, ge=0, le=1_000_000)
    max_concurrent_chats_per_tenant: int = Field(default=8, ge=0, le=10_000)
    # Where the limits above are counted (docs/replicas.md): `shared` in MongoDB, exact across
    # replicas; `local` in each process; `auto` is shared with MONGODB_URL, else local.
    limits: Literal["auto", "local", "shared"] = "auto"
    # A replica that dies holding chat slots gives them back after this (shared limits).
    chat_lease_s: float = Field(default=15.0, ge=1, le=600)
    # Shared limits: a check waits this long for the database; past it the replica counts on its
    # own (at most its share of each limit) for LIMITS_FALLBACK_S without asking again.
    limits_check_timeout_s: float = Field(default=0.5, gt=0, le=30)
    limits_fallback_s: float = Field(default=5.0, ge=0, le=600)
    max_tools_per_tenant: int = Field(default=10_000, ge=1, le=100_000)
    max_categories_per_tenant: int = Field(default=100, ge=1, le=10_000)
    max_tool_schema_bytes: int = Field(default=32_768, ge=512, le=1_048_576)
    max_mcp_servers_per_tenant: int = Field(default=20, ge=1, le=1000)
    max_client_tokens_per_tenant: int = Field(default=1000, ge=1, le=100_000)
    chat_token_budget: int = Field(default=200_000, ge=0, le=100_000_000)

    tool_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # Tool search in chats (docs/chat.md, "Large catalogs"): past this many stored tools
    # offered (no `tool_ids`), a chat offers its `default` category's tools and `search_tools`
    # instead; 0 turns search off (a chat that would then pass the model's limit is a 422).
    tool_search_threshold: int = Field(default=64, ge=0, le=127)
    tool_search_results: int = Field(default=5, ge=1, le=20)
    # The operator's model: `native` searches in the API's own form where it has one (OpenAI
    # Responses `tool_search`, Anthropic's `tool_reference` results); `function`: search_tools.
    model_tool_search: Literal["function", "native"] = "function"
    # The web built-ins (docs/tools.md, "Web search and fetch"), off until configured: the
    # search service (SearXNG's base URL; Tavily's or Brave's API, default their public host)
    # and its key; whether web_fetch may fetch pages (through each tenant's outbound policy).
    web_search_backend: Literal["searxng", "tavily", "brave"] = "searxng"
    web_search_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    web_search_api_key: SecretStr | None = None
    web_search_timeout_s: float = Field(default=10.0, gt=0, le=120)
    web_fetch_enabled: bool = False
    web_fetch_max_chars: int = Field(default=20_000, ge=100, le=1_000_000)
    # Chats: whether tools marked destructive_hint and external DELETE tools wait for a person's
    # approval when their own `approval` is unset (docs/chat.md, "Approval before risky calls").
    risky_tool_approval: Literal["always", "never"] = "always"
    # How long the calls of an `approval_required` answer wait for the person's decision.
    approval_wait_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    tool_output_max_chars: int = Field(default=16_000, ge=100, le=1_000_000)
    tool_response_max_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    tool_threads: int = Field(default=32, ge=1, le=512)
    # How stale a tenant's tool snapshot may be while the change stamps cannot be read (with
    # them, a snapshot changes only when its tools do); 0 turns the cache off.
    tool_cache_ttl_s: float = Field(default=2.0, ge=0, le=300)
    # Snapshots unused this long are dropped, one by one; past the bound, the least recently
    # used one is (docs/performance.md, "Catalog size").
    tool_cache_idle_s: float = Field(default=900.0, ge=0, le=86_400)
    tool_cache_max_tenants: int = Field(default=10_000, ge=1, le=1_000_000)
    outbound_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    outbound_ports: str = DEFAULT_PORTS
    outbound_blocked_ports: str = DEFAULT_BLOCKED_PORTS
    # A CA bundle (PEM) external tools and tenant MCP servers are verified against, instead of
    # certifi's; the environment (SSL_CERT_FILE and friends) is never read.
    outbound_ca_bundle: str | None = None

    cors_allow_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Peers (addresses, CIDR ranges, or *) whose Forwarded / X-Forwarded-* headers say which
    # URL clients used (app/forwarded.py); from any other peer they are ignored.
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Tenants' identity providers (docs/security.md, "End users' own tokens"): how long their
    # signing keys are kept, how often a token naming an unknown key may fetch them again, the
    # bounds of one fetch, and the clock leeway of `exp` and `nbf`.
    jwks_cache_ttl_s: float = Field(default=600.0, ge=1, le=86_400)
    jwks_refresh_interval_s: float = Field(default=30.0, ge=0, le=3600)
    jwks_timeout_s: float = Field(default=5.0, gt=0, le=60)
    jwks_max_bytes: int = Field(default=262_144, ge=1024, le=4 * 1_048_576)
    jwt_leeway_s: float = Field(default=30.0, ge=0, le=300)
    # toolgate's own OAuth server for /mcp/{tenant_id} (docs/mcp.md, "Connect by URL"): token
    # and connect-link lifetimes, and the requests per minute one client address may make to
    # its routes that need no credential (registration, sign-in, consent; 0: no limit).
    oauth_access_token_ttl_s: int = Field(default=3600, ge=60, le=86_400)
    oauth_refresh_token_ttl_s: int = Field(default=30 * 86_400, ge=300, le=366 * 86_400)
    connect_link_ttl_s: int = Field(default=86_400, ge=60, le=30 * 86_400)
    oauth_rate_limit_per_minute: int = Field(default=120, ge=0, le=1_000_000)
    # /docs, /redoc and /openapi.json; unset: served in development, not in production.
    docs_enabled: bool | None = None

    secrets_key: SecretStr | None = None
    secrets_old_keys: SecretStr | None = None
    max_secrets_per_tenant: int = Field(default=100, ge=1, le=10_000)
    max_secret_bytes: int = Field(default=8192, ge=16, le=65_536)

    # POST /tools/import: reading and converting one document runs in a worker process within
    # this much of its CPU (422 when it does not), and within the wall-clock deadline, waiting
    # for a worker included; fetching one by URL, however slowly the server sends it, within
    # the fetch deadline.
    import_cpu_s: float = Field(default=30.0, gt=0, le=300)
    import_deadline_s: float = Field(default=120.0, gt=0, le=600)
    import_fetch_deadline_s: float = Field(default=15.0, gt=0, le=300)

    mcp_servers: SecretStr | None = None
    mcp_servers_file: str | None = None
    mcp_connect_timeout_s: float = Field(default=10.0, gt=0, le=300)
    mcp_tools_cache_ttl_s: float = Field(default=30.0, ge=0, le=3600)
    # `/mcp` `tools/list`: tools per page (MCP's `nextCursor` pagination).
    mcp_tools_page_size: int = Field(default=200, ge=1, le=10_000)
    # `/mcp` lists the `default` category's tools and `search_tools` instead of every tool
    # (a client token's `tool_search` says otherwise for its caller).
    mcp_tool_search: bool = False
    # An MCP server's listing is taken up to this many tools; past it the server is skipped
    # with that reason (its tools are never half offered).
    mcp_max_server_tools: int = Field(default=1000, ge=1, le=100_000)
    # The most bytes of one `tools/list` answer read from an MCP server (the SDK parses it on
    # the event loop: about 0.1 ms per KB); a server with more tools pages its list.
    mcp_max_list_bytes: int = Field(default=524_288, ge=4096, le=64 * 1_048_576)
    # A listing (a chat's tools, `/mcp` `tools/list`) waits this long for each server; one that
    # has not answered is skipped and marked down (retried after a backoff), its fetch going on
    # in the background up to MCP_CONNECT_TIMEOUT_S.
    mcp_list_deadline_s: float = Field(default=2.0, gt=0, le=300)
    # Pooled sessions (per tenant, per server): closed after this long unused; 0 turns pooling off.
    mcp_session_idle_s: float = Field(default=300.0, ge=0, le=86_400)
    mcp_pool_per_tenant: int = Field(default=8, ge=1, le=1000)
    mcp_pool_total: int = Field(default=64, ge=1, le=10_000)

    # OpenTelemetry traces (docs/operating.md, "Tracing"): the standard OTEL_* variables. On only
    # when an OTLP endpoint is set; the SDK reads its other variables (batch sizes, timeouts,
    # certificates, compression, OTEL_RESOURCE_ATTRIBUTES) from the process environment itself.
    otel_sdk_disabled: bool = False
    otel_traces_exporter: Literal["otlp", "none"] = "otlp"
    otel_exporter_otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    otel_exporter_otlp_traces_endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    otel_exporter_otlp_protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    otel_exporter_otlp_traces_protocol: Literal["http/protobuf", "grpc"] | None = None
    otel_exporter_otlp_headers: SecretStr | None = None
    otel_exporter_otlp_traces_headers: SecretStr | None = None
    otel_service_name: str | None = None
    otel_traces_sampler: Literal[
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    ] = "parentbased_always_on"
    otel_traces_sampler_arg: float | None = Field(default=None, ge=0, le=1)
    # Opt-in: model messages and tool arguments and results on the spans, redacted like run
    # records (the name the OpenTelemetry GenAI instrumentations read).
    otel_instrumentation_genai_capture_message_content: bool = False

    @field_validator("outbound_ports", "outbound_blocked_ports")
    @classmethod
    def _port_lists(cls, value: str) -> str:
        parse_ports(value)  # ValueError naming the bad part
        return value

    @field_validator("openai_api_key")
    @classmethod
    def _sendable_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and header_problem("Authorization", value.get_secret_value()):
            raise ValueError(
                "holds a character a header cannot carry (CR, LF, NUL or another control "
                "character): it cannot be sent as a model key"
            )
        return value

    @field_validator(
        "docs_enabled",
        "otel_exporter_otlp_endpoint",
        "otel_exporter_otlp_traces_endpoint",
        "otel_exporter_otlp_traces_protocol",
        "otel_service_name",
        "otel_traces_sampler_arg",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_entries(cls, value: list[str]) -> list[str]:
        parse_proxies(value)  # TrustedProxiesError (a ValueError) naming the bad entry
        return value

    @field_validator("outbound_allow", "cors_allow_origins", "trusted_proxies", mode="before")
    @classmethod
    def _split_allow_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @model_validator(mode="after")
    def _check_secrets_keys(self) -> Settings:
        self.secret_keys()  # raises SecretKeyError (a ValueError) naming the setting, not the key
        return self

    @model_validator(mode="after")
    def _reject_placeholder_secrets(self) -> Settings:
        if self.app_env != "production":
            return self
        problems = []
        if self.secrets_key is None or not self.secrets_key.get_secret_value():
            problems.append("SECRETS_KEY is missing (generate one: python -m app new-secrets-key)")
        elif self.secrets_key.get_secret_value() == DEV_SECRETS_KEY:
            problems.append("SECRETS_KEY is the documented development key")
        for name in ("admin_api_key", "api_key_secret"):
            value: SecretStr | None = getattr(self, name)
            if _is_placeholder(value):
                problems.append(f"{name.upper()} is missing or a placeholder")
            elif value is not None and len(value.get_secret_value()) < MIN_SECRET_LENGTH:
                problems.append(f"{name.upper()} must be at least {MIN_SECRET_LENGTH} characters")
        if problems:
            raise ValueError("refusing to start in production: " + "; ".join(problems))
        return self

    @model_validator(mode="after")
    def _sdk_speaks_chat_completions(self) -> Settings:
        if self.model_client == "openai-sdk" and self.model_api != "chat_completions":
            raise ValueError("MODEL_CLIENT=openai-sdk speaks MODEL_API=chat_completions only")
        return self

    @model_validator(mode="after")
    def _shared_needs_a_database(self) -> Settings:
        if self.limits == "shared" and self.uses_memory_store:
            raise ValueError(
                "LIMITS=shared needs MONGODB_URL: the in-memory store lives in one process"
            )
        return self

    @property
    def tracing(self) -> bool:
        """Traces are exported: an OTLP endpoint is set and the SDK and exporter are not off."""
        endpoint = self.otel_exporter_otlp_traces_endpoint or self.otel_exporter_otlp_endpoint
        return bool(endpoint) and not self.otel_sdk_disabled and self.otel_traces_exporter != "none"

    @property
    def shared_limits(self) -> bool:
        return self.limits == "shared" or (self.limits == "auto" and not self.uses_memory_store)

    @property
    def metrics_access(self) -> Literal["token", "public", "closed"]:
        """Who may read /metrics: token holders, anyone, or nobody (production, no token)."""
        if self.metrics_token is not None and self.metrics_token.get_secret_value():
            return "token"
        return "public" if self.metrics_public or self.app_env != "production" else "closed"

    @property
    def docs_served(self) -> bool:
        """DOCS_ENABLED, or when unset: in development only (the API's map is no one's
        business on a public production host unless the operator says so)."""
        return self.app_env != "production" if self.docs_enabled is None else self.docs_enabled

    @property
    def journals_runs(self) -> bool:
        return self.run_journal == "on" or (
            self.run_journal == "auto" and not self.uses_memory_store
        )

    @property
    def uses_memory_store(self) -> bool:
        return not self.mongodb_url or self.mongodb_url == MEMORY_URL

    @property
    def effective_admin_api_key(self) -> str:
        if self.admin_api_key is None or not self.admin_api_key.get_secret_value():
            return DEV_ADMIN_API_KEY
        return self.admin_api_key.get_secret_value()

    @property
    def effective_api_key_secret(self) -> bytes:
        if self.api_key_secret is None or not self.api_key_secret.get_secret_value():
            return DEV_API_KEY_SECRET.encode()
        return self.api_key_secret.get_secret_value().encode()

    def secret_keys(self) -> tuple[bytes, list[bytes]]:
        """The key that seals tenant secrets, and the old keys that may still open them."""
        current = self.secrets_key.get_secret_value() if self.secrets_key else ""
        key = parse_key(current or DEV_SECRETS_KEY, setting="SECRETS_KEY")
        old_text = self.secrets_old_keys.get_secret_value() if self.secrets_old_keys else ""
        old = [
            parse_key(item, setting=f"SECRETS_OLD_KEYS[{index}]")
            for index, item in enumerate(i for i in old_text.split(",") if i.strip())
        ]
        return key, old

    @property
    def mcp_servers_json(self) -> str | None:
        return self.mcp_servers.get_secret_value() if self.mcp_servers else None

    @property
    def capabilities(self) -> frozenset[str]:
        """What the configuration makes available to functions that require it."""
        found = set()
        key = self.web_search_api_key is not None
        if self.web_search_url if self.web_search_backend == "searxng" else key:
            found.add("web_search")
        if self.web_fetch_enabled:
            found.add("web_fetch")
        return frozenset(found)

    @property
    def model_configured(self) -> bool:
        return bool(self.openai_base_url or self.openai_api_key)

    def development_fallbacks(self) -> list[str]:
        """Names of the secrets that fall back to their documented development values."""
        return [
            name.upper()
            for name in ("admin_api_key", "api_key_secret", "secrets_key")
            if getattr(self, name) is None or not getattr(self, name).get_secret_value()
        ]


@lru_cache
def get_settings() -> Settings:
    return Settings()
