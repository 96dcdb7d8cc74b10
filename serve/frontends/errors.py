"""THE table from exception type to HTTP status, TorchServe's error `type` name and gRPC status code name.

Every frontend (REST now, gRPC in issue 7) answers an error through `error_info(exc)`; nothing else maps
exceptions to statuses. The lookup walks the exception's MRO, so a subclass maps like its nearest listed parent.

Decisions on TorchServe's quirks:
- A wrong or missing token is 401 (TorchServe: 400 InvalidKeyException); the `type` stays InvalidKeyException.
- A response timeout is 504 RequestTimeoutException (TorchServe: 500 "Worker died."), so clients can tell a slow
  model from a crashed one.
- A handler's `PredictionException(message, code)` answers with its code, as TorchServe does, when the code is an
  error status (400-599); any other code becomes 500. Any ServeError carrying an int `code` attribute is treated
  the same way (the registry sets 409 on "already registered", 403 on "cannot remove the default version"); the
  type name then follows the status (ConflictStatusException for 409, ...), except for errors a worker or handler
  produced, which keep InternalServerException.
- gRPC codes follow TorchServe's HTTP->gRPC mapping, except that an unknown model is NOT_FOUND (TorchServe says
  INTERNAL), a service-side timeout is DEADLINE_EXCEEDED, and a 507 (an answer over max_response_size, a worker
  out of memory) is RESOURCE_EXHAUSTED, as grpc says of a message over its limit (TorchServe: INTERNAL, which says
  the server is broken).
- Errors a worker or handler produced keep TorchServe's type InternalServerException whatever their status.
"""

from __future__ import annotations

import dataclasses

from serve import errors

DEFAULT_STATUS = 500
DEFAULT_TYPE = "InternalServerException"


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    status: int
    type: str
    message: str
    grpc_code: str  # a `grpc.StatusCode` member name

    def body(self) -> dict[str, object]:
        """TorchServe's error body: `{"code": status, "type": ..., "message": ...}`."""
        return {"code": self.status, "type": self.type, "message": self.message}


# exception type -> (HTTP status, TorchServe exception name); the gRPC code derives from the status
ERROR_TABLE: dict[type[BaseException], tuple[int, str]] = {
    errors.InvalidInput: (400, "BadRequestException"),
    errors.ArchiveError: (400, "InvalidModelException"),
    errors.CheckpointError: (400, "InvalidModelException"),
    errors.InvalidModel: (400, "InvalidModelException"),
    errors.Unauthorized: (401, "InvalidKeyException"),
    errors.ModelNotFound: (404, "ModelNotFoundException"),
    errors.WorkflowNotFound: (404, "WorkflowNotFoundException"),
    errors.ModelApiDisabled: (405, "MethodNotAllowedException"),
    errors.RequestTooLarge: (413, "RequestEntityTooLargeException"),
    errors.ResponseTooLarge: (507, DEFAULT_TYPE),
    errors.ModelNotReady: (503, "ServiceUnavailableException"),
    errors.QueueFull: (503, "ServiceUnavailableException"),
    errors.RequestTimeout: (504, "RequestTimeoutException"),
    errors.WorkerError: (500, DEFAULT_TYPE),
    errors.ModelLoadError: (500, DEFAULT_TYPE),
    errors.PredictionException: (500, DEFAULT_TYPE),
    errors.ConfigError: (500, DEFAULT_TYPE),
    errors.ServeError: (500, DEFAULT_TYPE),
}

# TorchServe's type names by status, for a ServeError whose `code` overrides the table's status
STATUS_TYPES = {
    400: "BadRequestException",
    403: "InvalidModelVersionException",
    404: "ModelNotFoundException",
    405: "MethodNotAllowedException",
    408: "RequestTimeoutException",
    409: "ConflictStatusException",
    503: "ServiceUnavailableException",
}

# TorchServe's HTTP -> gRPC mapping (spec section 4); other 4xx FAILED_PRECONDITION, other 5xx INTERNAL
GRPC_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "PERMISSION_DENIED",  # the model API switched off: TorchServe's code for it
    409: "ABORTED",
    413: "RESOURCE_EXHAUSTED",
    416: "OUT_OF_RANGE",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    507: "RESOURCE_EXHAUSTED",  # an answer over max_response_size, memory that ran out: not INTERNAL
}


def grpc_code_for_status(status: int) -> str:
    if status in GRPC_CODES:
        return GRPC_CODES[status]
    return "FAILED_PRECONDITION" if 400 <= status < 500 else "INTERNAL"


def error_info(exc: BaseException) -> ErrorInfo:
    """How to answer `exc`: status, TorchServe type name, message, gRPC code."""
    status, type_name = _lookup(type(exc))
    code = getattr(exc, "code", None)
    if isinstance(exc, errors.ServeError) and isinstance(code, int) and not isinstance(code, bool):
        status = code if 400 <= code <= 599 else DEFAULT_STATUS
        if type_name != DEFAULT_TYPE:
            type_name = STATUS_TYPES.get(status, type_name)
    message = str(exc) if isinstance(exc, errors.ServeError) else f"{type(exc).__name__}: {exc}"
    return ErrorInfo(status, type_name, message, grpc_code_for_status(status))


def _lookup(cls: type[BaseException]) -> tuple[int, str]:
    for base in cls.__mro__:
        if base in ERROR_TABLE:
            return ERROR_TABLE[base]
    return DEFAULT_STATUS, DEFAULT_TYPE
