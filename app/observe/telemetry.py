"""OpenTelemetry traces: a span for each request, chat, model call, tool call and MCP call.

Off unless an OTLP endpoint is configured (`Settings.tracing`); off, every helper here returns
at once and builds nothing (`_tracer is None`), so tracing costs nothing measurable. On, the
lifespan starts the SDK (`tracing`): its own `TracerProvider` (the process's global one is left
alone, so a second app in the process, a test, starts its own), a batch processor on the SDK's
worker thread and the OTLP exporter (http/protobuf, or gRPC with the `otlp-grpc` extra).

Spans follow the OpenTelemetry GenAI semantic conventions as released in semantic-conventions
v1.41.0 (now kept in semantic-conventions-genai, whose v0.1.0 keeps these names): the chat is
`invoke_agent toolgate` (INTERNAL), each model call `chat {model}` (CLIENT), each tool call
`execute_tool {tool}` (INTERNAL); MCP calls follow that project's MCP conventions
(`tools/call {tool}`, CLIENT out, SERVER in, W3C trace context in `params._meta`).

Never a hidden value: attributes carry names, ids, counts and outcomes; an error's text is
redacted (`app.observe.logs.redact`, which also hides the running chat's values). Message
contents and tool arguments are recorded only with
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, after the run's scrubber and the log
redaction, cut at CONTENT_MAX_CHARS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.observe.logs import carry_trace_ids, redact

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    from app.config import Settings
    from app.observe.metrics import Metrics

logger = logging.getLogger(__name__)

TRACER_NAME = "toolgate"
AGENT_NAME = "toolgate"
SEMCONV_SCHEMA = "https://opentelemetry.io/schemas/1.41.0"
CONTENT_MAX_CHARS = 16_384  # an opted-in message list, argument or result on a span
ERROR_MAX_CHARS = 300  # an error's (redacted) description
CARRIER_MAX_CHARS = 1024  # a traceparent or tracestate longer than this is not read
_TRACE_HEADERS = ("traceparent", "tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()  # W3C trace context: traceparent, tracestate

# The tracer while tracing runs (None: off), and whether contents are recorded.
_tracer: Tracer | None = None
_capture_content = False
_OFF: AbstractContextManager[None] = nullcontext()


class Scrubbing(Protocol):
    """What redacts a run's hidden values (`app.tools.scrub.Scrubber`)."""

    def head(self, text: str, limit: int) -> str: ...


def tracing_on() -> bool:
    return _tracer is not None


def capturing_content() -> bool:
    """Whether message contents and tool arguments go on spans (the operator's opt-in)."""
    return _tracer is not None and _capture_content


@asynccontextmanager
async def tracing(
    settings: Settings, *, metrics: Metrics | None = None, exporter: SpanExporter | None = None
) -> AsyncIterator[TracerProvider | None]:
    """For the lifespan: tracing on (if configured, or with `exporter`, which replaces the
    OTLP one: tests) until the block ends, then the spans still queued are exported."""
    global _tracer, _capture_content
    if exporter is None and not settings.tracing:
        yield None
        return
    provider = _provider(settings, exporter or _otlp_exporter(settings), metrics)
    _tracer = provider.get_tracer(TRACER_NAME, schema_url=SEMCONV_SCHEMA)
    _capture_content = settings.otel_instrumentation_genai_capture_message_content
    carry_trace_ids(True)
    try:
        yield provider
    finally:
        _tracer, _capture_content = None, False
        carry_trace_ids(False)
        # Joins the exporter's thread after a last export: never on the event loop.
        await asyncio.to_thread(provider.shutdown)


def _provider(
    settings: Settings, exporter: SpanExporter, metrics: Metrics | None
) -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, as the SDK reads
    name = settings.otel_service_name
    if name is None and str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown"):
        name = "toolgate"
    if name is not None:
        resource = resource.merge(Resource({SERVICE_NAME: name}))
    provider = TracerProvider(resource=resource, sampler=_sampler(settings))
    provider.add_span_processor(BatchSpanProcessor(_Counted(exporter, metrics)))
    return provider


