"""The heart's clients, built once: the model client and the loop, the tools' HTTP client, the
invoker with an executor per kind, the MCP hub."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack

from app.chat.http_model_client import HTTPModelClient
from app.chat.loop import ChatLoop, LoopLimits
from app.chat.model import ModelClient
from app.chat.openai_sdk import OpenAISDKClient
from app.config import Settings
from app.mcp.hub import McpHub, McpLimits
from app.metrics import Metrics
from app.services.outbound import TenantOutbound
from app.tools.executors.external import ExternalExecutor
from app.tools.executors.function import FunctionExecutor
from app.tools.executors.mcp import McpExecutor
from app.tools.invocation import InvocationLimits, ToolInvoker
from app.tools.netguard import OutboundPolicy
from app.tools.outbound_client import OutboundClient
from app.tools.registry import FunctionRegistry

logger = logging.getLogger("app")


def build_model_client(settings: Settings) -> ModelClient | None:
    """The model client, or None when no model endpoint is configured (chats then get 503)."""
    if not settings.model_configured:
        return None
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unused"
    client = HTTPModelClient if settings.model_client == "http" else OpenAISDKClient
    return client(
        base_url=settings.openai_base_url,
        api_key=api_key,
        timeout_s=settings.model_timeout_s,
        max_retries=settings.model_max_retries,
    )


def build_tool_http_client(settings: Settings, policy: OutboundPolicy) -> OutboundClient:
    """The one HTTP client of external tools: guarded connections, no redirects, no env proxies."""
    return OutboundClient(
        policy,
        timeout_s=settings.tool_timeout_s,
        connect_timeout_s=min(5.0, settings.tool_timeout_s),
    )


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
    return ToolInvoker(
        executors={
            "function": FunctionExecutor(registry=registry, threads=threads),
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
) -> ChatLoop | None:
    model = build_model_client(settings)
    if model is None:
        logger.warning(
            "no model endpoint configured (OPENAI_BASE_URL/OPENAI_API_KEY): POST /chat answers 503"
        )
        return None
    stack.push_async_callback(model.close)
    limits = LoopLimits(
        deadline_s=settings.chat_deadline_s, token_budget=settings.chat_token_budget
    )
    return ChatLoop(model=model, invoker=invoker, limits=limits, metrics=metrics)


def build_mcp_hub(settings: Settings, outbound: TenantOutbound, stack: AsyncExitStack) -> McpHub:
    hub = McpHub(
        policy=outbound.base,
        limits=McpLimits(
            connect_timeout_s=settings.mcp_connect_timeout_s,
            cache_ttl_s=settings.mcp_tools_cache_ttl_s,
        ),
    )
    stack.push_async_callback(hub.aclose)
    return hub
