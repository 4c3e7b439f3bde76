"""Tenant secrets: sealed on the way in, opened only when a tool runs, never shown."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.errors import ConflictError, NotFoundError, UnprocessableError, field_error
from app.kit.crypto import SecretBox, UnsealError, associated_data
from app.limits.local import Fence, local_fence
from app.repositories.secrets import SecretRepository
from app.schemas.secrets import SecretInfo

logger = logging.getLogger(__name__)


def secret_aad(tenant_id: str, name: str) -> bytes:
    return associated_data(tenant_id, "secret", name)


@dataclass
class ResealReport:
    """What a key rotation did; `failed` names (never values) what could not be opened."""

    resealed: int = 0
    current: int = 0
    failed: list[str] = field(default_factory=list)


class SecretService:
    def __init__(
        self,
        *,
        secrets: SecretRepository,
        box: SecretBox,
        max_count: int,
        max_bytes: int,
        fence: Fence | None = None,
    ) -> None:
        self._secrets = secrets
        self._box = box
        self._max_count = max_count
        self._max_bytes = max_bytes
        self._fence = fence or local_fence()

    @property
    def box(self) -> SecretBox:
        return self._box

    async def put(self, name: str, value: str, *, tenant_id: str) -> tuple[SecretInfo, bool]:
        if len(value.encode()) > self._max_bytes:
            raise UnprocessableError(
                "The secret is too large.",
                errors=[field_error("$.value", f"at most {self._max_bytes} bytes (UTF-8)")],
            )
        if "\x00" in value:
            raise UnprocessableError(
                "The secret is not valid.", errors=[field_error("$.value", "contains NUL")]
            )
        sealed = self._box.seal(value, secret_aad(tenant_id, name))
        async with self._fence(tenant_id, "secrets"):  # the cap holds exactly
            if not await self._secrets.exists(name, tenant_id=tenant_id):
                if await self._secrets.count(tenant_id=tenant_id) >= self._max_count:
                    raise ConflictError(
                        f"the tenant already has {self._max_count} secrets "
                        "(MAX_SECRETS_PER_TENANT); delete one first"
                    )
            stored, created = await self._secrets.put(name, sealed, tenant_id=tenant_id)
        return SecretInfo.model_validate(stored), created

    async def all(self, *, tenant_id: str) -> list[SecretInfo]:
        return [SecretInfo.model_validate(d) for d in await self._secrets.all(tenant_id=tenant_id)]

    async def delete(self, name: str, *, tenant_id: str) -> None:
        if not await self._secrets.delete(name, tenant_id=tenant_id):
            raise NotFoundError(f"no secret named '{name}'")

    async def resolve(self, names: set[str], *, tenant_id: str) -> dict[str, str | None]:
        """The opened values of `names`; None for a secret that is absent or will not open
        (the tool that needs it then fails with an error naming it, never with its value)."""
        if not names:
            return {}
        sealed = await self._secrets.sealed(sorted(names), tenant_id=tenant_id)
        values: dict[str, str | None] = dict.fromkeys(names)
        for name, text in sealed.items():
            try:
                values[name] = self._box.open(text, secret_aad(tenant_id, name))
            except UnsealError as exc:
                logger.error("tenant %s: secret '%s' cannot be opened: %s", tenant_id, name, exc)
        return values

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._secrets.drop_all(tenant_id=tenant_id)


async def reseal_each(
    sealed: dict[str, str],
    box: SecretBox,
    *,
    aad: Callable[[str], bytes],
    label: Callable[[str], str],
    write: Callable[[str, str, str], Awaitable[bool]],
    report: ResealReport,
) -> None:
    """Re-seal each value an old key sealed: `write(key, old, new)` stores it unless the value
    changed meanwhile (then it was written under the current key)."""
    for key, text in sealed.items():
        if not box.needs_resealing(text):
            report.current += 1
            continue
        try:
            fresh = box.seal(box.open(text, aad(key)), aad(key))
        except UnsealError:
            report.failed.append(label(key))
            continue
        if await write(key, text, fresh):
            report.resealed += 1
        else:
            report.current += 1  # replaced meanwhile, under the current key


async def reseal_secrets(
    secrets: SecretRepository, box: SecretBox, *, tenant_id: str, report: ResealReport
) -> None:
    """Re-seal every secret of the tenant that an old key sealed."""
    await reseal_each(
        await secrets.sealed_all(tenant_id=tenant_id),
        box,
        aad=lambda name: secret_aad(tenant_id, name),
        label=lambda name: f"{tenant_id}/secrets/{name}",
        write=lambda name, old, new: secrets.reseal(name, old, new, tenant_id=tenant_id),
        report=report,
    )
