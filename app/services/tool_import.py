"""`POST /tools/import`: an OpenAPI document in, external tools out (app/tools/openapi.py).

All or nothing: the operations a tool cannot express are skipped and listed with their
reasons; every tool built from the rest must pass the rules of `POST /tools/create` (and fit
the tenant's tool cap and free ids and names), or nothing is stored and the answer lists every
problem. `dry_run` returns the same without storing.

Reading and converting the document is CPU work bounded by its size (app/tools/openapi_text.py,
app/tools/openapi_refs.py); it runs on this importer's own threads, never on the event loop,
under `IMPORT_DEADLINE_S` (422 when it passes). Fetching a document by URL has a total deadline
too (`IMPORT_FETCH_DEADLINE_S`), however slowly the server sends it.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from app.errors import UnprocessableError, field_error
from app.schemas.fields import problem_lines
from app.schemas.tools import ToolCreate, ToolImport
from app.services.outbound import TenantOutbound
from app.services.tools import RESERVED_TOOL_IDS, ToolService
from app.tools.netguard import OutboundBlockedError, OutboundPolicy, url_problems
from app.tools.openapi import Converted, DocumentError, ImportOptions, convert
from app.tools.openapi_text import TextError, parse_document
from app.tools.outbound_client import OutboundError

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024  # GitHub's REST description is 13 MB
_REST_OF_A_TOOL = 6_000  # description, URL, headers: what a tool holds beside its parameters
FETCH_TIMEOUT_S = 10.0  # each read of the fetch; IMPORT_FETCH_DEADLINE_S bounds the whole of it
IMPORT_THREADS = 2  # documents read and converted at once, per process; the rest wait their turn


class ToolImporter:
    def __init__(
        self,
        *,
        tools: ToolService,
        outbound: TenantOutbound,
        deadline_s: float = 10.0,
        fetch_deadline_s: float = 15.0,
    ) -> None:
        self._tools = tools
        self._outbound = outbound
        self._deadline_s = deadline_s
        self._fetch_deadline_s = fetch_deadline_s
        self._threads = ThreadPoolExecutor(IMPORT_THREADS, thread_name_prefix="toolgate-import")

    async def run(self, request: ToolImport, *, tenant_id: str) -> dict[str, Any]:
        given = [f for f in ("document", "document_text", "url") if getattr(request, f) is not None]
        if len(given) != 1:
            raise UnprocessableError(
                "Give the OpenAPI document one way.",
                errors=[field_error("$", "give exactly one of document, document_text, url")],
            )
        source = await self._source(request, tenant_id)
        options = ImportOptions(
            operation_ids=None if request.operation_ids is None else set(request.operation_ids),
            openapi_tags=None if request.openapi_tags is None else set(request.openapi_tags),
            prefix=request.prefix,
            server_url=request.server_url,
            add_tags=list(request.tags),
            security=dict(request.security),
            base_url=request.url,
            reserved=RESERVED_TOOL_IDS,
            max_schema_bytes=max(self._tools.max_schema_bytes - _REST_OF_A_TOOL, 512),
        )
        converted = await self._converted(source, options)
        creates, problems = await self._checked(converted.tools, request.category, tenant_id)
        answer: dict[str, Any] = {
            "dry_run": request.dry_run,
            "tools": converted.tools,
            "skipped": converted.skipped,
            "notes": converted.notes,
            "problems": problems,
        }
        if request.dry_run:
            return answer
        if problems:
            raise UnprocessableError(
                "Some tools cannot be created; nothing was stored.", errors=problems
            )
        if not creates:
            raise UnprocessableError(
                "No operation of the document could become a tool; nothing was stored.",
                errors=[
                    field_error("$.document", f"{s['operation']}: {s['reason']}")
                    for s in converted.skipped
                ]
                or [field_error("$", _nothing_selected(request))],
            )
        answer["tools"] = await self._tools.create_all(creates, tenant_id=tenant_id)
        return answer

    async def _checked(
        self, documents: list[dict[str, Any]], category: str, tenant_id: str
    ) -> tuple[list[ToolCreate], list[dict[str, str]]]:
        """Each built tool, put in `category`, checked like `POST /tools/create`; problems by
        `$.tools[i]` path (the category's at `$.category`)."""
        for document in documents:
            document["category"] = category
        missing = await self._tools.category_problems(category, tenant_id=tenant_id)
        policy = await self._outbound.policy(tenant_id)
        taken_ids, taken_names = await self._tools.taken(tenant_id=tenant_id)
        loop = asyncio.get_running_loop()  # checking a document's tools is CPU: off the loop
        creates, problems = await loop.run_in_executor(
            self._threads, self._validated, documents, policy, taken_ids, taken_names
        )
        problems[:0] = [field_error(path, message) for path, message in missing]
        room = await self._tools.room(tenant_id=tenant_id)
        if len(creates) > room:
            problems.append(
                field_error(
                    "$.tools",
                    f"{len(creates)} tools would pass the tenant's limit (MAX_TOOLS_PER_TENANT): "
                    f"room for {max(room, 0)}; select fewer operations",
                )
            )
        return creates, problems

    def _validated(
        self,
        documents: list[dict[str, Any]],
        policy: OutboundPolicy,
        taken_ids: set[str],
        taken_names: set[str],
    ) -> tuple[list[ToolCreate], list[dict[str, str]]]:
        creates: list[ToolCreate] = []
        problems: list[dict[str, str]] = []
        for index, document in enumerate(documents):
            where = f"$.tools[{index}]"
            try:
                tool = ToolCreate.model_validate(document)
            except ValidationError as exc:
                problems += [field_error(where, line) for line in problem_lines(exc)]
                continue
            problems += [
                field_error(where + path[1:], message)
                for path, message in self._tools.problems(tool, policy)
            ]
            if tool.tool_id in taken_ids:
                problems.append(field_error(f"{where}.tool_id", f"'{tool.tool_id}' is taken"))
            if tool.function.name in taken_names:
                problems.append(
                    field_error(f"{where}.function.name", f"'{tool.function.name}' is taken")
                )
            creates.append(tool)
        return creates, problems

    async def _source(self, request: ToolImport, tenant_id: str) -> dict[str, Any] | str:
        """The document as given, or its text (size-checked; parsed with the conversion)."""
        if request.document is not None:
            return request.document
        text = request.document_text
        if request.url is not None:
            text = await self._fetch(request.url, tenant_id)
        assert text is not None
        if len(text.encode()) > MAX_DOCUMENT_BYTES:
            raise _parse_failed(f"it is larger than {MAX_DOCUMENT_BYTES} bytes")
        return text

    async def _converted(self, source: dict[str, Any] | str, options: ImportOptions) -> Converted:
        """Parse and convert on the importer's threads, under the deadline."""
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self._threads, _read_and_convert, source, options)
        try:
            return await asyncio.wait_for(work, self._deadline_s)
        except TimeoutError:
            problem = f"reading and converting it took longer than {self._deadline_s:g} s"
            raise _import_failed([f"{problem} (IMPORT_DEADLINE_S)"]) from None
        except TextError as exc:
            raise _parse_failed(str(exc)) from None
        except DocumentError as exc:
            raise _import_failed(exc.problems) from None
        except RecursionError:
            raise _import_failed(["it is nested too deeply"]) from None

    async def _fetch(self, url: str, tenant_id: str) -> str:
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
        return data.decode("utf-8", errors="replace")


def _nothing_selected(request: ToolImport) -> str:
    if request.operation_ids is None and request.openapi_tags is None:
        return "the document has no operation under `paths` (webhooks are not imported)"
    return "no operation matched the selection"


def _fetch_failed(reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The document cannot be fetched; nothing was stored.",
        errors=[field_error("$.url", reason)],
    )


def _read_and_convert(source: dict[str, Any] | str, options: ImportOptions) -> Converted:
    """The CPU part of an import (run on a worker thread): parse the text, convert."""
    document = parse_document(source) if isinstance(source, str) else source
    return convert(document, options)


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
