"""Stand-ins for the models Triton's Python examples call (triton-inference-server/server's qa and docs models), as
serve archives: function handlers answering v2 outputs, and a small linear image classifier on the `tensor` handler.

    build_store(store, src)        # the eight archives below, in `store`
    classifier_reference(image)    # the classifier's scores for an image file, as image_client.py preprocesses it

| archive               | inputs                               | outputs                                   |
| --------------------- | ------------------------------------ | ----------------------------------------- |
| simple                | INPUT0, INPUT1 INT32 [-1, 16]        | OUTPUT0 = sum, OUTPUT1 = difference       |
| simple_int8           | the same in INT8 (wrapping)          | the same in INT8                          |
| simple_string         | INPUT0, INPUT1 BYTES [-1, 16] (ints) | OUTPUT0, OUTPUT1 BYTES (sum, difference)  |
| simple_identity       | INPUT0 BYTES [-1, -1]                | OUTPUT0 = INPUT0                          |
| custom_identity_int32 | INPUT0 INT32 [-1, -1]                | OUTPUT0 = INPUT0                          |
| densenet_onnx         | data_0 FP32 [3, 224, 224] (no batch) | fc6_1 FP32 [3, 1, 1]: each channel's mean |
| classifier            | INPUT FP32 [-1, 3, 8, 8] FORMAT_NCHW | SCORES FP32 [-1, 5], labels.txt           |
| image_bytes           | IMAGE BYTES [-1, 1] (an image file)  | the classifier's SCORES of it, labels.txt |

`simple` has batchSize 8 (Triton's simple model has max_batch_size 8: its model control example changes it to 16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import serve
from serve.archive import package

ARITH = """
import numpy as np

DTYPE = {dtype!r}


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        spec = {{i["name"]: i for i in row["body"]["inputs"]}}
        a = np.array(spec["INPUT0"]["data"]).astype(DTYPE)
        b = np.array(spec["INPUT1"]["data"]).astype(DTYPE)
        shape, datatype = spec["INPUT0"]["shape"], spec["INPUT0"]["datatype"]
        if {strings}:
            total = [str(v) for v in (a + b).tolist()]
            difference = [str(v) for v in (a - b).tolist()]
        else:
            total, difference = (a + b).tolist(), (a - b).tolist()
        out.append({{"outputs": [{{"name": "OUTPUT0", "datatype": datatype, "shape": shape, "data": total}},
                                 {{"name": "OUTPUT1", "datatype": datatype, "shape": shape, "data": difference}}]}})
    return out
"""

IDENTITY = """
def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        spec = row["body"]["inputs"][0]
        out.append({"outputs": [{"name": "OUTPUT0", "datatype": spec["datatype"], "shape": spec["shape"],
                                 "data": spec["data"]}]})
    return out
"""

CHANNEL_MEANS = """
import numpy as np


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        spec = row["body"]["inputs"][0]
        x = np.array(spec["data"], dtype=np.float32).reshape(spec["shape"])  # (3, 224, 224)
        means = x.reshape(x.shape[0], -1).mean(axis=1)
        out.append({"outputs": [{"name": "fc6_1", "datatype": "FP32", "shape": [3, 1, 1], "data": means.tolist()}]})
    return out
"""

CLASSIFIER_MODEL = """
from serve import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(x.reshape(x.shape[0], -1))  # (B, 3, 8, 8) -> (B, 192) -> (B, 5)
"""

# image file bytes in (ensemble_image_client.py sends each file whole, shape [batch, 1]), the classifier's scores out
IMAGE_BYTES = """
import io

import numpy as np
from PIL import Image

RNG = np.random.default_rng(7)
WEIGHT = (RNG.standard_normal((5, 192)) / 64).astype(np.float32)
BIAS = RNG.standard_normal(5).astype(np.float32)


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        spec = row["body"]["inputs"][0]
        scores = []
        for text in spec["data"]:  # BYTES elements reach the handler as text (surrogateescape for non-UTF-8)
            image = Image.open(io.BytesIO(text.encode("utf-8", "surrogateescape"))).convert("RGB")
            pixels = np.asarray(image.resize((8, 8), Image.BILINEAR), dtype=np.float32)
            scores.append(WEIGHT @ pixels.transpose(2, 0, 1).reshape(-1) + BIAS)  # (5, 192) @ (192,)
        out.append({"outputs": [{"name": "SCORES", "datatype": "FP32", "shape": [len(scores), 5],
                                 "data": np.stack(scores).reshape(-1).tolist()}]})
    return out
