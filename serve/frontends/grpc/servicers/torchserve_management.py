"""TorchServe's `ManagementAPIsService` (torchserve-compat.md section 4): Register, Describe, List, Scale,
SetDefault, Unregister, each through the DataPlane.

`msg` holds what the REST API answers: the status text for Register/Scale/SetDefault/Unregister, the pretty JSON
for Describe (`model_version` "all" describes every version) and List. Zero or empty fields mean "use the
default", as in TorchServe (so min_worker 0 means 1 worker; scale to zero through REST). A negative worker
count (`initial_workers`, `min_worker`, `max_worker`) is INVALID_ARGUMENT, as is one over the worker caps
(serve/management/limits.py); TorchServe reads a negative one as "not given".

Deliberate differences from TorchServe:
- ListModels with `limit` 0 (the proto default) lists up to 100 models (TorchServe: an empty page); a `limit` over 100
  or below 0, or a `next_page_token` out of range, is INVALID_ARGUMENT (TorchServe clamps them).
- errors map by serve.frontends.errors: the model API switched off is FAILED_PRECONDITION (TorchServe:
  PERMISSION_DENIED "Model API disabled"), an unknown model NOT_FOUND.
- `s3_sse_kms`, `number_gpu` and ScaleWorker's `timeout` are accepted and ignored.
"""

from __future__ import annotations

from typing import Any

from grpc.aio import ServicerContext as Context

from serve.batching import json_values
from serve.frontends.dataplane import DataPlane
from serve.frontends.grpc.generated import management_pb2 as pb
from serve.frontends.grpc.generated import management_pb2_grpc as pb_grpc
from serve.frontends.grpc.status import abort


def _positive(value: int) -> int | None:
    """TorchServe's proto defaults: an int <= 0 means "not given"."""
    return value if value > 0 else None


def _count(value: int) -> int | None:
    """A worker count: 0 (the proto default) means "not given"; a negative one is passed on to be refused."""
    return None if value == 0 else value


def _pretty(obj: Any) -> str:
    """TorchServe's pretty JSON; NaN and Infinity as null, as the REST answers (standard JSON)."""
    return json_values.dumps(obj, indent=2)


class TorchServeManagementServicer(pb_grpc.ManagementAPIsServiceServicer):
    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    async def RegisterModel(self, request: pb.RegisterModelRequest, context: Context) -> pb.ManagementResponse:
        try:
            msg = await self.dataplane.register(
                request.url, model_name=request.model_name or None, handler=request.handler or None,
                runtime=request.runtime or None, batch_size=_positive(request.batch_size),
                max_batch_delay=_positive(request.max_batch_delay),
                initial_workers=_count(request.initial_workers), synchronous=request.synchronous,
                response_timeout=_positive(request.response_timeout),
                startup_timeout=_positive(request.startup_timeout),
            )  # fmt: skip
        except Exception as exc:
            await abort(context, exc)
        return pb.ManagementResponse(msg=msg)

    async def DescribeModel(self, request: pb.DescribeModelRequest, context: Context) -> pb.ManagementResponse:
        all_versions = request.model_version == "all"
        version = None if all_versions else request.model_version or None
        try:
            described = await self.dataplane.describe(request.model_name, version, all_versions=all_versions,
                                                      customized=request.customized)  # fmt: skip
        except Exception as exc:
            await abort(context, exc)
        return pb.ManagementResponse(msg=_pretty(described))

    async def ListModels(self, request: pb.ListModelsRequest, context: Context) -> pb.ManagementResponse:
        try:
            page = self.dataplane.list_models(request.limit if request.limit != 0 else 100, request.next_page_token)
        except Exception as exc:
            await abort(context, exc)
        return pb.ManagementResponse(msg=_pretty(page))

    async def ScaleWorker(self, request: pb.ScaleWorkerRequest, context: Context) -> pb.ManagementResponse:
        try:
            msg = await self.dataplane.scale(request.model_name, request.model_version or None,
                                             _count(request.min_worker), _count(request.max_worker),
                                             synchronous=request.synchronous)  # fmt: skip
        except Exception as exc:
            await abort(context, exc)
        return pb.ManagementResponse(msg=msg)

    async def SetDefault(self, request: pb.SetDefaultRequest, context: Context) -> pb.ManagementResponse:
        try:
            msg = self.dataplane.set_default(request.model_name, request.model_version)
        except Exception as exc:
            await abort(context, exc)
        return pb.ManagementResponse(msg=msg)

    async def UnregisterModel(self, request: pb.UnregisterModelRequest, context: Context) -> pb.ManagementResponse:
        try:
            msg = await self.dataplane.unregister(request.model_name, request.model_version or None)
        except Exception as exc:
            await abort(context, exc)
        return pb.ManagementResponse(msg=msg)
