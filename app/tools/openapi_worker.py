"""The CPU part of `POST /tools/import` in worker processes: a document's text parsed (JSON, or
YAML through libyaml) and converted, under a CPU budget.

A thread does not keep the event loop responsive here: libyaml's loader holds the GIL for the
whole parse (15 MB of YAML stalled every other request 0.9-4.1 s from a thread). A process does.
Each task gets `cpu_s` seconds of its worker's CPU (`time.process_time`), not of the wall clock,
so a busy host does not refuse a document that needs 1.3 s of CPU: the conversion checks the
budget between operations, and the kernel's soft CPU limit (`RLIMIT_CPU`, set a second past the
budget) interrupts a parse that runs past it (`SIGXCPU`, then once a second). The caller keeps a
wall-clock bound as a backstop and never waits for a worker past it.

Workers are spawned by a fork server (never a fork of the serving process, whose page tables a
fork copies on the loop's thread), start with this module imported, and are shared by every app
of the process. A worker that dies (killed, out of memory) fails its task with a clear problem
and the pool is built again for the next one.
"""

from __future__ import annotations

import math
import multiprocessing
import resource
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.http.netguard import OutboundPolicy
from app.schemas.fields import problem_lines
from app.schemas.tools import ToolCreate
from app.tools.openapi import Converted, DocumentError, ImportOptions, convert
from app.tools.openapi_refs import CpuSpent
from app.tools.openapi_text import TextError, parse_document
from app.tools.rules import WriteBounds, write_problems

WORKERS = 2  # documents read and converted at once, per process; the rest wait their turn


@dataclass(frozen=True)
class WriteChecks:
    """What each built tool is checked against, as `POST /tools/create` checks a tool: the
    tenant's outbound policy, the operator's bounds, the ids and names the tenant has."""

    category: str
    policy: OutboundPolicy
    bounds: WriteBounds
    taken_ids: frozenset[str] = frozenset()
    taken_names: frozenset[str] = frozenset()


@dataclass
class Outcome:
    """What a task gives back (exceptions are not sent across: their fields would be lost)."""

    converted: Converted | None = None
    creates: list[ToolCreate] = field(default_factory=list)  # the tools that pass, in order
    text_error: str | None = None  # the text is not a document (at `$.document_text`)
    problems: list[str] = field(default_factory=list)  # of the whole document (at `$.document`)
    cpu_s: float = 0.0  # what the task used


def read_and_convert(
    source: bytes | str | dict[str, Any],
    options: ImportOptions,
    cpu_s: float,
    checks: WriteChecks | None = None,
) -> Outcome:
    """Parse (text), convert and check each tool (with `checks`), in this process, within
    `cpu_s` seconds of its CPU."""
    start = time.process_time()
    options.cpu_deadline = start + cpu_s
    _arm_cpu_limit(cpu_s)
    try:
        document = source if isinstance(source, dict) else parse_document(_text(source))
        options.check_cpu()
        converted = convert(document, options)
        creates = checked(converted, checks, options) if checks is not None else []
        return Outcome(converted, creates, cpu_s=time.process_time() - start)
    except TextError as exc:
        return Outcome(text_error=str(exc))
    except DocumentError as exc:
        return Outcome(problems=exc.problems)
    except CpuSpent:
        spent = f"reading and converting it took more than {cpu_s:g} s of CPU (IMPORT_CPU_S)"
        return Outcome(problems=[spent])
    except RecursionError:
        return Outcome(problems=["it is nested too deeply"])
    except MemoryError:
        return Outcome(problems=["it needs more memory than an import may take"])
    finally:
        _disarm_cpu_limit()


def checked(converted: Converted, checks: WriteChecks, options: ImportOptions) -> list[ToolCreate]:
    """The converted tools that pass every rule of a written tool, in `checks.category`; each
    one that does not leaves `converted.tools` for `converted.skipped`, with its problems (the
    rest are still imported: a tool's verdict is its own)."""
    creates: list[ToolCreate] = []
    tools, operations = converted.tools, converted.operations
    converted.tools, converted.operations = [], []
    for document, operation in zip(tools, operations, strict=True):
        options.check_cpu()
        document["category"] = checks.category
        tool, problems = _verdict(document, checks)
        if tool is None or problems:
            reason = "; ".join(f"{path}: {message}" for path, message in problems[:5])
            skip = {**operation, "reason": f"it breaks a rule of tools ({reason})"}
            converted.skipped.append({**skip, "stage": "rules", "tool_id": document["tool_id"]})
            continue
        creates.append(tool)
        converted.tools.append(document)
        converted.operations.append(operation)
    return creates


def _verdict(
    document: dict[str, Any], checks: WriteChecks
) -> tuple[ToolCreate | None, list[tuple[str, str]]]:
    try:
        tool = ToolCreate.model_validate(document)
    except ValidationError as exc:
        return None, [("$", line) for line in problem_lines(exc)]
    problems = write_problems(tool, checks.policy, checks.bounds)
    if tool.tool_id in checks.taken_ids:
        problems.append(("$.tool_id", f"'{tool.tool_id}' is taken"))
    if tool.function.name in checks.taken_names:
        problems.append(("$.function.name", f"'{tool.function.name}' is taken"))
    return tool, problems


def _text(data: bytes | str) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", errors="replace")


def _on_cpu_limit(signum: int, frame: Any) -> None:
    raise CpuSpent


def _arm_cpu_limit(cpu_s: float) -> None:
    """The kernel's soft CPU limit a second past the budget (whole seconds of the process's
    CPU so far); the hard limit is left as it is (a lowered one cannot be raised again)."""
    if threading.current_thread() is not threading.main_thread():
        return  # called in-process (scripts, tests): the cooperative checks still hold
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(spent + cpu_s) + 1
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return
    signal.signal(signal.SIGXCPU, _on_cpu_limit)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _disarm_cpu_limit() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


def _warm() -> None:
    """Run in each new worker: the modules a task needs are imported by then."""


class ImportWorkers:
    """The process's import workers, started on first use and rebuilt after a crash."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def submit(
        self,
        source: bytes | str | dict[str, Any],
        options: ImportOptions,
        cpu_s: float,
        checks: WriteChecks | None = None,
    ) -> Future[Outcome]:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload([__name__])
                self._pool = ProcessPoolExecutor(
                    self._workers, mp_context=context, initializer=_warm
                )
            pool = self._pool
        try:
            return pool.submit(read_and_convert, source, options, cpu_s, checks)
        except BrokenProcessPool:  # a worker died since: this task gets a new pool
            self.discard(pool)
            return self.submit(source, options, cpu_s, checks)

    def discard(self, pool: ProcessPoolExecutor | None = None) -> None:
        """Forget a broken pool (or the current one): the next task starts new workers."""
        with self._lock:
            if pool is None or pool is self._pool:
                old, self._pool = self._pool, None
            else:
                return
        if old is not None:
            old.shutdown(wait=False, cancel_futures=True)


SHARED = ImportWorkers()
