"""The Open Inference Protocol (KServe v2) core, protocol-free: REST (frontends/http/routers/oip.py) and gRPC call it.

    response = await infer(dataplane, "mlp", None, InferRequest(inputs=[InferInput("input0", "FP32", [1, 4], x)]))
    response.outputs[0].data                       # numpy array
    model_metadata(dataplane, "mlp")               # {name, versions, platform, inputs, outputs}

Files: tensors.py (datatypes <-> numpy, JSON data, the binary layout), core.py (the request/response model,
infer, metadata, health), rest.py (the REST JSON + binary-extension bodies).
"""

from serve.frontends.oip.core import (
    InferInput,
    InferOutput,
    InferRequest,
    InferResponse,
    RequestedOutput,
    infer,
    model_metadata,
    model_ready,
    server_live,
    server_metadata,
    server_ready,
)

__all__ = ["InferInput", "InferOutput", "InferRequest", "InferResponse", "RequestedOutput", "infer",
           "model_metadata", "model_ready", "server_live", "server_metadata", "server_ready"]  # fmt: skip
