"""Run an ASGI app with uvicorn on 127.0.0.1 in a background thread (real sockets, real HTTP)."""

from __future__ import annotations

import threading

import uvicorn
from starlette.types import ASGIApp

from tests.support.secantus import free_port
from tests.support.waiting import within_blocking

GRACE_S = 1


class ThreadedServer:
    def __init__(
        self,
        app: ASGIApp,
        *,
        keep_alive_s: int = 5,
        lifespan: str = "off",
        tls: tuple[str, str] | None = None,  # (certificate file, key file): serve HTTPS
    ) -> None:
        self.port = free_port()
        self._scheme = "https" if tls else "http"
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan=lifespan,
            access_log=False,
            timeout_keep_alive=keep_alive_s,
            # Connections still open at stop (an MCP session the app under test keeps in its pool,
            # a stream) get this long, then are cancelled: a server that outlived its test kept
            # serving them in the background for the rest of the run.
            timeout_graceful_shutdown=GRACE_S,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self.port}"

    def start(self) -> ThreadedServer:
        self._thread.start()
        # generous: an app's lifespan (routes, the OpenAPI document) on a loaded machine
        within_blocking(lambda: self._server.started, 60, every_s=0.01)
        return self

    def stop(self, *, force: bool = False) -> None:
        """Stop; `force` drops open connections instead of waiting for them (a dying server).
        The loop watchdog stops listening to this server's loop first: from here it serves no
        request, and its shutdown (lifespan end, tasks cancelled) is outside the watch, as the
        lifespan of an in-process app is."""
        from tests.support.loop_watchdog import not_watching  # a plugin: imported by pytest first

        with not_watching(self._thread.ident):
            self._server.force_exit = force
            self._server.should_exit = True
            self._thread.join(GRACE_S + 10)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(5)
        if self._thread.is_alive():  # never left running for the rest of the run, silently
            raise RuntimeError(f"the test server on port {self.port} did not stop")
