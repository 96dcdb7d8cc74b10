"""serve.compat.torchvision.ops against torchvision's pure-Python ops (box_iou, box_area, box_convert, ...,
`_roi_align`, its transcription of the CUDA kernel, and MultiScaleRoIAlign's level mapping) and, where torchvision
only has compiled kernels (nms, roi_pool), numpy references written here from the algorithms' definitions."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import serve
from serve.compat.torchvision import ops
from tests.torchvision_reference import needs_torchvision, reference_torchvision


def _serve(arr: np.ndarray) -> serve.Tensor:
    return serve.from_numpy(np.ascontiguousarray(arr))


def _torch(t: serve.Tensor):
    import torch

    return torch.from_numpy(np.ascontiguousarray(t.numpy()))


def _boxes(n: int, seed: int, size: float = 50.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xy = rng.random((n, 2)) * size
    wh = rng.random((n, 2)) * size / 2 + 1
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


# -- numpy references from the definitions ---------------------------------------------------------------------
def _ref_iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _ref_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    """Greedy: take the best remaining box, drop every remaining box overlapping it by more than threshold."""
    remaining = sorted(range(len(boxes)), key=lambda i: -scores[i])
    keep = []
    while remaining:
        best = remaining.pop(0)
        keep.append(best)
        remaining = [i for i in remaining if _ref_iou(boxes[best], boxes[i]) <= threshold]
    return keep


def _ref_roi_pool(x: np.ndarray, rois: np.ndarray, out: tuple[int, int], scale: float) -> np.ndarray:
    """Fast R-CNN RoI max pooling: rounded box corners (inclusive), bins of size/out cells, empty bins 0."""
    res = np.zeros((len(rois), x.shape[1], *out), dtype=x.dtype)
    height, width = x.shape[-2:]
    for k, (b, *corners) in enumerate(rois):
        x1, y1, x2, y2 = (int(np.sign(v) * np.floor(abs(v) * scale + 0.5)) for v in corners)
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for ph in range(out[0]):
            for pw in range(out[1]):
                hs = np.clip(int(np.floor(ph * rh / out[0])) + y1, 0, height)
                he = np.clip(int(np.ceil((ph + 1) * rh / out[0])) + y1, 0, height)
                ws = np.clip(int(np.floor(pw * rw / out[1])) + x1, 0, width)
                we = np.clip(int(np.ceil((pw + 1) * rw / out[1])) + x1, 0, width)
                if he > hs and we > ws:
                    res[k, :, ph, pw] = x[int(b), :, hs:he, ws:we].max(axis=(1, 2))
    return res


# -- boxes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.9])
def test_nms_matches_greedy_reference(threshold: float) -> None:
    boxes = _boxes(60, seed=1)
    scores = np.random.default_rng(2).permutation(60).astype(np.float32) / 60  # distinct: no ties to order
    keep = ops.nms(_serve(boxes), _serve(scores), threshold)
    assert keep.dtype == serve.int64
    assert keep.numpy().tolist() == _ref_nms(boxes, scores, threshold)


def test_nms_of_nothing_and_bad_shapes() -> None:
    assert tuple(ops.nms(_serve(np.zeros((0, 4), np.float32)), _serve(np.zeros(0, np.float32)), 0.5).shape) == (0,)
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        ops.nms(_serve(np.zeros((3, 5), np.float32)), _serve(np.zeros(3, np.float32)), 0.5)
    with pytest.raises(ValueError, match="one per box"):
        ops.nms(_serve(np.zeros((3, 4), np.float32)), _serve(np.zeros(2, np.float32)), 0.5)


def test_batched_nms_is_nms_per_category() -> None:
    boxes = _boxes(80, seed=3)
    scores = np.random.default_rng(4).permutation(80).astype(np.float32)
    labels = np.random.default_rng(5).integers(0, 4, 80)
    keep = ops.batched_nms(_serve(boxes), _serve(scores), _serve(labels), 0.4).numpy().tolist()
    expected = []
    for c in range(4):
        idx = np.flatnonzero(labels == c)
        expected += [int(idx[i]) for i in _ref_nms(boxes[idx], scores[idx], 0.4)]
    assert keep == sorted(expected, key=lambda i: -scores[i])
    # a box overlapping a kept box of another category survives
    same = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], np.float32)
    two = _serve(np.array([0.9, 0.8], np.float32))
    assert ops.batched_nms(_serve(same), two, _serve(np.array([0, 1])), 0.5).numpy().tolist() == [0, 1]
    assert ops.batched_nms(_serve(same), two, _serve(np.array([1, 1])), 0.5).numpy().tolist() == [0]


@needs_torchvision
def test_box_functions_match_torchvision() -> None:
    tvops = reference_torchvision().ops
    a, b = _boxes(7, seed=6), _boxes(5, seed=7)
    np.testing.assert_allclose(
        ops.box_iou(_serve(a), _serve(b)).numpy(), tvops.box_iou(_torch(_serve(a)), _torch(_serve(b))), rtol=1e-6
    )
    np.testing.assert_allclose(ops.box_area(_serve(a)).numpy(), tvops.box_area(_torch(_serve(a))), rtol=1e-6)
    got = ops.generalized_box_iou(_serve(a), _serve(b)).numpy()
    np.testing.assert_allclose(
        got, tvops.generalized_box_iou(_torch(_serve(a)), _torch(_serve(b))), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(
        ops.clip_boxes_to_image(_serve(a * 2 - 20), (30, 40)).numpy(),
        tvops.clip_boxes_to_image(_torch(_serve(a * 2 - 20)), (30, 40)),
    )
    for min_size in (2.0, 8.0, 15.0):
        np.testing.assert_array_equal(
            ops.remove_small_boxes(_serve(a), min_size).numpy(), tvops.remove_small_boxes(_torch(_serve(a)), min_size)
        )
    for src in ("xyxy", "xywh", "cxcywh"):
        for dst in ("xyxy", "xywh", "cxcywh"):
            want = tvops.box_convert(_torch(_serve(a)), src, dst)
            np.testing.assert_allclose(ops.box_convert(_serve(a), src, dst).numpy(), want, rtol=1e-6, atol=1e-5)


# -- RoI pooling -----------------------------------------------------------------------------------------------
def _tv_kernel():
    """torchvision's pure-PyTorch roi_align kernel, without its torch.compile wrapper."""
    return importlib.import_module("torchvision.ops.roi_align")._roi_align.__wrapped__


