"""A real OTLP/HTTP receiver (POST /v1/traces, protobuf), decoding with `opentelemetry-proto`.

The OpenTelemetry Collector does not install from a registry here (the one PyPI wheel that ships
a collector binary has no OTLP receiver in it), so the tests receive what the service exports
themselves: the exporter's real requests over a real socket, decoded by the project's own
protobuf definitions. Every raw byte is kept, so a test can search it for a hidden value.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.requests import Request
from starlette.types import Receive, Scope, Send


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: int  # the proto's enum: 1 internal, 2 server, 3 client
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    resource: dict[str, Any]


@dataclass
class OtlpReceiver:
    """The ASGI app: every export request is answered 200 and kept (raw and decoded)."""

    raw: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = await Request(scope, receive).body()
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            self.raw.append(body)
            self.paths.append(scope["path"])
            self.headers.append(headers)
            self.spans.extend(_decoded(request))
        answer = ExportTraceServiceResponse().SerializeToString()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name.startswith(prefix)]

    def clear(self) -> None:
        with self._lock:
            self.raw.clear()
            self.spans.clear()
            self.paths.clear()
            self.headers.clear()


def _decoded(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        resource=resource,
                    )
                )
    return found


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


@contextmanager
def grpc_receiver(found: OtlpReceiver) -> Iterator[str]:
    """The same receiver over OTLP/gRPC (grpcio's server, the proto's service), on
    127.0.0.1; yields the endpoint URL the exporter takes."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> ExportTraceServiceResponse:
            with found._lock:
                found.raw.append(request.SerializeToString())
                found.paths.append("grpc")
                found.spans.extend(_decoded(request))
            return ExportTraceServiceResponse()

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
