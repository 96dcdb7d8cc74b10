"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}` with the status of the one error table.

The status always comes from `frontends.errors.error_info` (400 bad input, 401 no key, 404 unknown model, 503 queue
full or no worker, 504 timeout, a handler's own 4xx/5xx); this module only words it as OpenAI does, so the OpenAI
SDK raises the matching exception class (BadRequestError, AuthenticationError, NotFoundError, RateLimitError,
InternalServerError) and reads `message`.

Decisions:
- `type` is OpenAI's: `invalid_request_error` for every 4xx but 401 (`authentication_error`) and 429
  (`rate_limit_error`), `server_error` for 5xx. `code` is OpenAI's string where it has one (`model_not_found`,
  `invalid_api_key`, `rate_limit_exceeded`), else null; vLLM puts the int status there, which no client reads.
- `param` names the offending request field (a pydantic location such as `messages.0.content`), else null.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from serve.errors import InvalidInput
from serve.frontends.errors import error_info

CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded", 503: "service_unavailable"}


class InvalidField(InvalidInput):
    """A 400 that names the request field at fault (OpenAI's `param`)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def error_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "server_error"


def body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "param": param,
                      "code": code if code is not None else CODES.get(status)}}  # fmt: skip


def error_of(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI body answering `exc`."""
    if isinstance(exc, ValidationError):
        exc = from_validation(exc)
    info = error_info(exc)
    return info.status, body(info.status, info.message, getattr(exc, "param", None))


def from_validation(exc: ValidationError) -> InvalidField:
    """The first problem pydantic found, as a 400 naming its field and saying what to send instead."""
    problem = exc.errors(include_url=False)[0]
    loc = [str(part) for part in problem.get("loc", ())]
    # a union's branch names ('str', 'list[int]', function-after[...]) are pydantic's, not the request's
    loc = [part for part in loc if "[" not in part and part not in ("str", "int", "list", "float", "bool")]
    param = ".".join(loc) or None
    if problem.get("type") == "extra_forbidden":
        return InvalidField(f"unsupported field {param!r}: serve does not implement it; remove it from the request",
                            param)  # fmt: skip
    message = str(problem.get("msg", "invalid value")).removeprefix("Value error, ")
    value = problem.get("input")
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    where = f"{param}: " if param else ""
    return InvalidField(f"invalid request: {where}{message} (got {shown})", param)