def _tv_roi_align(x, rois, out, scale, ratio, aligned):
    return _tv_kernel()(_torch(x), _torch(rois), scale, out[0], out[1], ratio, aligned).numpy()


def _ref_roi_align(x: np.ndarray, rois: np.ndarray, out: tuple[int, int], scale: float, ratio: int, aligned: bool
                   ) -> np.ndarray:  # fmt: skip
    """Mask R-CNN's RoIAlign, one sample at a time: bilinear samples, zero beyond one pixel outside the map."""
    height, width = x.shape[-2:]

    def sample(b: int, y: float, xx: float) -> np.ndarray:
        if y < -1.0 or y > height or xx < -1.0 or xx > width:
            return np.zeros(x.shape[1])
        y, xx = max(y, 0.0), max(xx, 0.0)
        y0, x0 = min(int(y), height - 1), min(int(xx), width - 1)
        y1, x1 = min(y0 + 1, height - 1), min(x0 + 1, width - 1)
        ly, lx = (y - y0 if y0 < height - 1 else 0.0), (xx - x0 if x0 < width - 1 else 0.0)
        f = x[b].astype(np.float64)
        return (1 - ly) * (1 - lx) * f[:, y0, x0] + (1 - ly) * lx * f[:, y0, x1] + ly * (1 - lx) * f[:, y1, x0] + \
            ly * lx * f[:, y1, x1]  # fmt: skip

    res = np.zeros((len(rois), x.shape[1], *out))
    off = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        sx, sy, ex, ey = x1 * scale - off, y1 * scale - off, x2 * scale - off, y2 * scale - off
        rw, rh = (ex - sx, ey - sy) if aligned else (max(ex - sx, 1.0), max(ey - sy, 1.0))
        gh = ratio if ratio > 0 else math.ceil(rh / out[0])
        gw = ratio if ratio > 0 else math.ceil(rw / out[1])
        for ph in range(out[0]):
            for pw in range(out[1]):
                acc = np.zeros(x.shape[1])
                for iy in range(gh):
                    for ix in range(gw):
                        y = sy + ph * rh / out[0] + (iy + 0.5) * rh / out[0] / gh
                        xx = sx + pw * rw / out[1] + (ix + 0.5) * rw / out[1] / gw
                        acc += sample(int(b), y, xx)
                res[k, :, ph, pw] = acc / max(gh * gw, 1)
    return res


def _feature(seed: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3, 16, 20)).astype(np.float32)


