"""One exception tree for the serving stack, free of any protocol.

Frontends map these to HTTP and gRPC status codes through one table; nothing here knows about either.
The runtime stack (tensor, nn, serialization) raises Python's ValueError/TypeError/RuntimeError like
PyTorch does, except CheckpointError, which a checkpoint loader raises when it refuses a file.
"""


class ServeError(Exception):
    """Base of every error the serving stack raises on purpose."""


class InvalidInput(ServeError):
    """The request or the value a user passed is malformed."""


class ModelNotFound(ServeError):
    """No model (or no such version) is registered under that name."""


class WorkflowNotFound(ModelNotFound):
    """No workflow is registered under that name (serve/workflows)."""


class ModelNotReady(ServeError):
    """The model is registered but has no live worker to answer."""


class QueueFull(ServeError):
    """The model's job queue is full; the client should retry later."""


class RequestTimeout(ServeError):
    """The request was not answered within its response timeout."""


class ArchiveError(ServeError):
    """A model archive is malformed or unsafe to extract."""


class CheckpointError(ServeError):
    """A checkpoint cannot be read, or holds something the safe loader refuses."""


class PredictionException(ServeError):
    """Raised by a handler to answer one request with a chosen status code."""

    def __init__(self, message: str, code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Unauthorized(ServeError):
    """The request's token is missing, wrong or expired."""


class ModelApiDisabled(ServeError):
    """A model registration or removal while the model API is off (`--enable-model-api` turns it on)."""


class RequestTooLarge(ServeError):
    """A request body over `max_request_size`."""


class ResponseTooLarge(ServeError):
    """An answer over `max_response_size`, counted as it is sent (a REST body, a serialized gRPC message)."""


class WorkerError(ServeError):
    """A worker process died or failed a batch; the message says why."""


class ModelLoadError(ServeError):
    """A model's handler failed to load; the message carries the handler's error."""


class InvalidModel(ModelLoadError):
    """A model failed to load because a file of its archive is refused (a checkpoint the safe loader rejects):
    the archive's fault, not the server's."""


class ConfigError(ServeError):
    """A configuration value is malformed; the message names the key and the value."""
