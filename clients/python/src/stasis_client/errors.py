"""Exceptions mapped from the API's stable error codes.

Every non-2xx answer of the daemon is ``{"error": {"code", "message", "field"?}}``;
the client raises the subclass of :class:`StasisError` named after the code
(``not_found`` -> :class:`NotFound`, ...). An unknown code falls back on the
HTTP status, so a code added to the server later still raises something
meaningful.
"""

from __future__ import annotations

from typing import Any


class StasisError(Exception):
    """An error answered by the stasis daemon (or the transport to it)."""

    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.status = status
        self.field = field

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.code}: {self.message}{where}"


class InvalidArgument(StasisError):
    code = "invalid_argument"


class InvalidManifest(InvalidArgument):
    code = "invalid_manifest"


class Unauthorized(StasisError):
    code = "unauthorized"


class NotFound(StasisError):
    code = "not_found"


class InvalidState(StasisError):
    code = "invalid_state"


class Busy(InvalidState):
    code = "busy"


class AlreadyExists(InvalidState):
    """A create-only request (an exclusive file write, a mkdir without
    parents) found the path taken (409)."""

    code = "already_exists"


class PayloadTooLarge(StasisError):
    code = "payload_too_large"


class RateLimited(StasisError):
    code = "rate_limited"


class Overloaded(RateLimited):
    """The sandbox has its limit of requests in flight and a full wait queue
    (429 with Retry-After): nothing was done; retry later."""

    code = "overloaded"


class Unavailable(StasisError):
    """The node is draining (503 with Retry-After): it starts no sandbox;
    nothing was done; retry, where another node serves it."""

    code = "unavailable"


class Timeout(StasisError):
    code = "timeout"


class IntegrityError(StasisError):
    code = "integrity_error"


class IncompatibleSnapshot(StasisError):
    """A snapshot this node cannot load (e.g. a memory image saved under
    another QEMU version, 422): nothing was changed; the sandbox stays paused."""

    code = "incompatible_snapshot"


class Unsupported(StasisError):
    code = "unsupported"


class BackendError(StasisError):
    code = "backend_error"


class InternalError(StasisError):
    code = "internal"


class Forbidden(StasisError):
    """Refused: e.g. a signed port URL that expired, was revoked or altered."""

    code = "forbidden"


class PortUnreachable(StasisError):
    """Nothing listens on the sandbox port asked for (the sandbox is unharmed)."""

    code = "port_unreachable"


class ConnectionFailed(StasisError):
    """The daemon could not be reached at all (not an answer from it)."""

    code = "connection_failed"


class CodeError(StasisError):
    """Code run in a persistent interpreter session raised an exception."""

    code = "code_error"

    def __init__(self, message: str, *, output: str) -> None:
        super().__init__(message)
        self.output = output


BY_CODE: dict[str, type[StasisError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        InvalidManifest,
        Unauthorized,
        NotFound,
        InvalidState,
        Busy,
        AlreadyExists,
        PayloadTooLarge,
        RateLimited,
        Overloaded,
        Unavailable,
        Timeout,
        IntegrityError,
        IncompatibleSnapshot,
        Unsupported,
        BackendError,
        InternalError,
        Forbidden,
        PortUnreachable,
    )
}

BY_STATUS: dict[int, type[StasisError]] = {
    400: InvalidArgument,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: InvalidState,
    413: PayloadTooLarge,
    422: IntegrityError,
    429: RateLimited,
    501: Unsupported,
    502: PortUnreachable,
    504: Timeout,
}


def error_from_response(status: int, body: Any, text: str = "") -> StasisError:
    """The exception for an error answer (``body`` is the decoded JSON, if any)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        code = detail["code"]
        cls = BY_CODE.get(code) or BY_STATUS.get(status, StasisError)
        field = detail.get("field")
        return cls(
            str(detail.get("message", "")),
            code=code,
            status=status,
            field=field if isinstance(field, str) else None,
        )
    cls = BY_STATUS.get(status, InternalError)
    return cls(f"HTTP {status}: {text[:500]}", status=status)