def _rois(boxes: np.ndarray, seed: int) -> np.ndarray:
    batch = np.random.default_rng(seed).integers(0, 2, (len(boxes), 1))
    return np.concatenate([batch, boxes], axis=1).astype(np.float32)


def _inside_rois(scale: float, seed: int = 8) -> np.ndarray:
    """Boxes whose every sample lies on the 16 x 20 map (where torchvision's Python kernel equals its C++ one)."""
    rng = np.random.default_rng(seed)
    xy = rng.random((8, 2)) * [13.0, 9.0]
    wh = rng.random((8, 2)) * [6.0, 6.0] + 0.1
    boxes = np.concatenate([xy, xy + wh], axis=1)  # x within 20, y within 16
    return _rois(np.concatenate([boxes, [[0.0, 0.0, 19.0, 15.0], [3.0, 4.0, 3.2, 4.1]]]) / scale, seed)


def _any_rois(seed: int = 9) -> np.ndarray:
    """Boxes inside, across and beyond the borders of the map at scale 0.25."""
    boxes = np.concatenate([_boxes(6, seed, 70.0), [[-5, -5, 3, 2], [60, 50, 90, 75], [10, 10, 10.2, 10.1]]])
    return _rois(boxes, seed)


@needs_torchvision
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [-1, 0, 1, 2])
@pytest.mark.parametrize(("out", "scale"), [((7, 7), 0.25), ((3, 5), 0.125), ((2, 2), 1.0)])
def test_roi_align_matches_torchvisions_kernel(aligned: bool, ratio: int, out, scale: float) -> None:
    x, rois = _feature(), _inside_rois(scale)
    got = ops.roi_align(_serve(x), _serve(rois), out, scale, ratio, aligned).numpy()
    want = _tv_roi_align(_serve(x), _serve(rois), out, scale, ratio, aligned)
    assert got.shape == want.shape == (len(rois), 3, *out)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [-1, 2])
def test_roi_align_across_borders_matches_reference(aligned: bool, ratio: int) -> None:
    # torchvision's Python transcription omits the C++ kernels' "zero beyond one pixel outside" rule, so boxes
    # crossing the border are checked against the definition instead
    x, rois = _feature(), _any_rois()
    got = ops.roi_align(_serve(x), _serve(rois), (5, 4), 0.25, ratio, aligned).numpy()
    np.testing.assert_allclose(got, _ref_roi_align(x, rois, (5, 4), 0.25, ratio, aligned), rtol=1e-5, atol=1e-5)


@needs_torchvision
def test_roi_align_takes_a_list_of_boxes_per_image() -> None:
    x, rois = _feature(), _inside_rois(0.5)
    per_image = [_serve(rois[rois[:, 0] == i, 1:]) for i in range(2)]
    ordered = np.concatenate([rois[rois[:, 0] == i] for i in range(2)])
    layer = ops.RoIAlign((4, 4), spatial_scale=0.5, sampling_ratio=2, aligned=True)
    np.testing.assert_allclose(
        layer(_serve(x), per_image).numpy(),
        _tv_roi_align(_serve(x), _serve(ordered), (4, 4), 0.5, 2, True),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(("out", "scale"), [((7, 7), 0.25), ((3, 2), 0.5), ((1, 1), 1.0)])
def test_roi_pool_matches_reference(out, scale: float) -> None:
    x, rois = _feature(9), _any_rois(9)
    got = ops.roi_pool(_serve(x), _serve(rois), out, scale).numpy()
    np.testing.assert_array_equal(got, _ref_roi_pool(x, rois, out, scale))
    assert ops.RoIPool(out, scale)(_serve(x), _serve(rois)).numpy().shape == got.shape


def _image_boxes(n: int, seed: int, height: int, width: int) -> np.ndarray:
    """Boxes of many sizes inside a height x width image (samples on the map: see test_roi_align_across_borders)."""
    rng = np.random.default_rng(seed)
    w, h = np.exp(rng.uniform(0, np.log(width - 1), n)), np.exp(rng.uniform(0, np.log(height - 1), n))
    x1, y1 = rng.random(n) * (width - 1 - w), rng.random(n) * (height - 1 - h)
    return np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)


