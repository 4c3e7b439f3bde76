"""An ASGI app in front of another that counts the requests it holds at once: the model's view
of how many chats are in flight."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class InFlight:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.now = 0
        self.most = 0
        self.answered = 0

    def reset(self) -> None:
        self.most, self.answered = self.now, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await self.app(scope, receive, send)
        finally:
            self.now -= 1
            self.answered += 1
