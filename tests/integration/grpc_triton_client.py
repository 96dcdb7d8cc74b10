"""The REAL tritonclient.grpc against a running server, run as its own process by test_grpc.py.

    python -m tests.integration.grpc_triton_client HOST:PORT MODEL INPUT_JSON INFERENCE_KEY

Prints one JSON object: live, ready, model_ready, metadata (name, versions, inputs, outputs), config
(max_batch_size), output (the FP32 infer answer as nested lists), int64_output (the same input rounded, sent as
INT64), upper (a BYTES round trip through the `upper` model) and errors (codes of documented failures).
A process of its own because tritonclient's `inference.*` messages and serve's v2 stubs cannot share one
protobuf descriptor pool (the unit tests import serve's).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException


def main(url: str, model: str, data: str, key: str) -> dict:
    client = triton.InferenceServerClient(url)
    h = {"authorization": f"Bearer {key}"}  # token auth: tritonclient sends headers as gRPC metadata
    x = np.array(json.loads(data), dtype=np.float32)
    meta = client.get_model_metadata(model, headers=h, as_json=True)
    config = client.get_model_config(model, headers=h, as_json=True)["config"]
    name = meta["inputs"][0]["name"]
    infer_input = triton.InferInput(name, list(x.shape), "FP32")
    infer_input.set_data_from_numpy(x)
    result = client.infer(model, [infer_input], request_id="grpc-1", headers=h)
    output_name = meta["outputs"][0]["name"]
    as_int64 = triton.InferInput(name, list(x.shape), "INT64")
    as_int64.set_data_from_numpy(np.round(x).astype(np.int64))
    int64_output = client.infer(model, [as_int64], headers=h).as_numpy(output_name).tolist()
    words = triton.InferInput("TEXT", [3], "BYTES")
    words.set_data_from_numpy(np.array([b"hello", b"v2", "é".encode()], dtype=np.object_))
    upper = client.infer("upper", [words], headers=h).as_numpy("UPPER").tolist()
    errors = {}
    for label, call in {"unknown_model": lambda: client.get_model_metadata("nope", headers=h),
                        "bad_shape": lambda: client.infer(model, [_bad(name)], headers=h)}.items():  # fmt: skip
        try:
            call()
            errors[label] = "OK"
        except InferenceServerException as e:
            errors[label] = str(e.status())
    return {
        "live": client.is_server_live(headers=h),
        "ready": client.is_server_ready(headers=h),
        "model_ready": client.is_model_ready(model, headers=h),
        "metadata": meta,
        "config": config,
        "id": result.get_response().id,
        "output": result.as_numpy(output_name).tolist(),
        "int64_output": int64_output,
        "upper": [w.decode() for w in upper],
        "errors": errors,
        "extensions": client.get_server_metadata(headers=h, as_json=True).get("extensions", []),
    }


def _bad(name: str) -> triton.InferInput:
    bad = triton.InferInput(name, [2, 4], "FP32")
    bad.set_data_from_numpy(np.zeros((2, 4), dtype=np.float32))
    bad._raw_content = b"\0" * 4  # fewer bytes than the shape says: the server must refuse it
    return bad


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])))
