"""`POST /tools/import`: an OpenAPI document in, external tools out (app/tools/openapi.py).

Each operation gets its own verdict: a tool, or skipped with its reason, whether conversion
could not express it (`stage: conversion`) or the tool built breaks a rule of
`POST /tools/create` (`stage: rules`: a taken id or name, its size, ...). One operation never
refuses the others. The import is all or nothing only across its write: the tools that pass
are stored together or, on a failure or the tenant's cap (`MAX_TOOLS_PER_TENANT`), none is.
`dry_run` returns the same verdicts without storing.

Reading, converting and checking the document is CPU work that grows with what the tenant
sends, so it runs in the import's worker processes (app/tools/openapi_worker.py), never on the
event loop nor on a thread of this process (libyaml holds the GIL for a whole parse), under a
CPU budget (`IMPORT_CPU_S` of the worker's CPU, 422 when it is spent) and a wall-clock
backstop (`IMPORT_DEADLINE_S`, for the wait and the work together). Fetching a document by URL
has its own total deadline (`IMPORT_FETCH_DEADLINE_S`), however slowly the server sends it,
and the document's size is capped (`MAX_DOCUMENT_BYTES`) before any parser sees it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson
from pydantic import TypeAdapter

from app.errors import UnprocessableError, field_error
from app.http.client import OutboundError
from app.http.netguard import OutboundBlockedError, url_problems
from app.schemas.tools import Tool, ToolImport
from app.services.outbound import TenantOutbound
from app.services.tools import ToolService
from app.tools.openapi import ImportOptions
from app.tools.openapi_worker import SHARED, ImportWorkers, Outcome, WriteChecks
from app.tools.rules import RESERVED_TOOL_IDS, WriteBounds

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024  # GitHub's REST description is 13 MB
_REST_OF_A_TOOL = 6_000  # description, URL, headers: what a tool holds beside its parameters
FETCH_TIMEOUT_S = 10.0  # each read of the fetch; IMPORT_FETCH_DEADLINE_S bounds the whole of it
_STORED = TypeAdapter(list[Tool])


class ToolImporter:
    def __init__(
        self,
        *,
        tools: ToolService,
        outbound: TenantOutbound,
        cpu_s: float = 30.0,
        deadline_s: float = 120.0,
        fetch_deadline_s: float = 15.0,
        workers: ImportWorkers | None = None,
    ) -> None:
        self._tools = tools
        self._outbound = outbound
        self._cpu_s = cpu_s
        self._deadline_s = deadline_s
        self._fetch_deadline_s = fetch_deadline_s
        self._workers = workers or SHARED

    async def run(self, request: ToolImport, *, tenant_id: str) -> dict[str, Any]:
        """Convert, check and (unless `dry_run`) store; the answer has every verdict."""
        given = [f for f in ("document", "document_text", "url") if getattr(request, f) is not None]
        if len(given) != 1:
            raise UnprocessableError(
                "Give the OpenAPI document one way.",
                errors=[field_error("$", "give exactly one of document, document_text, url")],
            )
        source = await self._source(request, tenant_id)
        bounds = self._tools.write_bounds
        problems = [
            field_error(path, message)
            for path, message in await self._tools.category_problems(
                request.category, tenant_id=tenant_id
            )
        ]
        taken_ids, taken_names = await self._tools.taken(tenant_id=tenant_id)
        checks = WriteChecks(
            category=request.category,
            policy=await self._outbound.policy(tenant_id),
            bounds=bounds,
            taken_ids=frozenset(taken_ids),
            taken_names=frozenset(taken_names),
        )
        outcome = await self._converted(source, _options(request, bounds), checks)
        room = await self._tools.room(tenant_id=tenant_id)
        if len(outcome.creates) > room:
            problems.append(field_error("$.tools", _no_room(len(outcome.creates), room)))
        answer = _answer(request.dry_run, outcome, problems)
        if not request.dry_run:
            await self._store(request, outcome, answer, tenant_id)
        return answer

    async def _store(
        self, request: ToolImport, outcome: Outcome, answer: dict[str, Any], tenant_id: str
    ) -> None:
        """Store the tools that passed, together, or raise why nothing was stored."""
        if answer["problems"]:
            raise UnprocessableError(
                "The import cannot be stored; nothing was stored.", errors=answer["problems"]
            )
        if not outcome.creates:
            raise UnprocessableError(
                "No operation of the document could become a tool; nothing was stored.",
                errors=[
                    field_error("$.document", f"{s['operation']}: {s['reason']}")
                    for s in answer["skipped"]
                ]
                or [field_error("$", _nothing_selected(request))],
            )
        stored = await self._tools.create_all(outcome.creates, tenant_id=tenant_id)
        # Serialized at once (10x cheaper than a dump per tool): the loop serves everyone.
        answer["tools"] = orjson.Fragment(
            _STORED.dump_json(stored, by_alias=True, exclude_none=True)
        )
        answer["summary"]["stored"] = len(stored)
        for verdict in answer["operations"]:
            if verdict["verdict"] == "ready":
                verdict["verdict"] = "stored"

    async def _source(self, request: ToolImport, tenant_id: str) -> bytes | str | dict[str, Any]:
        """The document as given, or its text (size-checked; parsed in the worker)."""
        if request.document is not None:
            return request.document
        if request.url is not None:
            return await self._fetch(request.url, tenant_id)
        text = request.document_text
        assert text is not None
        if len(text) > MAX_DOCUMENT_BYTES:  # characters: at least as many bytes
            raise _parse_failed(f"it is larger than {MAX_DOCUMENT_BYTES} bytes")
        return text

    async def _converted(
        self, source: bytes | str | dict[str, Any], options: ImportOptions, checks: WriteChecks
    ) -> Outcome:
        """Parse, convert and check in a worker process, under the CPU budget; the wall-clock
        backstop bounds the wait for a worker too."""
        try:
            async with asyncio.timeout(self._deadline_s):
                # Off the loop: the first task starts the workers, and waits for them.
                submitted = await asyncio.to_thread(
                    self._workers.submit, source, options, self._cpu_s, checks
                )
                outcome = await asyncio.wrap_future(submitted)
        except TimeoutError:
            problem = f"it was not read and converted within {self._deadline_s:g} s"
            raise _import_failed([f"{problem} (IMPORT_DEADLINE_S)"]) from None
        except BrokenProcessPool:
            self._workers.discard()
            logger.error("an import worker process died while reading a document")
            stopped = "the worker process reading it stopped (out of memory?)"
            raise _import_failed([stopped]) from None
        if outcome.text_error is not None:
            raise _parse_failed(outcome.text_error)
        if outcome.problems:
            raise _import_failed(outcome.problems)
        return outcome

    async def _fetch(self, url: str, tenant_id: str) -> bytes:
        """GET the document through the outbound guard (the tenant's policy), size-capped."""
        policy = await self._outbound.policy(tenant_id)
        problems = url_problems(url, policy)  # the rule of tool and MCP server writes
        if problems:
            raise UnprocessableError(
                "The document's URL is not allowed.",
                errors=[field_error("$.url", problem) for problem in problems],
            )
        client = self._outbound.client_for(policy)
        try:
            async with asyncio.timeout(self._fetch_deadline_s), client:
                async with client.request("GET", url, timeout_s=FETCH_TIMEOUT_S) as response:
                    if response.status != 200:
                        raise _fetch_failed(f"it answered HTTP {response.status}")
                    data, too_large = await response.read_capped(MAX_DOCUMENT_BYTES)
                    if too_large:
                        raise _fetch_failed(f"it is larger than {MAX_DOCUMENT_BYTES} bytes")
        except (OutboundBlockedError, OutboundError) as exc:
            raise _fetch_failed(f"cannot fetch it: {type(exc).__name__}") from None
        except TimeoutError:
            reason = f"it did not arrive within {self._fetch_deadline_s:g} s"
            raise _fetch_failed(f"{reason} (IMPORT_FETCH_DEADLINE_S)") from None
        return bytes(data)


def _options(request: ToolImport, bounds: WriteBounds) -> ImportOptions:
    return ImportOptions(
        operation_ids=None if request.operation_ids is None else set(request.operation_ids),
        openapi_tags=None if request.openapi_tags is None else set(request.openapi_tags),
        prefix=request.prefix,
        server_url=request.server_url,
        add_tags=list(request.tags),
        security=dict(request.security),
        base_url=request.url,
        reserved=RESERVED_TOOL_IDS,
        max_schema_bytes=max(bounds.max_schema_bytes - _REST_OF_A_TOOL, 512),
        max_tool_bytes=bounds.max_schema_bytes,
    )


def _answer(dry_run: bool, outcome: Outcome, problems: list[dict[str, str]]) -> dict[str, Any]:
    """The import's answer: every tool, skip (with its stage and reason) and note, a verdict per
    operation in document order, and the counts a progress view shows."""
    converted = outcome.converted
    assert converted is not None
    built = len(converted.tools) + sum(1 for s in converted.skipped if s["stage"] == "rules")
    verdicts = [
        {**operation, "verdict": "ready", "tool_id": tool["tool_id"]}
        for operation, tool in zip(converted.operations, converted.tools, strict=True)
    ] + [
        {key: skip[key] for key in ("operation", "operation_id", "reason", "stage")}
        | {"verdict": "skipped"}
        for skip in converted.skipped
    ]
    return {
        "dry_run": dry_run,
        "summary": {
            "operations": converted.selected,
            "converted": built,
            "stored": 0,
            "skipped": len(converted.skipped),
            "cpu_s": round(outcome.cpu_s, 3),
        },
        "tools": converted.tools,
        "skipped": converted.skipped,
        "notes": converted.notes,
        "operations": verdicts,
        "problems": problems,
    }


def _no_room(count: int, room: int) -> str:
    return (
        f"{count} tools would pass the tenant's limit (MAX_TOOLS_PER_TENANT): "
        f"room for {max(room, 0)}; select fewer operations"
    )


def _nothing_selected(request: ToolImport) -> str:
    if request.operation_ids is None and request.openapi_tags is None:
        return "the document has no operation under `paths` (webhooks are not imported)"
    return "no operation matched the selection"


def _fetch_failed(reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The document cannot be fetched; nothing was stored.",
        errors=[field_error("$.url", reason)],
    )


def _import_failed(problems: list[str]) -> UnprocessableError:
    return UnprocessableError(
        "The document cannot be imported; nothing was stored.",
        errors=[field_error("$.document", problem) for problem in problems],
    )


def _parse_failed(reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The document cannot be read; nothing was stored.",
        errors=[field_error("$.document_text", reason)],
    )
