"""serve.inference.optimize: the plan folds, fuses and chooses kernels, and always answers what eager answers."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve import nn
from serve.inference import kernels, optimize
from serve.inference.planned import PlannedConv2d, PlannedLinear, Skip
from serve.zoo import BertConfig, BertModel, mobilenet_v2, resnet18
from tests.unit.zoo.parity import assert_rel_close

RNG = np.random.default_rng(0)


def _randomize_norms(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
            c = m.running_mean.shape[0]
            m.running_mean._data[:] = RNG.standard_normal(c) * 0.1
            m.running_var._data[:] = RNG.random(c) + 0.5
            m.weight._data[:] = RNG.random(c) + 0.5
            m.bias._data[:] = RNG.standard_normal(c) * 0.1
    return model.eval()


def _image(n: int = 2, size: int = 64) -> serve.Tensor:
    return serve.from_numpy(RNG.standard_normal((n, 3, size, size)).astype(np.float32))


def test_resnet18_folds_every_batch_norm_and_fuses_the_relus_it_may():
    model = _randomize_norms(resnet18(num_classes=10))
    x = _image()
    with serve.no_grad():
        want = model(x)
        opt = optimize(model, (x,))
        got = opt(x)
    info = opt.describe()
    assert info["optimized"] and info["reason"] is None
    # 20 convolutions (17 + 3 downsample), each followed by its batch norm; the relu after each block's first
    # conv and after the stem fuses, the one after each residual add (9 = 8 blocks + stem) cannot
    assert info["passes"] == {
        "bn_folded": 20,
        "act_fused": 9,
        "conv": 20,
        "linear": 1,
        "grouped": 0,
        "residual_fused": 8,
        "layer_norm": 0,
        "add_norm": 0,
        "attention": 0,
        "conv1d": 0,
    }  # each block's `out += identity` (and its relu) in conv2
    assert_rel_close(got, want, 1e-4)
    assert sum(info["kernels"].values()) == 21
    assert isinstance(opt.plan.layer1[0].conv1, PlannedConv2d)
    assert isinstance(opt.plan.layer1[0].bn1, Skip)
    # the original model is untouched and still runs its own modules
    assert isinstance(model.layer1[0].conv1, nn.Conv2d) and isinstance(model.layer1[0].bn1, nn.BatchNorm2d)
    with serve.no_grad():
        assert_rel_close(model(x), want, 0)


def test_the_shared_relu_still_runs_after_the_residual_add():
    # the block's one `relu` is fused after conv1 but must still clamp the sum after `out += identity`
    model = _randomize_norms(resnet18(num_classes=10))
    x = _image(1, 32)
    with serve.no_grad():
        opt = optimize(model, (x,))
        block_out = opt.plan.layer1(opt.plan.maxpool(opt.plan.relu(opt.plan.bn1(opt.plan.conv1(x)))))
    assert float(block_out.min()) >= 0.0


def test_mobilenet_v2_depthwise_and_relu6_fuse():
    model = _randomize_norms(mobilenet_v2(num_classes=10, width_mult=0.5))
    x = _image(2, 64)
    with serve.no_grad():
        want = model(x)
        opt = optimize(model, (x,))
        got = opt(x)
    info = opt.describe()
    assert info["optimized"], info["reason"]
    assert info["passes"]["bn_folded"] == 52 and info["passes"]["act_fused"] == 35
    assert_rel_close(got, want, 1e-4)


def test_bert_fuses_gelu_into_the_intermediate_product():
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16)  # fmt: skip
    model = BertModel(config).eval()
    ids = serve.from_numpy(RNG.integers(1, 100, (3, 10)))
    mask = np.ones((3, 10), dtype=np.int64)
    mask[1, 6:] = 0
    mask = serve.from_numpy(mask)
    with serve.no_grad():
        want = model(ids, mask)
        opt = optimize(model, (ids, mask))
        got = opt(ids, mask)
    info = opt.describe()
    assert info["optimized"], info["reason"]
    # six products a layer and the pooler; each layer's GELU fuses (the pooler's tanh is not an epilogue)
    assert info["passes"]["linear"] == 2 * 6 + 1 and info["passes"]["act_fused"] == 2
    assert_rel_close(got.last_hidden_state, want.last_hidden_state, 1e-4)
    assert_rel_close(got.pooler_output, want.pooler_output, 1e-4)
    assert isinstance(opt.plan.encoder.layer[0].intermediate.dense, PlannedLinear)
    assert opt.plan.encoder.layer[0].intermediate.dense.act == "gelu"
    # query, key and value take the same hidden states: one product per layer
    assert info["passes"]["grouped"] == 2
    attention = opt.plan.encoder.layer[0].attention.self
    assert attention.query.group is attention.key.group is attention.value.group is not None


class _ConvUsedTwice(nn.Module):
    """The conv's output feeds its batch norm and, through code between modules, the sum: folding would be
    wrong, capture cannot see the second use, and the check against eager must catch it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


