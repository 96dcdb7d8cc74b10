"""The models of bench/runtime.py: each case's torch twin, serve model, inputs, and the files all libraries load.

`prepare(case, folder)` builds the torch twin with a fixed seed and writes what every worker process loads, so
that all libraries run the same weights on the same inputs: `weights.npz` (the twin's state dict), `inputs.npz`,
`reference.npy` (the twin's output, for the workers' sanity check) and `model.onnx` (torch.onnx.export of the twin).
Only this preparation imports torch; the serve and ONNX Runtime workers read numpy files.

`count_flops(model, inputs)` counts a serve model's floating-point operations once, with forward hooks: 2 * MACs of
convolutions, linear layers and the attention products (q/k/v/out projections, QK^T and PV).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the torch twins live with the tests, so that there is one copy of each
    sys.path.insert(0, str(ROOT))

SEQ = 128
ENCODER = {"d_model": 384, "nhead": 12, "dim_feedforward": 1536, "activation": "gelu", "batch_first": True,
           "norm_first": False}  # fmt: skip
ENCODER_LAYERS = 6
# BERT-base-sized (issue 27): 768 hidden, 12 heads, 3072 feed-forward, 12 layers, post-LN, GELU
ENCODER_BASE = {**ENCODER, "d_model": 768, "nhead": 12, "dim_feedforward": 3072}
ENCODER_BASE_LAYERS = 12
DECODER = {"n_layer": 6, "n_head": 6, "n_embd": 384, "vocab_size": 50304, "block_size": 1024}  # GPT-2-style, nanoGPT


@dataclass(frozen=True)
class Case:
    name: str
    family: str  # mlp, resnet18, resnet50, mobilenet_v2, efficientnet_b0, minilm, encoder, encoder_base, decoder
    batch: int
    target: str = ""  # the target for serve / torch, where it sets one


CASES = [
    Case("MLP 64-128-10 b1", "mlp", 1, "<= 1.0"),
    Case("ResNet-18 b1", "resnet18", 1),
    Case("ResNet-18 b8", "resnet18", 8, "<= 1.5"),
    Case("ResNet-50 b1", "resnet50", 1),
    Case("ResNet-50 b8", "resnet50", 8),
    Case("MobileNetV2 b8", "mobilenet_v2", 8),
    Case("EfficientNet-B0 b8", "efficientnet_b0", 8, "<= 1.0"),
    Case("MiniLM-L6 b1 seq128", "minilm", 1),
    Case("MiniLM-L6 b8 seq128", "minilm", 8, "<= 1.5"),
    Case("Encoder 6x384 b8 seq128", "encoder", 8),
    Case("Encoder 12x768 (BERT-base-sized) b1 seq128", "encoder_base", 1),
    Case("Encoder 12x768 (BERT-base-sized) b8 seq128", "encoder_base", 8, "<= 1.0"),
    Case("GPT-2-style decoder 6x384 b8 seq128", "decoder", 8, "<= 1.0"),
]


def find(name: str) -> Case:
    for case in CASES:
        if case.name == name:
            return case
    raise SystemExit(f"no case {name!r}; cases: {', '.join(c.name for c in CASES)}")


def make_inputs(case: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    b = case.batch
    if case.family == "mlp":
        return {"x": rng.standard_normal((b, 64), dtype=np.float32)}
    if case.family == "minilm":
        return {"input_ids": rng.integers(1000, 30000, (b, SEQ)), "attention_mask": np.ones((b, SEQ), np.int64)}
    if case.family in ("encoder", "encoder_base"):
        return {"src": rng.standard_normal((b, SEQ, _encoder(case)[0]["d_model"]), dtype=np.float32)}
    if case.family == "decoder":
        return {"idx": rng.integers(0, 50257, (b, SEQ))}
    return {"x": rng.standard_normal((b, 3, 224, 224), dtype=np.float32)}


def _encoder(case: Case) -> tuple[dict[str, Any], int]:
    """The encoder cases' layer arguments and layer count."""
    return (ENCODER_BASE, ENCODER_BASE_LAYERS) if case.family == "encoder_base" else (ENCODER, ENCODER_LAYERS)


def first(out: Any) -> Any:
    """The tensor the workers compare: the model's output, or its first element (BERT's last hidden state)."""
    return out[0] if isinstance(out, (tuple, list)) else out


def torch_model(case: Case) -> Any:
    """The torch twin, seeded, in eval mode; norms get non-trivial statistics so that folding them matters."""
    import torch

    from tests.unit.zoo import twins_text, twins_vision
    from tests.unit.zoo.parity import randomize_norms

    torch.manual_seed(0)
    if case.family == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    if case.family == "minilm":
        return twins_text.minilm().eval()
    if case.family == "decoder":
        return twins_text.GPTTwin(**DECODER).eval()
    if case.family == "efficientnet_b0":  # torchvision's own definition (a test extra), no weights downloaded
        from tests.torchvision_reference import reference_torchvision

        model = reference_torchvision().models.efficientnet_b0(weights=None)
        randomize_norms(model)
        return model.eval()
    if case.family in ("encoder", "encoder_base"):
        kwargs, layers = _encoder(case)
        layer = torch.nn.TransformerEncoderLayer(**kwargs)
        model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=True)
    else:
        model = {"resnet18": twins_vision.resnet18, "resnet50": twins_vision.resnet50,
                 "mobilenet_v2": twins_vision.MobileNetV2}[case.family]()  # fmt: skip
    randomize_norms(model)
    return model.eval()


