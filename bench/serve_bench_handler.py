"""serve's twin of the TorchServe anchor's `bench_handler.py` (../shared/anchors/torchserve/handlers/).

The same `models.py` file the anchor ships (plain PyTorch) is imported with torch compatibility and built with
`models.build(kind)`; per request a JSON list or `.npy` bytes in; the MLP answers its 10 logits, ResNet-18 its
top-5 `[index, logit]` pairs, as the anchor's handler does, so both servers do the same work per request. A model
named `resnet50...` (bench/server_bf16.py) is serve.zoo's ResNet-50 (torchvision's layout), answered as ResNet-18.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

import serve
from handlers.base_handler import BaseHandler
from serve.serialization import find_state_dict
from serve.worker.context import Context
from serve.worker.handler_loader import import_user_file


class BenchHandler(BaseHandler):
    def load_model(self, context: Context) -> Any:
        name = (context.manifest or {})["model"]["modelName"]
        self.kind = "resnet50" if "resnet50" in name else "resnet18" if "resnet" in name else "mlp"
        if self.kind == "resnet50":  # bench/server_bf16.py: the zoo's torchvision-compatible ResNet-50
            from serve.zoo import resnet50

            model = resnet50()
        else:
            model = import_user_file(self.model_dir, "models.py", torch_compat=True).build(self.kind)
        serialized = (context.manifest or {})["model"]["serializedFile"]
        model.load_state_dict(find_state_dict(serve.load(self.model_dir / serialized)))
        return model.eval()

    def example_inputs(self, batch_size: int) -> tuple | None:
        """What the anchor's clients send, so the worker warms the optimized model for each batch size."""
        return (self.example_tensor((batch_size, 64) if self.kind == "mlp" else (batch_size, 3, 224, 224)),)

    def preprocess(self, data: list[Any]) -> Any:
        _, rows = self.decode_rows(data, _decode)
        return serve.from_numpy(np.stack(rows)) if rows else None

    def postprocess(self, data: Any) -> list[Any]:
        out = data.numpy()
        if self.kind == "mlp":
            return out.tolist()
        top = np.argsort(-out, axis=1)[:, :5]
        return [[[int(i), float(row[i])] for i in idx] for row, idx in zip(out, top)]


def _decode(payload: Any) -> np.ndarray:
    if isinstance(payload, (bytes, bytearray)):
        raw = bytes(payload)
        if raw[:6] == b"\x93NUMPY":
            return np.load(io.BytesIO(raw), allow_pickle=False).astype(np.float32)
        payload = json.loads(raw.decode("utf-8"))
    if isinstance(payload, dict):
        payload = payload.get("instances", payload.get("input"))
    return np.asarray(payload, dtype=np.float32)
