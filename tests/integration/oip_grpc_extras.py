"""The REAL tritonclient.grpc asking for what test_oip.py checks over gRPC, run as its own process.

    python -m tests.integration.oip_grpc_extras HOST:PORT MODEL INFERENCE_KEY

Prints one JSON object: config (ModelConfig of MODEL as JSON), index (RepositoryIndex), and open: the health
calls made WITHOUT a key (live, ready, server metadata name), and model_ready_without_key (the status code of a
model-level call without a key, "OK" when it passed). With INFERENCE_KEY "" the key-guarded calls send none.
A process of its own because tritonclient's `inference.*` messages and serve's stubs cannot share one protobuf
descriptor pool.
"""

from __future__ import annotations

import json
import sys

import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException


def main(url: str, model: str, key: str) -> dict:
    client = triton.InferenceServerClient(url)
    h = {"authorization": f"Bearer {key}"} if key else None
    try:
        client.is_model_ready(model)
        guarded = "OK"
    except InferenceServerException as e:
        guarded = str(e.status())
    return {
        "config": client.get_model_config(model, headers=h, as_json=True)["config"],
        "index": client.get_model_repository_index(headers=h, as_json=True).get("models", []),
        "open": {
            "live": client.is_server_live(),
            "ready": client.is_server_ready(),
            "name": client.get_server_metadata(as_json=True)["name"],
        },
        "model_ready_without_key": guarded,
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
