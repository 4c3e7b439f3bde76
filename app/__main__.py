"""`python -m app [serve|check]`: validate settings and the function dictionary, then serve.

Problems are printed as one plain list and the process exits 1, without a traceback.
"""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from app.config import Settings
from app.mcp.config import McpConfigError, load_operator_servers
from app.tools.registry import FunctionDictionaryError, load_registry, validate_registry


def _check(settings_only: bool = False) -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        lines = [
            f"  - {'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()
        ]
        sys.exit("invalid settings:\n" + "\n".join(lines))
    if not settings_only:
        try:
            validate_registry(load_registry(settings.functions_module))
        except FunctionDictionaryError as exc:
            sys.exit(str(exc))
        try:
            load_operator_servers(settings.mcp_servers_json, settings.mcp_servers_file)
        except McpConfigError as exc:
            sys.exit(str(exc))
    return settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["serve", "check"], default="serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    settings = _check()
    if args.command == "check":
        print("settings, function dictionary and MCP servers are valid")
        return
    import uvicorn

    uvicorn.run(
        "app.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=settings.log_level.lower(),
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()
