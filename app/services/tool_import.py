"""`POST /tools/import`: an OpenAPI document in, external tools out (app/tools/openapi.py).

All or nothing: the operations a tool cannot express are skipped and listed with their
reasons; every tool built from the rest must pass the rules of `POST /tools/create` (and fit
the tenant's tool cap and free ids and names), or nothing is stored and the answer lists every
problem. `dry_run` returns the same without storing.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import yaml
from pydantic import ValidationError

from app.errors import UnprocessableError, field_error
from app.schemas.fields import problem_lines
from app.schemas.tools import ToolCreate, ToolImport
from app.services.outbound import TenantOutbound
from app.services.tools import ToolService
from app.tools.netguard import url_problems
from app.tools.openapi import DocumentError, ImportOptions, convert

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
FETCH_TIMEOUT_S = 10.0


class ToolImporter:
    def __init__(self, *, tools: ToolService, outbound: TenantOutbound) -> None:
        self._tools = tools
        self._outbound = outbound

    async def run(self, request: ToolImport, *, tenant_id: str) -> dict[str, Any]:
        given = [f for f in ("document", "document_text", "url") if getattr(request, f) is not None]
        if len(given) != 1:
            raise UnprocessableError(
                "Give the OpenAPI document one way.",
                errors=[field_error("$", "give exactly one of document, document_text, url")],
            )
        document = await self._document(request, tenant_id)
        options = ImportOptions(
            operation_ids=None if request.operation_ids is None else set(request.operation_ids),
            openapi_tags=None if request.openapi_tags is None else set(request.openapi_tags),
            prefix=request.prefix,
            server_url=request.server_url,
            add_tags=list(request.tags),
            security=dict(request.security),
            base_url=request.url,
        )
        try:
            converted = convert(document, options)
        except DocumentError as exc:
            raise UnprocessableError(
                "The document cannot be imported; nothing was stored.",
                errors=[field_error("$.document", problem) for problem in exc.problems],
            ) from None
        except RecursionError:
            raise UnprocessableError(
                "The document cannot be imported; nothing was stored.",
                errors=[field_error("$.document", "it is nested too deeply")],
            ) from None
        creates, problems = await self._checked(converted.tools, tenant_id)
        answer: dict[str, Any] = {
            "dry_run": request.dry_run,
            "tools": converted.tools,
            "skipped": converted.skipped,
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
                or [field_error("$", "no operation matched the selection")],
            )
        answer["tools"] = await self._tools.create_all(creates, tenant_id=tenant_id)
        return answer

    async def _checked(
        self, documents: list[dict[str, Any]], tenant_id: str
    ) -> tuple[list[ToolCreate], list[dict[str, str]]]:
        """Each built tool checked like `POST /tools/create`; problems by `$.tools[i]` path."""
        policy = await self._outbound.policy(tenant_id)
        taken_ids, taken_names = await self._tools.taken(tenant_id=tenant_id)
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

    async def _document(self, request: ToolImport, tenant_id: str) -> Any:
        if request.document is not None:
            return request.document
        text = request.document_text
        if request.url is not None:
            text = await self._fetch(request.url, tenant_id)
        assert text is not None
        return parse_document(text)

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
            async with client:
                async with client.stream("GET", url, timeout=FETCH_TIMEOUT_S) as response:
                    if response.status_code != 200:
                        raise _fetch_failed(f"it answered HTTP {response.status_code}")
                    data = bytearray()
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > MAX_DOCUMENT_BYTES:
                            raise _fetch_failed(f"it is larger than {MAX_DOCUMENT_BYTES} bytes")
        except httpx.HTTPError as exc:
            raise _fetch_failed(f"cannot fetch it: {type(exc).__name__}") from None
        return data.decode("utf-8", errors="replace")


def _fetch_failed(reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The document cannot be fetched; nothing was stored.",
        errors=[field_error("$.url", reason)],
    )


def parse_document(text: str) -> Any:
    """JSON, else YAML without anchors and aliases (an alias bomb expands without bound)."""
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise _parse_failed(f"it is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        if any(isinstance(t, yaml.AliasToken | yaml.AnchorToken) for t in yaml.scan(text)):
            raise _parse_failed("YAML anchors and aliases are not accepted")
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _parse_failed(f"neither JSON nor YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise _parse_failed("it is nested too deeply") from None


def _parse_failed(reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The document cannot be read; nothing was stored.",
        errors=[field_error("$.document_text", reason)],
    )