def test_a_wrong_plan_is_refused_and_the_model_runs_eagerly():
    model = _randomize_norms(_ConvUsedTwice())
    x = _image(2, 16)
    with serve.no_grad():
        want = model(x)
        opt = optimize(model, (x,))
        got = opt(x)
    assert not opt.optimized
    assert "differs from eager" in opt.reason
    assert_rel_close(got, want, 0)
    assert opt.describe()["optimized"] is False


class _Branchy(nn.Module):
    """Data-dependent control flow: the module's own Python runs as written inside the plan."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.a(x)) if float(x.sum()) > 0 else self.b(x) * 2


def test_data_dependent_branches_stay_correct():
    model = _Branchy().eval()
    pos = serve.from_numpy(np.abs(RNG.standard_normal((3, 4))).astype(np.float32))
    with serve.no_grad():
        opt = optimize(model, (pos,))
        for x in (pos, -pos):
            assert_rel_close(opt(x), model(x), 1e-6)
    assert opt.optimized


def test_new_shapes_choose_their_own_kernels_and_warm_checks_them():
    model = _randomize_norms(resnet18(num_classes=10))
    with serve.no_grad():
        opt = optimize(model, (_image(1, 32),))
        opt.warm(_image(3, 32))
        x = _image(2, 32)
        assert_rel_close(opt(x), model(x), 1e-4)
    conv = opt.plan.layer2[0].conv1
    assert len(conv.choices) == 3  # one choice per input shape seen
    assert opt.describe()["warmed"] == [[[1, 3, 32, 32]], [[3, 3, 32, 32]]]


def test_grad_mode_calls_the_original_module():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    x = serve.from_numpy(RNG.standard_normal((2, 4)).astype(np.float32))
    opt = optimize(model, (x,))
    y = opt(x)  # grad enabled: the parameters require grad, so autograd must see the real graph
    assert y.requires_grad
    y.sum().backward()
    assert model[0].weight.grad is not None


def test_a_bad_input_fails_only_its_call():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    with serve.no_grad():
        opt = optimize(model, (serve.ones(2, 4),))
        with pytest.raises(RuntimeError):
            opt(serve.ones(2, 5))
        assert opt.optimized
        assert_rel_close(opt(serve.ones(1, 4)), model(serve.ones(1, 4)), 1e-6)


def test_a_kernel_that_disagrees_is_never_chosen(monkeypatch):
    def broken(layer, x):
        return kernels.conv_im2col(layer, x) + 1.0

    monkeypatch.setitem(kernels.CONV_KERNELS, "broken", (broken, False, lambda layer: True))
    model = _randomize_norms(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()))
    x = _image(2, 16)
    with serve.no_grad():
        opt = optimize(model, (x,))
        assert_rel_close(opt(x), model(x), 1e-4)
    assert "broken" not in opt.plan[0].choices.values()
    assert "broken" not in next(iter(opt.plan[0].timings.values()))


def test_without_native_kernels_the_numpy_kernels_serve(monkeypatch):
    monkeypatch.setattr(kernels, "native", lambda: None)
    model = _randomize_norms(resnet18(num_classes=10))
    x = _image(2, 32)
    with serve.no_grad():
        opt = optimize(model, (x,))
        assert_rel_close(opt(x), model(x), 1e-4)
    assert set(opt.describe()["kernels"]) <= {"im2col", "gemm_nhwc", "blas"}


def test_untuned_plans_take_the_preferred_kernel_without_timing():
    model = _randomize_norms(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()))
    x = _image(2, 16)
    with serve.no_grad():
        opt = optimize(model, (x,), tune=False)
        assert_rel_close(opt(x), model(x), 1e-4)
    assert opt.plan[0].timings == {}


def test_optimize_refuses_a_training_model_and_non_modules():
    with pytest.raises(ValueError, match="eval"):
        optimize(nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"nn\.Module"):
        optimize(lambda x: x)


def test_serve_compile_plans_at_the_first_call():
    model = _randomize_norms(nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.SiLU()))
    fast = serve.compile(model)
    assert not fast.optimized and "not planned yet" in fast.reason
    x = _image(1, 8)
    with serve.no_grad():
        assert_rel_close(fast(x), model(x), 1e-4)
    assert fast.optimized
    assert fast.plan[0].act == "silu"


@pytest.mark.parametrize(("kernel", "stride", "padding"), [(3, 2, 1), (2, 2, 0), (3, 1, 1), ((3, 2), (2, 1), (1, 0))])
def test_max_pool_on_channels_last_matches_eager(kernel, stride, padding):
    from serve.inference.pooling import PlannedMaxPool2d

    pool = nn.MaxPool2d(kernel, stride, padding)
    a = RNG.standard_normal((3, 9, 10, 5)).astype(np.float32)
    channels_last = serve.from_numpy(a).permute(0, 3, 1, 2)  # an NCHW view of NHWC memory, as the plan makes
    with serve.no_grad():
        want = pool(serve.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2))))
        got = PlannedMaxPool2d(pool)(channels_last)
        assert_rel_close(got, want, 0)
        assert_rel_close(PlannedMaxPool2d(pool)(want), pool(want), 0)  # other layouts: the original module


class _SharedInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 4), nn.Linear(6, 3, bias=False)

    def forward(self, x, y=None):
        return self.a(x).sum(-1) + self.b(x if y is None else y).sum(-1)


def test_grouped_products_stay_right_when_a_member_gets_another_input():
    model = _SharedInput().eval()
    x = serve.from_numpy(RNG.standard_normal((5, 6)).astype(np.float32))
    y = serve.from_numpy(RNG.standard_normal((5, 6)).astype(np.float32))
    with serve.no_grad():
        opt = optimize(model, (x,))
        assert opt.describe()["passes"]["grouped"] == 1
        assert_rel_close(opt(x), model(x), 1e-5)
        assert_rel_close(opt(x, y), model(x, y), 1e-5)
        x += 1.0  # the same tensor written in place is a new input
        assert_rel_close(opt(x), model(x), 1e-5)


def test_passes_can_be_switched_off_one_at_a_time():
    model = _randomize_norms(resnet18(num_classes=10))
    x = _image(1, 32)
    with serve.no_grad():
        bare = optimize(model, (x,), passes=())
        fold_only = optimize(model, (x,), passes=("fold",))
        assert_rel_close(bare(x), model(x), 1e-4)
        assert_rel_close(fold_only(x), model(x), 1e-4)
    assert bare.describe()["passes"]["bn_folded"] == 0 and bare.describe()["passes"]["conv"] == 20
    assert fold_only.describe()["passes"]["bn_folded"] == 20 and fold_only.describe()["passes"]["act_fused"] == 0
    with pytest.raises(ValueError, match="unknown passes"):
        optimize(model, (x,), passes=("winograd",))


def _bf16_model() -> nn.Module:
    return _randomize_norms(nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 32, 3, stride=2), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10)))  # fmt: skip


def _kernel_names(layer) -> set[str]:
    """The kernels `layer` chose, and those it timed and found in agreement with the reference."""
    return set(layer.choices.values()) | {name for times in layer.timings.values() for name in times}


def test_bfloat16_products_where_the_cpu_has_them():
    """The middle convolutions may run bf16 products; the stem (3 channels) and the last layer stay float32.
    Which kernel wins the timing is the machine's business (on an AMX Xeon fp32 Winograd beats bf16), so the bf16
    kernel is forced where the test needs it to run, and the timed plan is only held to what it may choose."""
    model = _bf16_model()
    x = _image(2, 16)
    bf16 = ("native_nhwc_bf16", "native_bf16")
    with serve.no_grad():
        want = model(x)
        forced = optimize(model, (x,), dtype="bfloat16", tune=False, kernels=bf16)  # untimed: the last that applies
        timed = optimize(model, (x,), dtype="bfloat16")
        got_forced, got_timed = forced(x), timed(x)
    for opt, got in ((forced, got_forced), (timed, got_timed)):
        assert opt.optimized, opt.reason
        assert_rel_close(got, want, 1e-2)
    ends, middle = (0, 10), (3, 6)  # the Sequential's product layers
    if kernels.bf16_products():
        assert forced.describe()["products"] == timed.describe()["products"] == "bfloat16"
        for i in middle:
            assert set(forced.plan[i].choices.values()) == {"native_nhwc_bf16"}
            assert "native_nhwc_bf16" in _kernel_names(timed.plan[i])  # offered, and agreed with the reference
    else:  # no AVX512-BF16 here: the plan computes in float32, as logged
        assert forced.describe()["products"] == timed.describe()["products"] == "float32"
        middle, ends = (), (0, 3, 6, 10)
    for opt in (forced, timed):
        for i in ends:
            assert not any(name.endswith("_bf16") for name in _kernel_names(opt.plan[i])), (i, opt.plan[i].choices)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        optimize(model, dtype="float16")


class _TwoCallsThenNorms(nn.Module):
    """The conv runs twice before either batch norm: each Skip must still know its own producer's outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        if x.shape[0] == 1:  # the example: conv, bn, conv, bn
            return self.bn(self.conv(x)) + self.bn(self.conv(x * 2))
        a = self.conv(x)
        b = self.conv(x * 2)
        return self.bn(a) + self.bn(b)


