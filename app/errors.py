"""The one error tree. Services raise these; app/api/problems.py turns them into responses."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any


class AppError(Exception):
    """Base of every error a service raises; the handler turns it into a problem response."""

    status_code = 500
    title = "Internal Server Error"

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
            self.title = HTTPStatus(status_code).phrase
        self.errors = errors
        self.headers = headers


class BadRequestError(AppError):
    status_code = 400
    title = "Bad Request"


class UnauthorizedError(AppError):
    status_code = 401
    title = "Unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class ForbiddenError(AppError):
    status_code = 403
    title = "Forbidden"


class NotFoundError(AppError):
    status_code = 404
    title = "Not Found"


class ConflictError(AppError):
    status_code = 409
    title = "Conflict"


class PayloadTooLargeError(AppError):
    status_code = 413
    title = "Content Too Large"


class UnprocessableError(AppError):
    """A well-formed request whose content breaks a rule; `errors` lists each problem."""

    status_code = 422
    title = "Unprocessable Content"


class ServiceUnavailableError(AppError):
    status_code = 503
    title = "Service Unavailable"


def field_error(path: str, message: str) -> dict[str, str]:
    """One entry of a problem's `errors` list: a JSON path and what is wrong there."""
    return {"path": path, "message": message}
