"""The one error tree. Services raise these; app/api/problems.py turns each into an RFC 9457
problem response with the class's status (anything else is a logged, generic 500).

* AppError (500) ....................................... here
  * BadRequestError (400: two Authorization headers)
  * UnauthorizedError (401, `WWW-Authenticate: Bearer`)
  * ForbiddenError (403)
  * NotFoundError (404)
  * ConflictError (409)
  * UnprocessableError (422, `errors`: each problem at its JSON path)
    * UnavailableToolsError: requested tools the caller cannot use  app/services/toolbox.py
    * NameClashError: two tools offered under one name ..... app/services/toolbox.py
  * ServiceUnavailableError (503)
  * DatabaseError (500): the database refused an operation ....... app/repositories/
    * DatabaseUnavailable (503, `Retry-After`): not reached, or no answer in time
  * TooManyRequestsError (429, `Retry-After`) ........... app/limits.py
  * ModelError: the model call failed ................... app/chat/model.py
    * ModelNotConfiguredError (503)
    * ModelRateLimitedError (503)
    * ModelUpstreamError (502)
    * ModelTimeoutError (504)
  * McpUnavailableError (502) ........................... app/mcp/hub.py
  * McpTimeoutError (504) ............................... app/mcp/hub.py

Errors that never become a response on their own stay beside their code: a tool's failure goes
back to the model as its result (app/tools/outcome.py); `UnreadableToolError`, `DocumentError`,
`McpConfigError` and `FunctionDictionaryError` list problems that a service or start-up reports.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

# RFC 9110 names where Python 3.11's HTTPStatus still has the older ones.
_RFC9110_TITLES = {413: "Content Too Large", 422: "Unprocessable Content"}


def status_title(status: int) -> str:
    """The problem `title` for a status: one wording for every error of that status."""
    return _RFC9110_TITLES.get(status) or HTTPStatus(status).phrase


def problem_body(
    status: int,
    detail: str,
    *,
    title: str | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The one JSON error shape (RFC 9457 problem details)."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or status_title(status),
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return body


class AppError(Exception):
    """Base of every error a service raises; the handler turns it into a problem response."""

    status_code = 500

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
        self.errors = errors
        self.headers = headers

    @property
    def title(self) -> str:
        return status_title(self.status_code)

    def body(self) -> dict[str, Any]:
        """The problem details (RFC 9457) this error is answered with."""
        return problem_body(self.status_code, self.message, title=self.title, errors=self.errors)


class BadRequestError(AppError):
    status_code = 400


class UnauthorizedError(AppError):
    status_code = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class ForbiddenError(AppError):
    status_code = 403


class NotFoundError(AppError):
    status_code = 404


class ConflictError(AppError):
    status_code = 409


class UnprocessableError(AppError):
    """A well-formed request whose content breaks a rule; `errors` lists each problem."""

    status_code = 422


class ServiceUnavailableError(AppError):
    status_code = 503


def field_error(path: str, message: str) -> dict[str, str]:
    """One entry of a problem's `errors` list: a JSON path and what is wrong there."""
    return {"path": path, "message": message}


class DatabaseError(AppError):
    """The database refused an operation (a driver error that no retry fixes). Repositories
    raise it (app/repositories/database.py) after logging the driver's error; the answer says
    nothing of it."""

    status_code = 500

    def __init__(self, message: str = "An unexpected error occurred.") -> None:
        super().__init__(message)


class DatabaseUnavailable(DatabaseError):
    """The database could not be reached or did not answer in time: worth a retry.

    `unreachable`: no server could be reached at all (refused, reset), rather than one that
    answered too slowly (`too_slow`: it was reached and the operation timed out, so a smaller
    one may pass). `outage_s`: raised at once by the open circuit (app/repositories/circuit.py),
    without asking the database: how long it has been down."""

    status_code = 503

    def __init__(
        self,
        message: str = "The database is not answering; try again shortly.",
        *,
        unreachable: bool = False,
        too_slow: bool = False,
        outage_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": "2"}
        self.unreachable = unreachable
        self.too_slow = too_slow
        self.outage_s = outage_s


def database_unavailable(exc: BaseException) -> bool:
    """The database could not be reached or did not answer in time (worth a retry), as opposed
    to refusing the operation."""
    return isinstance(exc, DatabaseUnavailable)