def test_folded_norms_skip_by_tensor_not_by_call_order():
    model = _randomize_norms(_TwoCallsThenNorms())
    with serve.no_grad():
        opt = optimize(model, (_image(1, 8),))
        assert opt.describe()["passes"]["bn_folded"] == 1
        x = _image(2, 8)
        assert_rel_close(opt(x), model(x), 1e-4)


@pytest.mark.parametrize("native", [True, False])
def test_planned_max_pool_propagates_nan_like_eager(native, monkeypatch):
    from serve.inference.pooling import PlannedMaxPool2d

    if not native:
        monkeypatch.setattr(kernels, "native", lambda: None)
    pool = nn.MaxPool2d(3, 2, 1)
    a = RNG.standard_normal((2, 9, 9, 20)).astype(np.float32)
    a[0, 4, 4, 3] = np.nan
    a[1, 0, 0, 19] = np.nan
    with serve.no_grad():
        got = PlannedMaxPool2d(pool)(serve.from_numpy(a).permute(0, 3, 1, 2)).numpy()
        want = pool(serve.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)))).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


class _Residual(nn.Module):
    """conv -> bn -> `out += x` -> relu, as a ResNet block ends; `peek` reads the conv's output before the add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.peek = False

    def forward(self, x, other=None):
        out = self.bn(self.conv(x))
        extra = out.sum() if self.peek else 0.0
        out += x if other is None else other
        return self.relu(out) + extra


def test_residual_adds_run_in_the_epilogue_and_any_other_use_computes_plainly():
    model = _randomize_norms(_Residual())
    x = _image(2, 8).repeat(1, 6, 1, 1)[:, :16]
    with serve.no_grad():
        opt = optimize(model, (x,))
        assert opt.optimized, opt.reason
        layer = opt.plan.conv
        if not layer.residual_add:  # no native kernels here: nothing to defer
            assert kernels.native() is None
            return
        assert opt.describe()["passes"]["residual_fused"] == 1 and layer.act_after_add == "relu"
        assert_rel_close(opt(x), model(x), 1e-4)
        dense = serve.from_numpy(np.ascontiguousarray(RNG.standard_normal((2, 16, 8, 8)).astype(np.float32)))
        assert_rel_close(opt(x, dense), model(x, dense), 1e-4)  # an NCHW operand: read in its layout
        model.peek = opt.plan.peek = True  # the output is read before the add: computed plainly, then added
        assert_rel_close(opt(x), model(x), 1e-4)
        assert_rel_close(opt(x, serve.ones(1)), model(x, serve.ones(1)), 1e-4)  # a broadcast operand


def test_a_flood_of_new_shapes_is_neither_timed_nor_remembered(monkeypatch):
    from serve.inference import choosing

    monkeypatch.setattr(choosing, "MAX_SHAPES", 2)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    with serve.no_grad():
        opt = optimize(model, (serve.ones(1, 4),))
        for rows in range(2, 9):  # every batch size a new shape
            x = serve.from_numpy(RNG.standard_normal((rows, 4)).astype(np.float32))
            assert_rel_close(opt(x), model(x), 1e-6)
    assert len(opt.plan[0].choices) == 2 and len(opt.plan[0].timings) == 2
