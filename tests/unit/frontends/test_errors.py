"""The one exception -> (HTTP status, TorchServe type, gRPC code) table."""

from __future__ import annotations

import pytest

from serve import errors
from serve.frontends import error_info
from serve.frontends.errors import grpc_code_for_status


@pytest.mark.parametrize(
    ("exc", "status", "type_name", "grpc"),
    [
        (errors.InvalidInput("bad"), 400, "BadRequestException", "INVALID_ARGUMENT"),
        (errors.ArchiveError("bad archive"), 400, "InvalidModelException", "INVALID_ARGUMENT"),
        (errors.Unauthorized("no key"), 401, "InvalidKeyException", "UNAUTHENTICATED"),
        (errors.ModelNotFound("Model not found: m"), 404, "ModelNotFoundException", "NOT_FOUND"),
        (errors.ModelApiDisabled("off"), 405, "MethodNotAllowedException", "PERMISSION_DENIED"),
        (errors.RequestTooLarge("big"), 413, "RequestEntityTooLargeException", "RESOURCE_EXHAUSTED"),
        (errors.QueueFull("full"), 503, "ServiceUnavailableException", "UNAVAILABLE"),
        (errors.ModelNotReady("no worker"), 503, "ServiceUnavailableException", "UNAVAILABLE"),
        (errors.RequestTimeout("slow"), 504, "RequestTimeoutException", "DEADLINE_EXCEEDED"),
        (errors.WorkerError("died"), 500, "InternalServerException", "INTERNAL"),
        (errors.ModelLoadError("ImportError: no module x"), 500, "InternalServerException", "INTERNAL"),
        (errors.InvalidModel("CheckpointError: lin.pt: refused"), 400, "InvalidModelException", "INVALID_ARGUMENT"),
        (errors.PredictionException("teapot", 418), 418, "InternalServerException", "FAILED_PRECONDITION"),
        (errors.PredictionException("custom", 599), 599, "InternalServerException", "INTERNAL"),
        (errors.PredictionException("not an error code", 200), 500, "InternalServerException", "INTERNAL"),
        (errors.ServeError("generic"), 500, "InternalServerException", "INTERNAL"),
    ],
)
def test_table(exc, status, type_name, grpc):
    info = error_info(exc)
    assert (info.status, info.type, info.message, info.grpc_code) == (status, type_name, str(exc), grpc)
    assert info.body() == {"code": status, "type": type_name, "message": str(exc)}


def test_subclasses_map_like_their_parent_and_a_code_attribute_overrides():
    class Mismatch(errors.WorkerError):
        code = 503

    class Custom(errors.ModelNotFound):
        pass

    assert (error_info(Mismatch("2 results for 3 requests")).status, error_info(Mismatch("x")).type) == (
        503, "InternalServerException")  # fmt: skip
    assert error_info(Custom("x")).status == 404


def test_a_code_set_on_a_client_error_picks_torchserve_type_for_that_status():
    conflict = errors.InvalidInput("Model version 1.0 is already registered for model m")
    conflict.code = 409  # type: ignore[attr-defined]
    timeout = errors.RequestTimeout("Timed out while cleaning resources: m")
    timeout.code = 408  # type: ignore[attr-defined]
    info = error_info(conflict)
    assert (info.status, info.type, info.grpc_code) == (409, "ConflictStatusException", "ABORTED")
    assert (error_info(timeout).status, error_info(timeout).type) == (408, "RequestTimeoutException")


def test_unexpected_exceptions_are_500_naming_their_type():
    info = error_info(KeyError("k"))
    assert (info.status, info.type, info.message) == (500, "InternalServerException", "KeyError: 'k'")


def test_grpc_codes_for_other_statuses():
    assert [grpc_code_for_status(s) for s in (409, 429, 418, 502)] == [
        "ABORTED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "INTERNAL"]  # fmt: skip