def serve_model(case: Case, weights: dict[str, np.ndarray]) -> Any:
    """serve's model of the case with the twin's weights (strict load, same keys in the same order)."""
    import serve
    from serve import zoo

    if case.family == "mlp":
        model = zoo.MLP(64, (128,), 10)
    elif case.family == "minilm":
        from serve.zoo.sentence import package_dir

        model = zoo.BertModel(zoo.BertConfig.from_json_file(package_dir() / "config.json"))
    elif case.family in ("encoder", "encoder_base"):
        kwargs, layers = _encoder(case)
        model = serve.nn.TransformerEncoder(serve.nn.TransformerEncoderLayer(**kwargs), layers)
    elif case.family == "decoder":
        from serve.zoo.gpt import GPT, GPTConfig

        model = GPT(GPTConfig(**DECODER))
    elif case.family == "efficientnet_b0":
        from serve.zoo.efficientnet import efficientnet_b0

        model = efficientnet_b0()
    else:
        model = {"resnet18": zoo.resnet18, "resnet50": zoo.resnet50, "mobilenet_v2": zoo.mobilenet_v2}[case.family]()
    keys = list(model.state_dict().keys())
    if keys != list(weights):
        raise SystemExit(f"{case.name}: serve's state_dict keys differ from the torch twin's")
    model.load_state_dict({k: serve.from_numpy(v) for k, v in weights.items()}, strict=True)
    return model.eval()


def prepare(case: Case, folder: Path) -> Path:
    """Write the case's weights, inputs, reference output and ONNX file under folder/<case>; return that folder.
    Only a folder not yet complete imports torch (the OpenVINO worker runs from a venv without it)."""
    out = folder / case.name.replace(" ", "_").replace("(", "").replace(")", "")
    if (out / "reference.npy").exists():
        return out
    import torch

    out.mkdir(parents=True, exist_ok=True)
    model = torch_model(case)
    inputs = make_inputs(case)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    np.savez(out / "weights.npz", **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    np.savez(out / "inputs.npz", **inputs)
    _borrow_onnx()
    try:
        with warnings.catch_warnings():  # the TorchScript exporter is deprecated; the dynamo one needs onnxscript
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, str(out / "model.onnx"), input_names=list(inputs), dynamo=False)
    except Exception as e:  # no onnx package (the bench extra): the ORT column reads n/a
        (out / "onnx_error.txt").write_text(f"torch.onnx.export failed: {type(e).__name__}: {e}"[:300])
    with torch.inference_mode():  # written last: its presence marks the folder complete
        np.save(out / "reference.npy", first(model(*args)).numpy())
    return out


def _borrow_onnx() -> None:
    """torch.onnx.export needs the onnx package, which serve's venv does not carry (ONNX Runtime is the `bench`
    extra): where it is missing and the bench-only OpenVINO venv (runtime_worker.OPENVINO_PYTHON) has it, its
    site-packages go at the end of sys.path, so that only what serve's venv lacks is taken from there."""
    import importlib.util

    if importlib.util.find_spec("onnx") is not None:
        return
    venv = ROOT / "bench" / "out" / "openvino" / "venv" / "lib"
    found = sorted(venv.glob(f"python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"))
    if found and (found[0] / "onnx").is_dir():
        sys.path.append(str(found[0]))


def count_flops(model: Any, inputs: tuple[Any, ...]) -> int:
    """2 * MACs of one forward call of a serve model: convolutions, linears and attention, by forward hooks."""
    import serve
    from serve.zoo.bert import BertSelfAttention
    from serve.zoo.gpt import CausalSelfAttention

    total = [0]

    def conv(m: Any, args: tuple, out: Any) -> None:
        total[0] += 2 * out.numel() * (m.in_channels // m.groups) * int(np.prod(m.kernel_size))

    def linear(m: Any, args: tuple, out: Any) -> None:
        total[0] += 2 * out.numel() * m.in_features

    def mha(m: Any, args: tuple, out: Any) -> None:  # projections by weight, not as modules: counted here
        q, k = args[0], args[1]
        n, lq, e = (q.shape[0], q.shape[1], q.shape[2]) if m.batch_first else (q.shape[1], q.shape[0], q.shape[2])
        lk = k.shape[1] if m.batch_first else k.shape[0]
        total[0] += 2 * n * e * e * (2 * lq + 2 * lk) + 4 * n * lq * lk * e

    def bert(m: Any, args: tuple, out: Any) -> None:  # its q/k/v Linears are counted by `linear` (GPT's too)
        b, t, h = args[0].shape
        total[0] += 4 * b * t * t * h

    kinds = [(serve.nn.Conv1d, conv), (serve.nn.Conv2d, conv), (serve.nn.Linear, linear),
             (serve.nn.MultiheadAttention, mha), (BertSelfAttention, bert), (CausalSelfAttention, bert)]  # fmt: skip
    handles = []
    for m in model.modules():
        for kind, hook in kinds:
            if isinstance(m, kind):
                handles.append(m.register_forward_hook(hook))
                break
    try:
        with serve.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return total[0]