@needs_torchvision
@pytest.mark.parametrize("sampling_ratio", [2, -1])
@pytest.mark.parametrize("canonical_scale", [224, 56])
def test_multiscale_roi_align_matches_torchvision(monkeypatch: pytest.MonkeyPatch, sampling_ratio: int,
                                                  canonical_scale: int) -> None:  # fmt: skip
    import torchvision.ops.poolers as tv_poolers

    def python_roi_align(feature, rois, output_size, spatial_scale, sampling_ratio):
        return _tv_kernel()(feature, rois, spatial_scale, output_size[0], output_size[1], sampling_ratio, False)

    monkeypatch.setattr(tv_poolers, "roi_align", python_roi_align)  # its compiled one does not load here
    rng = np.random.default_rng(10)
    image_shapes = [(128, 160), (120, 150)]
    feats = {name: rng.standard_normal((2, 4, 128 // s, 160 // s)).astype(np.float32)
             for name, s in (("0", 4), ("1", 8), ("2", 16), ("3", 32))}  # fmt: skip
    feats["pool"] = rng.standard_normal((2, 4, 2, 3)).astype(np.float32)
    boxes = [np.concatenate([_image_boxes(12, 11, 128, 160), [[0, 0, 159, 127]]]).astype(np.float32),
             _image_boxes(9, 12, 120, 150)]  # fmt: skip
    names = ["0", "1", "2", "3"]
    kwargs = {"canonical_scale": canonical_scale}
    ours = ops.MultiScaleRoIAlign(names, 7, sampling_ratio, **kwargs)(
        {k: _serve(v) for k, v in feats.items()}, [_serve(b) for b in boxes], image_shapes
    )
    ref = tv_poolers.MultiScaleRoIAlign(names, 7, sampling_ratio, **kwargs)(
        {k: _torch(_serve(v)) for k, v in feats.items()}, [_torch(_serve(b)) for b in boxes], image_shapes
    )
    assert tuple(ours.shape) == tuple(ref.shape) == (22, 4, 7, 7)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    single = ops.MultiScaleRoIAlign(["1"], (3, 4), 2)(
        {"1": _serve(feats["1"])}, [_serve(b) for b in boxes], image_shapes
    )
    ref_single = tv_poolers.MultiScaleRoIAlign(["1"], (3, 4), 2)(
        {"1": _torch(_serve(feats["1"]))}, [_torch(_serve(b)) for b in boxes], image_shapes
    )
    np.testing.assert_allclose(single.numpy(), ref_single.numpy(), rtol=1e-5, atol=1e-5)


def test_multiscale_levels_follow_box_size() -> None:
    pooler = ops.MultiScaleRoIAlign(["a", "b", "c", "d"], 2, 2)
    rois = np.array([[0, 0, 0, 10, 10], [0, 0, 0, 112, 112], [0, 0, 0, 224, 224], [0, 0, 0, 500, 500]], np.float64)
    assert pooler._levels(rois, 2, 5).tolist() == [0, 1, 2, 3]  # levels 2 (clamped), 3, 4, 5 (clamped)


# -- layers ----------------------------------------------------------------------------------------------------
@needs_torchvision
def test_frozen_batchnorm_matches_torchvision_and_loads_batchnorm_checkpoints() -> None:
    import torch

    tv_layer = reference_torchvision().ops.FrozenBatchNorm2d(5)
    bn = torch.nn.BatchNorm2d(5)
    with torch.no_grad():
        for name in ("weight", "bias", "running_mean"):
            getattr(bn, name).copy_(torch.randn(5))
        bn.running_var.copy_(torch.rand(5) + 0.5)
    sd = bn.state_dict()  # has num_batches_tracked, which FrozenBatchNorm2d drops on load
    tv_layer.load_state_dict(sd)
    ours = ops.FrozenBatchNorm2d(5)
    ours.load_state_dict({k: _serve(v.numpy()) for k, v in sd.items()})
    assert sorted(ours.state_dict()) == sorted(tv_layer.state_dict())
    x = np.random.default_rng(13).standard_normal((2, 5, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(
        ours(_serve(x)).numpy(), tv_layer(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6
    )


def test_misc_layers_are_the_zoos_single_definitions() -> None:
    from serve.zoo import layers

    assert ops.Conv2dNormActivation is layers.Conv2dNormActivation
    assert ops.SqueezeExcitation is layers.SqueezeExcitation
    assert ops.StochasticDepth is layers.StochasticDepth
    assert ops.FeaturePyramidNetwork is ops.feature_pyramid_network.FeaturePyramidNetwork
    assert math.isclose(ops.misc.stochastic_depth(serve.ones(2, 3), 0.5, "row", training=False).sum().item(), 6.0)
