"""`python -m app [serve|check|migrate|new-secrets-key|rotate-secrets|fake-model]`.

serve: validate settings, the function dictionary and MCP servers, then serve.
check: validate only, and import every module the service needs (the built-ins' deferred ones
too): a dependency missing from the install is named.
migrate: bring the database to the current layout now (shared collections, TOOL_COLLECTIONS,
the function dictionary's tools in every tenant); the service also does it by itself, tenant
by tenant. Idempotent and resumable; safe while replicas serve (docs/operating.md).
new-secrets-key: print a fresh SECRETS_KEY.
rotate-secrets: re-encrypt every stored secret and MCP header value under SECRETS_KEY; values
sealed under a key listed in SECRETS_OLD_KEYS are opened with it. Safe to re-run.

fake-model: serve the scripted OpenAI-compatible fake model (demos, no LLM needed); its own
options: `python -m app fake-model --help`.

Problems are printed as one plain list and the process exits 1, without a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings


def _check(settings_only: bool = False) -> Settings:
    # Imported here: `fake-model` and `new-secrets-key` need none of it (the MCP SDK alone
    # is most of a second of start-up).
    from pydantic import ValidationError

    from app.config import Settings
    from app.mcp.config import McpConfigError, load_operator_servers
    from app.tools.registry import FunctionDictionaryError, load_registry, validate_registry

    try:
        settings = Settings()
    except ValidationError as exc:
        lines = [
            f"  - {'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()
        ]
        sys.exit("invalid settings:\n" + "\n".join(lines))
    if not settings_only:
        _check_imports(settings)
        try:
            validate_registry(load_registry(settings.functions_module))
        except FunctionDictionaryError as exc:
            sys.exit(str(exc))
        try:
            load_operator_servers(settings.mcp_servers_json, settings.mcp_servers_file)
        except McpConfigError as exc:
            sys.exit(str(exc))
    return settings


def _check_imports(settings: Settings) -> None:
    """Every module the service imports, at start-up or on first use, imports here; otherwise
    exit with the list of what is missing (an install not made from requirements.lock)."""
    import importlib

    modules = ["app.main", "uvloop"] if sys.platform != "win32" else ["app.main"]
    if settings.uses_memory_store:
        modules.append("mongomock_motor")
    if settings.model_client == "openai-sdk":
        modules.append("openai")
    problems = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"'{module}' fails to import: {exc}")
    if not problems:
        from app.tools.builtin import missing_imports

        problems = missing_imports()
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        sys.exit(
            f"missing dependencies:\n{lines}\ninstall the service from requirements.lock "
            "(scripts/setup; the Docker image does)"
        )


async def _rotate_secrets(settings: Settings) -> int:
    """Re-seal every tenant's secrets, MCP header values and client tokens' bound context
    under the current key."""
    from app.crypto import SecretBox
    from app.repositories.client_tokens import ClientTokenRepository
    from app.repositories.database import Database
    from app.repositories.mcp_servers import McpServerRepository
    from app.repositories.secrets import SecretRepository
    from app.repositories.tenants import TenantRepository
    from app.services.client_tokens import reseal_client_tokens
    from app.services.mcp_servers import reseal_mcp_headers
    from app.services.secrets import ResealReport, reseal_secrets

    if settings.uses_memory_store:
        sys.exit("rotate-secrets needs MONGODB_URL: the in-memory store holds nothing to rotate")
    current, old = settings.secret_keys()
    box = SecretBox(current, old)
    database = Database.from_settings(settings)
    report = ResealReport()
    try:
        secrets, servers = SecretRepository(database), McpServerRepository(database)
        tokens = ClientTokenRepository(database)
        tenants, after = TenantRepository(database), ""
        while page := await tenants.ids_after(after, limit=500):
            for tenant_id in page:
                await reseal_secrets(secrets, box, tenant_id=tenant_id, report=report)
                await reseal_mcp_headers(servers, box, tenant_id=tenant_id, report=report)
                await reseal_client_tokens(tokens, box, tenant_id=tenant_id, report=report)
            after = page[-1]
    finally:
        await database.close()
    print(
        f"re-encrypted {report.resealed} value(s) under key {box.current_key_id}; "
        f"{report.current} already current; {len(report.failed)} failed"
    )
    for name in report.failed:
        print(f"  - cannot decrypt {name}: add the key that sealed it to SECRETS_OLD_KEYS")
    return 1 if report.failed else 0


async def _migrate(settings: Settings) -> int:
    """Migrate the installation (app/services/migration.py); 1 if something was not moved."""
    from app.container.stores import build_stores_for_command
    from app.services.migration import migrate_installation

    if settings.uses_memory_store:
        sys.exit("migrate needs MONGODB_URL: the in-memory store holds nothing to migrate")
    stores = build_stores_for_command(settings, _check_registry(settings))
    try:
        report = await migrate_installation(
            stores.database, stores.tenants, stores.reconciler, stores.migration
        )
    finally:
        await stores.database.close()
    print("\n".join(report.lines()))
    return 1 if report.kept else 0


def _check_registry(settings: Settings) -> Any:
    from app.tools.registry import load_registry

    return load_registry(settings.functions_module)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fake-model"]:
        from app.fake_model import main as fake_model

        fake_model(argv[1:])
        return
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    parser.add_argument(
        "command",
        nargs="?",
        choices=["serve", "check", "migrate", "new-secrets-key", "rotate-secrets", "fake-model"],
        default="serve",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "new-secrets-key":
        from app.crypto import new_key

        print(new_key())
        return
    settings = _check(settings_only=args.command == "rotate-secrets")
    if args.command == "rotate-secrets":
        sys.exit(asyncio.run(_rotate_secrets(settings)))
    if args.command == "migrate":
        sys.exit(asyncio.run(_migrate(settings)))
    if args.command == "check":
        print("settings, function dictionary and MCP servers are valid; every dependency imports")
        return
    if args.workers > 1 and settings.uses_memory_store:
        # Each worker would hold its own in-memory store: a tenant created through one is
        # unknown to the others (401 on about half the requests).
        sys.exit(
            f"refusing to start {args.workers} workers on the in-memory store: each process "
            "would keep its own data. Set MONGODB_URL to a MongoDB every worker shares, or "
            "run one worker."
        )
    import uvicorn

    from app.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    uvicorn.run(
        "app.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's lines go through our redacting JSON handler
        access_log=False,  # our access log has the route template, tenant and request id
        proxy_headers=False,
        # uvicorn's httptools protocol with HEADER_TIMEOUT_S and MAX_CONNECTIONS (it reads them
        # from the settings in each worker).
        http="app.http_server:GuardedHttpProtocol",
        timeout_keep_alive=settings.keepalive_timeout_s,
        # On SIGTERM: stop accepting, let in-flight chats finish up to their deadline, then
        # run the lifespan's shutdown (clients closed, run records flushed).
        timeout_graceful_shutdown=int(settings.chat_deadline_s) + 5,
    )


if __name__ == "__main__":
    main()
