"""A tenant's identity provider as the service meets it: OIDC discovery and a JWKS served over
real HTTP on 127.0.0.1 (uvicorn on a thread), with signing keys the test adds and removes, and
tokens it signs with PyJWT. It can also answer slowly (never finishing its body) or hugely."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import ThreadedServer

Mode = Literal["normal", "slow", "huge", "broken", "dropped"]
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass
class Issuer:
    """Keys by kid; `served` are the kids the JWKS lists (a key can sign without being listed)."""

    keys: dict[str, PrivateKey] = field(default_factory=dict)
    served: list[str] = field(default_factory=list)
    mode: Mode = "normal"
    jwks_requests: int = 0
    discovery_requests: int = 0
    issuer_path: str = ""
    server: ThreadedServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None, "start() first"
        return self.server.url

    @property
    def issuer(self) -> str:
        return self.url + self.issuer_path

    @property
    def jwks_uri(self) -> str:
        return f"{self.url}/jwks"

    def add_key(self, kid: str, kind: Literal["RSA", "EC"] = "RSA", *, serve: bool = True) -> None:
        self.keys[kid] = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "RSA"
            else ec.generate_private_key(ec.SECP256R1())
        )
        if serve:
            self.served.append(kid)

    def remove_key(self, kid: str) -> None:
        self.served.remove(kid)

    def jwks(self) -> dict[str, Any]:
        listed = []
        for kid in self.served:
            key = self.keys[kid]
            if isinstance(key, rsa.RSAPrivateKey):
                jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
            else:
                jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
            listed.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": listed}

    def public_pem(self, kid: str) -> bytes:
        return (
            self.keys[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def token(
        self,
        audience: str | list[str],
        *,
        kid: str | None = None,
        algorithm: str | None = None,
        lifetime_s: float = 300,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token signed by `kid` (default: the first key), for `audience`, valid now."""
        kid = kid or next(iter(self.keys))
        key = self.keys[kid]
        algorithm = algorithm or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        now = int(time.time())
        payload = {"iss": self.issuer, "aud": audience, "sub": "u-42", "iat": now}
        payload["exp"] = now + int(lifetime_s)
        payload.update(claims)
        payload = {name: value for name, value in payload.items() if value is not None}
        return jwt.encode(
            payload, key, algorithm=algorithm, headers={"kid": kid, **(headers or {})}
        )

    def app(self) -> Starlette:
        async def discovery(request: Request) -> Response:
            self.discovery_requests += 1
            return JSONResponse({"issuer": self.issuer, "jwks_uri": self.jwks_uri})

        async def keys(request: Request) -> Response:
            self.jwks_requests += 1
            if self.mode == "slow":
                return StreamingResponse(_never_finished(), media_type="application/json")
            if self.mode == "huge":
                padding = "x" * 400_000
                return JSONResponse({"keys": self.jwks()["keys"], "padding": padding})
            if self.mode == "broken":
                return Response("<html>oops</html>", status_code=500)
            if self.mode == "dropped":
                return StreamingResponse(_cut_short(), media_type="application/json")
            return JSONResponse(self.jwks())

        return Starlette(
            routes=[
                Route(f"{self.issuer_path}/.well-known/openid-configuration", discovery),
                Route("/jwks", keys),
            ]
        )

    def start(self) -> Issuer:
        self.server = ThreadedServer(self.app()).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(force=True)


async def _never_finished() -> Any:
    """A body that starts and never ends: the client's deadline ends it (or the server's stop)."""
    yield b'{"keys": ['
    await asyncio.Event().wait()


async def _cut_short() -> Any:
    """A body that starts, then the server drops the connection (an error mid-answer)."""
    yield b'{"keys": ['
    raise ConnectionResetError("the issuer went away mid-answer")