def _sampler(settings: Settings) -> Any:
    from opentelemetry.sdk.trace import sampling

    ratio = sampling.TraceIdRatioBased(
        1.0 if settings.otel_traces_sampler_arg is None else settings.otel_traces_sampler_arg
    )
    root = {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": ratio,
    }
    name = settings.otel_traces_sampler
    if name.startswith("parentbased_"):
        return sampling.ParentBased(root[name.removeprefix("parentbased_")])
    return root[name]


def _otlp_exporter(settings: Settings) -> SpanExporter:
    """The OTLP exporter the settings name; start-up fails with a clear message if the gRPC
    one is asked for and not installed."""
    protocol = settings.otel_exporter_otlp_traces_protocol or settings.otel_exporter_otlp_protocol
    headers = _headers(settings.otel_exporter_otlp_traces_headers) or _headers(
        settings.otel_exporter_otlp_headers
    )
    endpoint = settings.otel_exporter_otlp_traces_endpoint
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            raise RuntimeError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the gRPC exporter: "
                "pip install 'toolgate[otlp-grpc]'"
            ) from None
        exporter: SpanExporter = GrpcSpanExporter(
            endpoint=endpoint or settings.otel_exporter_otlp_endpoint, headers=headers
        )
        return exporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if endpoint is None:  # the general endpoint is a base URL: traces go to its /v1/traces
        endpoint = (settings.otel_exporter_otlp_endpoint or "").rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint, headers=headers)


def _headers(value: Any) -> dict[str, str] | None:
    """OTEL_EXPORTER_OTLP_HEADERS: `key=value` pairs, comma-separated, percent-encoded."""
    if value is None or not value.get_secret_value().strip():
        return None
    from opentelemetry.util.re import parse_env_headers

    return dict(parse_env_headers(value.get_secret_value(), liberal=True))


class _Counted(SpanExporter):
    """The exporter, with every batch it failed to deliver counted and logged (the SDK would
    only warn): nothing is lost silently."""

    def __init__(self, exporter: SpanExporter, metrics: Metrics | None) -> None:
        self._exporter, self._metrics = exporter, metrics

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._exporter.export(spans)
        except Exception:
            logger.exception("exporting %d spans failed", len(spans))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            logger.error("%d spans could not be exported and were dropped", len(spans))
            if self._metrics is not None:
                self._metrics.spans_dropped.inc(len(spans))
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class _Traced:
    """A span made current for a block: on an exception its type is `error.type` and its text,
    redacted, the status; it ends with the block. (A class, not `start_as_current_span`: the
    exception is never recorded as it is, since its text or stack may hold a hidden value.)"""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: object = None

    def __enter__(self) -> Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                failed(self._span, exc)
        finally:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._span.end()


def failed(span: Span, exc: BaseException, error_type: str | None = None) -> None:
    """Mark `span` failed: `error.type` and a redacted description, never the raw text."""
    if isinstance(exc, asyncio.CancelledError):
        span.set_attribute("error.type", "cancelled")
        span.set_status(Status(StatusCode.ERROR, "cancelled"))
        return
    span.set_attribute("error.type", error_type or type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, redact(str(exc))[:ERROR_MAX_CHARS]))


def started(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    parent: Context | None = None,
) -> AbstractContextManager[Span | None]:
    """A span current for the block (None in the block when tracing is off: nothing built)."""
    tracer = _tracer
    if tracer is None:
        return _OFF
    if parent is None:
        found = trace.get_current_span().get_span_context()
        if found.is_valid and not found.trace_flags.sampled and not found.is_remote:
            # A trace the sampler dropped here: every sampler (`_sampler`) drops its children
            # too, so none is built (a sampled-out request costs next to nothing).
            return _OFF
    return _Traced(tracer.start_span(name, context=parent, kind=kind, attributes=attributes))


