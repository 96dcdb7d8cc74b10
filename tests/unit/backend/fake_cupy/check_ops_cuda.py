"""Run serve's CUDA backend on the numpy stand-in for CuPy (this folder must come first on sys.path).

1. Every case of the GPU parity table (tests/gpu/ops_cases.py) through ops_cuda vs ops_cpu, with the GPU test's
   own comparison (dtype, shape, tolerance).
2. The tensor layer on "cuda": creation, .to/.cuda/.cpu, zoo models (ResNet, MobileNetV2, BERT, LeNet) against
   their CPU results, half precision, attention's fused softmax.
Prints one line per failure and "FAILURES <n>" last.
"""

import sys

import fake_kernels

sys.modules["serve.backend.cuda_kernels"] = fake_kernels

import numpy as np  # noqa: E402

import serve  # noqa: E402
import serve.backend  # noqa: E402
from serve.zoo import bert, lenet, mobilenet, resnet  # noqa: E402
from tests.gpu import test_ops_cuda as T  # noqa: E402

serve.backend.cuda_kernels = fake_kernels  # type: ignore[attr-defined]
failures = []


def record(what, fn, *args):
    try:
        fn(*args)
    except Exception as e:
        failures.append(f"{what}: {type(e).__name__}: {str(e)[:400]}".replace("\n", " | "))


for case in T._cases():
    record(case.id, T.test_primitive_matches_cpu, *case.values)
OTHER_TESTS = (
    "test_transfers_round_trip_exactly_through_pinned_memory",
    "test_view_strides_contiguity_empty_and_printing",
    "test_on_device_and_current_device",
    "test_to_cuda_round_trip_is_exact_and_reports_the_index",
    "test_mixed_devices_follow_pytorch",
    "test_creation_on_device_and_random_values_match_cpu",
    "test_module_moves_and_half_precision_forward",
    "test_sdpa_uses_the_fused_softmax_and_matches_cpu",
)
for name in OTHER_TESTS:
    record(name, getattr(T, name))


def model_matches(name, model, *inputs, **kw):
    model.eval()
    with serve.no_grad():
        want = model(*inputs, **kw)
        model.cuda()
        got = model(*[i.cuda() for i in inputs], **{k: v.cuda() for k, v in kw.items()})
    want, got = (o if isinstance(o, serve.Tensor) else o[0] for o in (want, got))
    assert got.is_cuda and got.dtype is want.dtype, name
    w = np.asarray(want).astype(np.float64)
    np.testing.assert_allclose(np.asarray(got.cpu()).astype(np.float64), w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


serve.manual_seed(0)
cfg = bert.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
mask = serve.ones(2, 7, dtype=serve.int64)
mask[1, 5:] = 0
record("resnet18", model_matches, "resnet18", resnet.resnet18(num_classes=10), serve.randn(2, 3, 64, 64))
record("resnet50", model_matches, "resnet50", resnet.resnet50(num_classes=10), serve.randn(2, 3, 32, 32))
record("mobilenet_v2", model_matches, "mobilenet_v2", mobilenet.mobilenet_v2(num_classes=10), serve.randn(2, 3, 32, 32))
record("bert", lambda: model_matches("bert", bert.BertModel(cfg), serve.randint(0, 100, (2, 7)), attention_mask=mask))
record("lenet", model_matches, "lenet", lenet.LeNet(), serve.randn(2, 1, 32, 32))
used = set(fake_kernels.calls)
for kernel in ("bias_activation", "softmax", "scaled_masked_softmax", "layer_norm", "row_moments", "embedding",
               "max_pool2d", "avg_pool2d", "im2col"):  # fmt: skip
    if kernel not in used:
        failures.append(f"no path of ops_cuda reached the {kernel} kernel")
for line in failures:
    print("FAIL", line)
print("FAILURES", len(failures))
