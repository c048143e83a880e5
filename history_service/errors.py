"""HTTP errors: ``{"error": {"code", "message", ...}}`` with stable codes.

    ServiceError(Exception)
    ├── ApiError                 carries status, code, message and extra fields
    └── ContentEncodingError     a compressed request body is corrupt or unsupported
        └── ContentTooLargeError it decodes past its size limit

Store, codec and content-coding errors are translated into `ApiError` at the endpoint boundary.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from codec import encode

__all__ = [
    "ApiError",
    "ContentEncodingError",
    "ContentTooLargeError",
    "ServiceError",
    "error_response",
    "handle_api_error",
]


class ServiceError(Exception):
    """Base class for the service's own errors."""


class ContentEncodingError(ServiceError, ValueError):
    """Raised when a body cannot be decoded with its content coding."""


class ContentTooLargeError(ContentEncodingError):
    """Raised when a compressed body decodes to more than its size limit; decoding stops there."""


class ApiError(ServiceError):
    """Raised by endpoints to answer with a JSON error body."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    body = encode({"error": {"code": code, "message": message, **extra}})
    return Response(body, status_code=status, media_type="application/json")


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    response = error_response(exc.status, exc.code, exc.message, **exc.extra)
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response