def annotate(**attributes: Any) -> None:
    """Set attributes on the current span (none: nothing), e.g. the run id on a request's."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


# -- The GenAI spans ---------------------------------------------------------------------------


def agent_span(chat: Any, tenant_id: str) -> AbstractContextManager[Span | None]:
    """The chat (a `ChatRun`): toolgate's tool loop, one agent invocation (`invoke_agent`)."""
    if _tracer is None:
        return _OFF
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT_NAME,
        "gen_ai.request.model": chat.model,
        "toolgate.tenant_id": tenant_id,
    }
    if chat.provider is not None:
        attributes["toolgate.model_provider"] = chat.provider
    return started(f"invoke_agent {AGENT_NAME}", attributes=attributes)


def agent_finished(span: Span | None, progress: Any, *, stop_reason: str) -> None:
    """How a chat went (a `ChatResult` so far), on its span: turns, tokens, why it stopped."""
    if span is None or not span.is_recording():
        return
    usage = progress.usage
    span.set_attributes(
        {
            "toolgate.stop_reason": stop_reason,
            "toolgate.iterations": progress.iterations,
            "toolgate.tool_calls": len(progress.tool_calls),
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
        }
    )
    if progress.finish_reason is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [progress.finish_reason])


def model_span(
    *, model: str, stream: bool, messages: list[dict[str, Any]], scrub: Scrubbing | None
) -> AbstractContextManager[Span | None]:
    """One model call (`chat {model}`, CLIENT); the client adds its provider and host
    (`describe_model_call`), the loop what came back (`model_answered`)."""
    if _tracer is None:
        return _OFF
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.request.stream": stream,
    }
    if _capture_content:
        attributes["gen_ai.input.messages"] = recorded(_genai_messages(messages), scrub)
    return started(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)


def describe_model_call(*, api: str, host: str, port: int | None = None) -> None:
    """The model client's part of its span: the provider (by API) and the server."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            {
                "gen_ai.provider.name": "anthropic" if "anthropic" in api else "openai",
                "toolgate.model_api": api,
                "server.address": host,
                **({"server.port": port} if port is not None else {}),
            }
        )


def model_answered(span: Span | None, turn: Any, *, scrub: Scrubbing | None) -> None:
    """What a model call's answer (a `ModelTurn`) says, on its span: usage, why it stopped,
    (opt-in) what it said."""
    if span is None or not span.is_recording():
        return
    found: dict[str, Any] = {
        "gen_ai.usage.input_tokens": turn.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": turn.usage.completion_tokens,
    }
    if turn.finish is not None:
        found["gen_ai.response.finish_reasons"] = [turn.finish]
    span.set_attributes(found)  # one lock, not one per attribute
    if _capture_content:
        parts: list[dict[str, Any]] = []
        if turn.content:
            parts.append({"type": "text", "content": turn.content})
        parts += [
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in turn.tool_calls
        ]
        output = [{"role": "assistant", "parts": parts, "finish_reason": turn.finish or "stop"}]
        span.set_attribute("gen_ai.output.messages", recorded(output, scrub))


def tool_span(
    *, name: str, tool_id: str | None, kind: str, call_id: str | None
) -> AbstractContextManager[Span | None]:
    """One tool call (`execute_tool {name}`), whatever asked for it (a chat, invoke, /mcp)."""
    if _tracer is None:
        return _OFF
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    if tool_id is not None:
        attributes["toolgate.tool.id"] = tool_id
    attributes["toolgate.tool.kind"] = kind
    return started(f"execute_tool {name}", attributes=attributes)


def tool_finished(span: Span | None, done: Any, *, arguments: Any, scrub: Scrubbing | None) -> None:
    """A tool call's outcome (an `Invocation`) on its span; (opt-in) its arguments and result,
    redacted."""
    if span is None or not span.is_recording():
        return
    if done.status == "ok":
        span.set_attribute("toolgate.tool.status", "ok")
    else:
        kind = done.kind or "tool_error"
        span.set_attributes({"toolgate.tool.status": done.status, "error.type": kind})
        span.set_status(Status(StatusCode.ERROR, kind))
    if _capture_content:
        if arguments is not None:
            span.set_attribute("gen_ai.tool.call.arguments", recorded(arguments, scrub))
        span.set_attribute("gen_ai.tool.call.result", recorded(done.content, scrub))


def mcp_client_span(*, server: str, tool: str) -> AbstractContextManager[Span | None]:
    """A `tools/call` to an MCP server (CLIENT); the SDK puts its context in `params._meta`."""
    if _tracer is None:
        return _OFF
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "toolgate.mcp.server": server,
    }
    return started(f"tools/call {tool}", kind=SpanKind.CLIENT, attributes=attributes)


def mcp_server_span(
    *, method: str, target: str | None, meta: Mapping[str, Any] | None
) -> AbstractContextManager[Span | None]:
    """A request served at `/mcp` (SERVER), a child of the trace context in its `params._meta`
    when it carries one (the MCP conventions), else of the HTTP request's span."""
    if _tracer is None:
        return _OFF
    attributes = {"mcp.method.name": method}
    if method == "tools/call" and target is not None:
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = target
    name = f"{method} {target}" if target else method
    return started(name, kind=SpanKind.SERVER, attributes=attributes, parent=meta_context(meta))