"""

LABELS = ["ant", "bee", "cat", "dog", "eel"]


def _config(inputs: list[str], outputs: list[str], extra: str = "") -> str:
    lines = [extra, "handler:", "  inputs:", *[f"    - {t}" for t in inputs], "  outputs:",
             *[f"    - {t}" for t in outputs]]  # fmt: skip
    return "\n".join(lines) + "\n"


def _function(src: Path, store: Path, name: str, source: str, config: str) -> None:
    (src / f"{name}.py").write_text(source)
    (src / f"{name}.yaml").write_text(config)
    package(name, "1", f"{src / name}.py:handle", config_file=src / f"{name}.yaml", export_path=store,
            progress=False)  # fmt: skip


def _pair(datatype: str, shape: str) -> list[str]:
    return [f"{{name: INPUT{i}, datatype: {datatype}, shape: {shape}}}" for i in (0, 1)]


def _pair_out(datatype: str, shape: str) -> list[str]:
    return [f"{{name: OUTPUT{i}, datatype: {datatype}, shape: {shape}}}" for i in (0, 1)]


def classifier_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"fc.weight": (rng.standard_normal((5, 192)) / 64).astype(np.float32),
            "fc.bias": rng.standard_normal(5).astype(np.float32)}  # fmt: skip


def build_store(store: Path, src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    store.mkdir(parents=True, exist_ok=True)
    _function(
        src,
        store,
        "simple",
        ARITH.format(dtype="int32", strings=False),
        _config(_pair("INT32", "[-1, 16]"), _pair_out("INT32", "[-1, 16]"), "batchSize: 8\nmaxBatchDelay: 1"),
    )
    _function(
        src,
        store,
        "simple_int8",
        ARITH.format(dtype="int8", strings=False),
        _config(_pair("INT8", "[-1, 16]"), _pair_out("INT8", "[-1, 16]")),
    )
    _function(
        src,
        store,
        "simple_string",
        ARITH.format(dtype="int64", strings=True),
        _config(_pair("BYTES", "[-1, 16]"), _pair_out("BYTES", "[-1, 16]")),
    )
    identity = ["{name: INPUT0, datatype: %s, shape: [-1, -1]}"], ["{name: OUTPUT0, datatype: %s, shape: [-1, -1]}"]
    _function(src, store, "simple_identity", IDENTITY, _config([identity[0][0] % "BYTES"], [identity[1][0] % "BYTES"]))
    _function(
        src, store, "custom_identity_int32", IDENTITY, _config([identity[0][0] % "INT32"], [identity[1][0] % "INT32"])
    )
    _function(src, store, "densenet_onnx", CHANNEL_MEANS,
              _config(["{name: data_0, datatype: FP32, shape: [3, 224, 224]}"],
                      ["{name: fc6_1, datatype: FP32, shape: [3, 1, 1]}"]))  # fmt: skip
    _classifier(src, store)
    (src / "image_bytes.py").write_text(IMAGE_BYTES)
    (src / "image_bytes.yaml").write_text(_config(["{name: IMAGE, datatype: BYTES, shape: [-1, 1]}"],
                                                  ["{name: SCORES, datatype: FP32, shape: [-1, 5], "
                                                   "label_filename: labels.txt}"]))  # fmt: skip
    package("image_bytes", "1", f"{src / 'image_bytes.py'}:handle", extra_files=[str(src / "labels.txt")],
            config_file=src / "image_bytes.yaml", export_path=store, progress=False)  # fmt: skip


def _classifier(src: Path, store: Path) -> None:
    (src / "classifier_model.py").write_text(CLASSIFIER_MODEL)
    (src / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (src / "classifier.yaml").write_text(_config(
        ["{name: INPUT, datatype: FP32, shape: [-1, 3, 8, 8], format: FORMAT_NCHW}"],
        ["{name: SCORES, datatype: FP32, shape: [-1, 5], label_filename: labels.txt}"],
        "batchSize: 4\nmaxBatchDelay: 1",
    ))  # fmt: skip
    state = {k: serve.from_numpy(v) for k, v in classifier_weights().items()}
    serve.save(state, src / "classifier.pt")
    package("classifier", "1", "tensor", model_file=src / "classifier_model.py", serialized_file=src / "classifier.pt",
            extra_files=[str(src / "labels.txt")], config_file=src / "classifier.yaml", export_path=store,
            progress=False)  # fmt: skip


def classifier_reference(image: Path) -> np.ndarray:
    """The classifier's 5 scores for `image` as image_client.py sends it (RGB, bilinear 8x8, no scaling, CHW)."""
    from PIL import Image

    pixels = np.asarray(Image.open(image).convert("RGB").resize((8, 8), Image.BILINEAR), dtype=np.float32)
    x = pixels.transpose(2, 0, 1).reshape(-1)  # (8, 8, 3) -> (3, 8, 8) -> (192,)
    w = classifier_weights()
    return np.asarray(w["fc.weight"] @ x + w["fc.bias"], dtype=np.float32)  # (5, 192) @ (192,) -> (5,)
