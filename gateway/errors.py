"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` with the right status."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "NO_RETRY",
    "SHUTTING_DOWN_CODE",
    "TRANSIENT_4XX",
    "UPLOAD_ENDED",
    "APIError",
    "error_body",
    "no_content",
    "responses_error_event",
    "shutting_down",
    "sse_error",
]

#: 4xx statuses that say nothing about the request itself: another try may be answered.
TRANSIENT_4XX = frozenset({408, 409, 425, 429})
#: Sent with errors a client must not retry (the OpenAI SDKs obey it over the status code).
NO_RETRY = {"x-should-retry": "false"}
#: The ``code`` of the 503 a shutdown's deadline gives the requests still open.
SHUTTING_DOWN_CODE = "shutting_down"


class APIError(Exception):
    """An error the client should see, with its HTTP status and OpenAI error fields.

    >>> raise APIError(404, "The model `gpt-5` does not exist", code="model_not_found")
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _default_type(status)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def json(self) -> bytes:
        return msgspec.json.encode(self.body())


def error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def no_content(param: str) -> APIError:
    """The 400 for a turn with no content (``null`` or ``[]``) where one is needed, naming it
    (``messages[0].content``), as OpenAI words it."""
    return APIError(400, f"'{param}' must be a string or a non-empty list of content parts.",
                    param=param, code="invalid_value")  # fmt: skip


#: Set (True) in a request's ``scope["state"]`` when a shutdown's deadline ended its upload
#: (``CorkedHttpToolsProtocol.end_upload``): its app hears a disconnect, a 503, not a 499.
UPLOAD_ENDED = "cachegate.upload_ended"


def shutting_down() -> APIError:
    """The retryable 503 a shutdown's deadline gives each request still open."""
    return APIError(
        503, "The gateway is shutting down; send the request again.", code=SHUTTING_DOWN_CODE
    )


def sse_error(error: APIError) -> bytes:
    """An error inside a stream that has already started (the status line is gone)."""
    return b"data: " + error.json() + b"\n\n"


def responses_error_event(error: APIError, sequence: int) -> bytes:
    """An error inside a Responses stream, as OpenAI sends one (the SDKs' ``ResponseErrorEvent``,
    not the ``{"error": ...}`` body of a failed request), numbered ``sequence``."""
    event = {"type": "error", "code": error.code, "message": error.message,
             "param": error.param, "sequence_number": sequence}  # fmt: skip
    return b"event: error\ndata: " + msgspec.json.encode(event) + b"\n\n"


def _default_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "invalid_request_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "api_error"
    return "invalid_request_error"
