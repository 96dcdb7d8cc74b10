"""Triton's statistics and model repository rpcs of `inference.GRPCInferenceService`, mixed into KServeV2Servicer
(kserve_v2.py): ModelStatistics, RepositoryModelLoad and RepositoryModelUnload answer what the REST routes do
(routers/triton.py), from the same protocol-free calls (frontends/oip/statistics.py, model_control.py).

Load and unload take the management key (grpc/auth.py checks it for these two rpcs on the inference server) and
`--enable-model-api`. A load's parameters arrive as Triton's ModelRepositoryParameter oneof; `config` is a
string_param holding the JSON ModelConfig override, `file:<path>` a bytes_param (refused: see model_control.py).
"""

from __future__ import annotations

import grpc
from google.protobuf import json_format
from grpc.aio import ServicerContext as Context

from serve.frontends.dataplane import DataPlane
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as pb
from serve.frontends.grpc.servicers.parameters import parameters_of
from serve.frontends.grpc.status import abort
from serve.frontends.oip import model_control, statistics


class TritonExtensions:
    dataplane: DataPlane

    async def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                              context: Context) -> pb.ModelStatisticsResponse:  # fmt: skip
        try:
            stats = statistics.model_statistics(self.dataplane, request.name or None, request.version or None)
        except Exception as exc:
            await abort(context, exc)
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse())

    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest,
                                  context: Context) -> pb.RepositoryModelLoadResponse:  # fmt: skip
        parameters = parameters_of(request.parameters)
        files = sorted(k for k in parameters if k.startswith("file:"))
        if files:  # Triton's code for it (its model control example checks it), with model_control's message
            await context.abort(grpc.StatusCode.INTERNAL, model_control.files_refused(request.model_name, files))
        try:
            await model_control.load_model(self.dataplane, request.model_name, parameters)
        except Exception as exc:
            await abort(context, exc)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest,
                                    context: Context) -> pb.RepositoryModelUnloadResponse:  # fmt: skip
        try:
            await model_control.unload_model(self.dataplane, request.model_name)
        except Exception as exc:
            await abort(context, exc)
        return pb.RepositoryModelUnloadResponse()
