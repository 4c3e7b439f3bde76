"""An OTLP/HTTP receiver for the tracing rows (scripts/bench/tracing.py): `POST /v1/traces`
answered 200 with an empty `ExportTraceServiceResponse`, each request's spans counted (decoded
with `opentelemetry-proto`, so a row whose spans never arrived shows it); `GET /count` answers
`{"requests": N, "spans": M}`. Written on asyncio's protocol layer like upstream.py: it shares
the load's cores, not the service's."""

from __future__ import annotations

import argparse
import asyncio
import json

import uvloop
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from upstream import MAX_HEAD_BYTES, body_length  # scripts/bench/upstream.py

COUNTS = {"requests": 0, "spans": 0}


def _response(body: bytes, content_type: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (content_type, len(body)) + body


class Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.pending += data
        while b"\r\n\r\n" in self.pending:
            head, _, rest = self.pending.partition(b"\r\n\r\n")
            length = body_length(head)
            if len(rest) < length:
                return
            body, self.pending = rest[:length], rest[length:]
            self._answer(head, body)
        if len(self.pending) > MAX_HEAD_BYTES and b"\r\n\r\n" not in self.pending:
            assert self.transport is not None
            self.transport.close()

    def _answer(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        if head.startswith(b"GET /count"):
            self.transport.write(_response(json.dumps(COUNTS).encode(), b"application/json"))
            return
        request = ExportTraceServiceRequest.FromString(body)
        COUNTS["requests"] += 1
        COUNTS["spans"] += sum(
            len(scope.spans) for spans in request.resource_spans for scope in spans.scope_spans
        )
        self.transport.write(_response(b"", b"application/x-protobuf"))


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Sink, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
