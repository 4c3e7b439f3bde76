"""The heart's clients, built once: the model client and the loop, the tools' HTTP client, the
invoker with an executor per kind, the MCP hub."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack

from app.chat.apis import build_model_api
from app.chat.http_model_client import HTTPModelClient
from app.chat.loop import ChatLoop, LoopLimits
from app.chat.model import MissingModel, ModelClient
from app.config import Settings
from app.http.client import OutboundClient
from app.http.netguard import OutboundPolicy
from app.mcp.hub import McpHub, McpLimits
from app.mcp.pool import PoolLimits
from app.observe.metrics import Metrics
from app.services.outbound import TenantOutbound
from app.tools.approval import ApprovalPolicy
from app.tools.executors.external import ExternalExecutor
from app.tools.executors.function import FunctionExecutor
from app.tools.executors.mcp import McpExecutor
from app.tools.invocation import InvocationLimits, ToolInvoker
from app.tools.registry import FunctionRegistry
from app.tools.web import WebAccess, WebConfig

logger = logging.getLogger("app")


def build_model_client(settings: Settings) -> ModelClient | None:
    """The model client, or None when no model endpoint is configured (chats then get 503)."""
    if not settings.model_configured:
        return None
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unused"
    if settings.model_client == "openai-sdk":
        from app.chat.openai_sdk import OpenAISDKClient  # the `openai` package: 1 s of imports

        return OpenAISDKClient(
            base_url=settings.openai_base_url,
            api_key=api_key,
            timeout_s=settings.model_timeout_s,
            max_retries=settings.model_max_retries,
        )
    return HTTPModelClient(
        base_url=settings.openai_base_url,
        api_key=api_key,
        timeout_s=settings.model_timeout_s,
        max_retries=settings.model_max_retries,
        max_answer_bytes=settings.model_answer_max_bytes,
        api=build_model_api(
            settings.model_api,
            max_tokens=settings.model_max_tokens,
            chain=settings.model_responses_chain,
        ),
    )


def build_tool_http_client(settings: Settings, policy: OutboundPolicy) -> OutboundClient:
    """The one HTTP client of external tools: guarded connections, no redirects, no env proxies."""
    return OutboundClient(
        policy,
        timeout_s=settings.tool_timeout_s,
        connect_timeout_s=min(5.0, settings.tool_timeout_s),
    )


def build_web_access(settings: Settings, stack: AsyncExitStack) -> WebAccess | None:
    """The web built-ins' search service client and settings; None when neither is configured.
    The search service is the operator's (it may be on a private network): its client reaches
    any address; pages go through each tenant's guarded client instead."""
    if not settings.capabilities & {"web_search", "web_fetch"}:
        return None
    timeout = settings.web_search_timeout_s
    search_http = OutboundClient(  # the service's one HTTP client, reaching where it is told
        OutboundPolicy.unrestricted(ca_bundle=settings.outbound_ca_bundle),
        timeout_s=timeout,
        connect_timeout_s=min(5.0, timeout),
    )
    stack.push_async_callback(search_http.aclose)
    key = settings.web_search_api_key
    config = WebConfig(
        search_backend=settings.web_search_backend,
        search_url=settings.web_search_url,
        search_api_key=key.get_secret_value() if key else None,
        fetch_enabled=settings.web_fetch_enabled,
        response_max_bytes=settings.tool_response_max_bytes,
        max_chars=settings.web_fetch_max_chars,
    )
    return WebAccess(config, search_http=search_http)


def build_invoker(
    settings: Settings,
    registry: FunctionRegistry,
    policy: OutboundPolicy,
    metrics: Metrics,
    stack: AsyncExitStack,
) -> ToolInvoker:
    """The one tool-invocation path, with an executor per kind of tool."""
    http = build_tool_http_client(settings, policy)
    stack.push_async_callback(http.aclose)
    threads = ThreadPoolExecutor(max_workers=settings.tool_threads, thread_name_prefix="tool")
    stack.callback(threads.shutdown, wait=False, cancel_futures=True)
    web = build_web_access(settings, stack)
    return ToolInvoker(
        executors={
            "function": FunctionExecutor(registry=registry, threads=threads, http=http, web=web),
            "external": ExternalExecutor(
                http=http, response_max_bytes=settings.tool_response_max_bytes
            ),
            "mcp": McpExecutor(),
        },
        limits=InvocationLimits(
            timeout_s=settings.tool_timeout_s, output_max_chars=settings.tool_output_max_chars
        ),
        metrics=metrics,
    )


def build_chat_loop(
    settings: Settings, invoker: ToolInvoker, metrics: Metrics, stack: AsyncExitStack
) -> ChatLoop:
    """The loop, on the operator's model client (or, with none configured, one that refuses:
    chats then run only through tenants' own providers)."""
    model = build_model_client(settings)
    if model is None:
        logger.warning(
            "no model endpoint configured (OPENAI_BASE_URL/OPENAI_API_KEY): POST /chat answers "
            "503 unless the tenant has its own model provider"
        )
        model = MissingModel()
    stack.push_async_callback(model.close)
    limits = LoopLimits(
        deadline_s=settings.chat_deadline_s, token_budget=settings.chat_token_budget
    )
    approvals = ApprovalPolicy(risky_default=settings.risky_tool_approval)
    return ChatLoop(
        model=model, invoker=invoker, limits=limits, metrics=metrics, approvals=approvals
    )


def build_mcp_hub(
    settings: Settings, outbound: TenantOutbound, metrics: Metrics, stack: AsyncExitStack
) -> McpHub:
    hub = McpHub(
        policy=outbound.base,
        limits=McpLimits(
            connect_timeout_s=settings.mcp_connect_timeout_s,
            cache_ttl_s=settings.mcp_tools_cache_ttl_s,
            list_deadline_s=settings.mcp_list_deadline_s,
            max_tools=settings.mcp_max_server_tools,
            max_list_bytes=settings.mcp_max_list_bytes,
            pool=PoolLimits(
                idle_s=settings.mcp_session_idle_s,
                per_tenant=settings.mcp_pool_per_tenant,
                total=settings.mcp_pool_total,
            ),
        ),
        on_skip=metrics.mcp_listing_skipped,
        on_call=metrics.mcp_server_call_done,
    )
    stack.push_async_callback(hub.aclose)
    return hub