# -- Propagation -------------------------------------------------------------------------------


def outbound_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """`headers` with the current span's `traceparent` (and `tracestate`) in place of any of
    the same name; `headers` itself when tracing is off or no span is current."""
    if _tracer is None:
        return headers
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    if not carrier:
        return headers
    kept = {k: v for k, v in headers.items() if k.lower() not in _TRACE_HEADERS}
    return {**kept, **carrier}


def request_context(raw_headers: Sequence[tuple[bytes, bytes]]) -> Context | None:
    """The caller's trace context from a request's W3C headers (ASGI's raw list); None for
    none or a malformed one (the request then starts a trace of its own)."""
    found: dict[str, list[str]] = {}
    for name, value in raw_headers:
        if name in (b"traceparent", b"tracestate") and len(value) <= CARRIER_MAX_CHARS:
            found.setdefault(name.decode(), []).append(value.decode("latin-1"))
    if "traceparent" not in found or len(found["traceparent"]) != 1:
        return None
    carrier = {name: ",".join(values) for name, values in found.items()}
    return _valid(_PROPAGATOR.extract(carrier))


def meta_context(meta: Mapping[str, Any] | None) -> Context | None:
    """The trace context an MCP request carries in `params._meta`, if a valid one."""
    if not meta:
        return None
    carrier = {
        name: value
        for name in _TRACE_HEADERS
        if isinstance(value := meta.get(name), str) and len(value) <= CARRIER_MAX_CHARS
    }
    return _valid(_PROPAGATOR.extract(carrier)) if "traceparent" in carrier else None


def _valid(extracted: Context) -> Context | None:
    span = trace.get_current_span(extracted)
    return (
        extracted
        if isinstance(span, NonRecordingSpan) and span.get_span_context().is_valid
        else None
    )


# -- Contents (opt-in) -------------------------------------------------------------------------


def recorded(value: Any, scrub: Scrubbing | None) -> str:
    """`value` as the text a span may carry: JSON (unless a string), the run's hidden values
    and anything credential-shaped redacted, cut at CONTENT_MAX_CHARS (the work bounded by
    that, not by the value)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = orjson.dumps(value, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):
            text = "[not JSON]"
    text = text[: CONTENT_MAX_CHARS * 4]  # an escape in an echo is at most a few characters
    if scrub is not None:
        text = scrub.head(text, CONTENT_MAX_CHARS)
    return redact(text)[:CONTENT_MAX_CHARS]


def _genai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions messages in the GenAI conventions' shape (role, parts)."""
    shown = []
    for message in messages:
        role = message.get("role")
        parts: list[dict[str, Any]] = []
        content = message.get("content")
        if role == "tool":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": message.get("tool_call_id"),
                    "response": content,
                }
            )
        elif isinstance(content, str) and content:
            parts.append({"type": "text", "content": content})
        elif isinstance(content, list):
            parts += [
                {"type": "text", "content": p.get("text")} if p.get("type") == "text" else p
                for p in content
                if isinstance(p, dict)
            ]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        shown.append({"role": role, "parts": parts})
    return shown
