"""Integrated gradients (handlers/explanations.py) and the built-in handlers' explanations (handlers/insights.py).

References: the same quadrature written with torch autograd for the gradients, Captum's IntegratedGradients and
LayerIntegratedGradients when captum is importable, a linear model's closed form, and the completeness property
(a row's attributions sum to F(x) - F(baseline) up to the returned delta).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import serve
import serve.nn.functional as F
from handlers.explanations import (
    integrated_gradients,
    integration_points,
    layer_integrated_gradients,
    repeat_bags,
    steps_setting,
)
from handlers.image_classifier import ImageClassifier
from handlers.image_segmenter import ImageSegmenter
from handlers.insights import _summarize
from serve import nn
from serve.errors import PredictionException
from serve.worker import Context, load_handler
from tests.helpers import needs_torch, torch
from tests.unit.handlers.vision_helpers import png_bytes, vision_handler

METHODS = ["gausslegendre", "riemann_right", "riemann_left", "riemann_middle", "riemann_trapezoid"]


class ToyNet(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, classes)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.fc(serve.flatten(F.adaptive_avg_pool2d(serve.tanh(self.conv(x)), 1), 1))  # (N, classes)


def torch_twin(model: ToyNet):
    twin = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Tanh(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(4, model.fc.out_features))  # fmt: skip
    names = {"0.weight": "conv.weight", "0.bias": "conv.bias", "4.weight": "fc.weight", "4.bias": "fc.bias"}
    twin.load_state_dict({k: torch.from_numpy(model.state_dict()[v].numpy()) for k, v in names.items()})
    return twin.eval()


def torch_ig(forward, x, targets, n_steps, method, baseline=None):
    """The same weighted sum with torch autograd's gradients, one step at a time."""
    baseline = torch.zeros_like(x) if baseline is None else baseline
    alphas, weights = integration_points(n_steps, method)
    total = torch.zeros_like(x, dtype=torch.float64)
    for a, w in zip(alphas, weights):
        point = (baseline + float(a) * (x - baseline)).requires_grad_()
        out = forward(point)
        (grad,) = torch.autograd.grad(out[torch.arange(len(targets)), torch.tensor(targets)].sum(), point)
        total += w * grad.double()
    return (total * (x - baseline).double()).numpy()


def images(n: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 9, 9)).astype(np.float32)


# ---- the quadrature ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_points_lie_in_the_unit_interval_and_weights_sum_to_one(method):
    alphas, weights = integration_points(7, method)
    assert alphas.shape == weights.shape == (7,) and np.all((alphas >= 0) & (alphas <= 1))
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    # each rule integrates a line exactly (the midpoint and Gauss rules more): mean of a*2 over [0, 1] is 1
    if method in ("gausslegendre", "riemann_middle", "riemann_trapezoid"):
        assert (weights * 2 * alphas).sum() == pytest.approx(1.0, abs=1e-12)


def test_gauss_legendre_is_exact_for_polynomials_of_degree_2n_minus_1():
    alphas, weights = integration_points(4)
    assert (weights * alphas**7).sum() == pytest.approx(1 / 8, abs=1e-12)


def test_bad_settings_say_what_is_allowed():
    with pytest.raises(ValueError, match="n_steps must be a positive integer"):
        integration_points(0)
    with pytest.raises(ValueError, match="unknown integration method 'simpson'"):
        integration_points(5, "simpson")
    with pytest.raises(ValueError, match=r"handler\.ig_steps must be an integer from 1 to 256, got 1000"):
        steps_setting({"ig_steps": 1000}, "ig_steps", 15)
    assert steps_setting({}, "ig_steps", 15) == 15


# ---- integrated gradients against references -----------------------------------------------------------------


def test_a_linear_model_gets_its_closed_form_and_zero_delta():
    model = nn.Linear(6, 3)
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    attr, delta = integrated_gradients(model, serve.from_numpy(x), [0, 2, 1, 2], n_steps=3)
    w = model.weight.detach().numpy()
    np.testing.assert_allclose(attr.numpy(), x * w[[0, 2, 1, 2]], rtol=1e-5, atol=1e-6)  # (x - 0) * dF/dx
    np.testing.assert_allclose(delta.numpy(), 0, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("method", METHODS)
def test_attributions_match_the_same_sum_with_torch_gradients(method):
    model = ToyNet().eval()
    x = images()
    attr, _ = integrated_gradients(model, serve.from_numpy(x), [1, 3], n_steps=9, method=method)
    ref = torch_ig(torch_twin(model), torch.from_numpy(x), [1, 3], 9, method)
    np.testing.assert_allclose(attr.numpy(), ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())


@needs_torch
def test_batched_steps_equal_one_step_per_forward_and_nonzero_baselines_work():
    model = ToyNet().eval()
    x, base = images(3), images(3, seed=5) * 0.1
    one_per_forward, _ = integrated_gradients(model, serve.from_numpy(x), 2, baselines=serve.from_numpy(base),
                                              n_steps=10, internal_batch_size=1)  # fmt: skip
    all_at_once, _ = integrated_gradients(model, serve.from_numpy(x), 2, baselines=serve.from_numpy(base),
                                          n_steps=10)  # fmt: skip
    np.testing.assert_allclose(one_per_forward.numpy(), all_at_once.numpy(), rtol=1e-5, atol=1e-8)
    ref = torch_ig(torch_twin(model), torch.from_numpy(x), [2, 2, 2], 10, "gausslegendre", torch.from_numpy(base))
    np.testing.assert_allclose(all_at_once.numpy(), ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    assert all(p.grad is None for p in model.parameters())  # nothing left on the model


def test_completeness_attributions_sum_to_the_change_of_the_output():
    model = ToyNet().eval()
    x = images()
    attr, delta = integrated_gradients(model, serve.from_numpy(x), [0, 4], n_steps=64, internal_batch_size=32)
    with serve.no_grad():
        change = (model(serve.from_numpy(x)) - model(serve.zeros(2, 3, 9, 9))).numpy()[[0, 1], [0, 4]]
    sums = attr.numpy().reshape(2, -1).sum(axis=1)
    np.testing.assert_allclose(sums - change, delta.numpy(), atol=1e-5)  # delta is exactly that difference
    assert np.all(np.abs(delta.numpy()) < 1e-3 * np.abs(change).max())  # and it is small: the integral converged


@needs_torch
def test_integrated_gradients_match_captum():
    IntegratedGradients = _captum().IntegratedGradients
    model = ToyNet().eval()
    x = images()
    ours, ours_delta = integrated_gradients(model, serve.from_numpy(x), [1, 3], n_steps=50)
    ref, ref_delta = IntegratedGradients(torch_twin(model)).attribute(
        torch.from_numpy(x), target=[1, 3], n_steps=50, return_convergence_delta=True
    )
    ref = ref.detach().numpy()
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    np.testing.assert_allclose(ours_delta.numpy(), ref_delta.numpy(), atol=1e-5)


# ---- layer integrated gradients (TorchServe's text path) -----------------------------------------------------


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(9, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, text: serve.Tensor, offsets: serve.Tensor) -> serve.Tensor:
        return self.fc(serve.tanh(self.embedding(text, offsets)))  # (bags, classes)


@needs_torch
def test_layer_attributions_over_an_embedding_bag_match_torch():
    model = Bag().eval()
    text, offsets = serve.tensor([1, 2, 3, 8, 4, 5]), serve.tensor([0, 4])
    attr, delta = layer_integrated_gradients(model, model.embedding, (text, offsets),
                                             (serve.zeros_like(text), offsets), [2, 0], repeat=repeat_bags,
                                             n_steps=20, internal_batch_size=8)  # fmt: skip
    bag = torch.nn.EmbeddingBag(9, 4)
    bag.weight.data = torch.from_numpy(model.embedding.weight.detach().numpy())
    fc = torch.nn.Linear(4, 3)
    fc.weight.data, fc.bias.data = (torch.from_numpy(p.detach().numpy()) for p in (model.fc.weight, model.fc.bias))
    t_text, t_off = torch.tensor([1, 2, 3, 8, 4, 5]), torch.tensor([0, 4])
    e_in, e_base = bag(t_text, t_off).detach(), bag(torch.zeros_like(t_text), t_off).detach()
    ref = torch_ig(lambda e: fc(torch.tanh(e)), e_in, [2, 0], 20, "gausslegendre", e_base)
    np.testing.assert_allclose(attr.numpy(), ref, rtol=1e-4, atol=1e-7)
    assert attr.shape == (2, 4) and np.all(np.abs(delta.numpy()) < 1e-4)
    assert not model.embedding._forward_hooks  # the hooks are removed


@needs_torch
def test_layer_integrated_gradients_match_captum():
    LayerIntegratedGradients = _captum().LayerIntegratedGradients
    model = Bag().eval()
    twin = torch.nn.Module()
    twin.embedding = torch.nn.EmbeddingBag(9, 4)
    twin.fc = torch.nn.Linear(4, 3)
    twin.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})

    def twin_forward(text, offsets):
        return twin.fc(torch.tanh(twin.embedding(text, offsets)))

    ids = [1, 2, 3, 8]
    ours, _ = layer_integrated_gradients(model, model.embedding, (serve.tensor(ids), serve.tensor([0])),
                                         (serve.zeros(4, dtype=serve.int64), serve.tensor([0])), 1,
                                         repeat=repeat_bags)  # fmt: skip
    # one text with offsets [0], as TorchServe calls it: Captum repeats the text, every copy a bag of its own
    ref = LayerIntegratedGradients(twin_forward, twin.embedding).attribute(
        torch.tensor(ids), torch.zeros(4, dtype=torch.int64), additional_forward_args=(torch.tensor([0]),), target=1
    )
    np.testing.assert_allclose(ours.numpy(), ref.detach().numpy()[:1], rtol=1e-4, atol=1e-7)


def _captum():
    captum_attr = pytest.importorskip("captum.attr")
    return captum_attr


# ---- the handlers --------------------------------------------------------------------------------------------


def explain(handler, context, rows):
    context.begin_batch({i: f"r{i}" for i in range(len(rows))}, [{"explain": "True"} for _ in rows])
    return handler.handle(rows, context)


def test_image_classifier_explains_each_request_with_its_own_target(tmp_path):
    model = ToyNet()
    handler, context = vision_handler(ImageClassifier, model, tmp_path, {"image_size": 9, "mean": None, "std": None})
    raws = [png_bytes(12, 12, seed=s) for s in range(3)]
    rows = [{"body": raws[0]}, {"body": raws[1], "target": b"3"}, {"body": b"not an image"}, {"data": raws[2]}]
    out = explain(handler, context, rows)
    assert len(out) == 4 and out[2]["code"] == 400  # the bad image answers alone
    batch = handler.preprocess([rows[0], rows[1], rows[3]])
    want, _ = integrated_gradients(model, batch, [0, 3, 0], n_steps=15)  # TorchServe's 15 steps, target 0 default
    got = np.array([out[0], out[1], out[3]])
    assert got.shape == (3, 3, 9, 9)  # one (C, H, W) nested list per request
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-9)


def test_explanation_steps_come_from_the_model_config_and_are_bounded(tmp_path):
    model = ToyNet()
    (tmp_path / "a").mkdir()
    handler, context = vision_handler(ImageClassifier, model, tmp_path / "a", {"image_size": 9, "ig_steps": 4})
    (out,) = explain(handler, context, [{"body": png_bytes(9, 9)}])
    want, _ = integrated_gradients(model, handler.preprocess([{"body": png_bytes(9, 9)}]), 0, n_steps=4)
    np.testing.assert_allclose(np.array(out), want.numpy()[0], rtol=1e-6, atol=1e-9)
    (tmp_path / "b").mkdir()
    with pytest.raises(ValueError, match=r"ig_steps must be an integer from 1 to 256, got 300"):
        vision_handler(ImageClassifier, model, tmp_path / "b", {"image_size": 9, "ig_steps": 300})


@pytest.mark.parametrize(
    ("target", "message"),
    [("cat", "target 'cat' is not a class index"), (7, "target 7 is out of range for a model with 5 outputs")],
)
@pytest.mark.parametrize("position", [0, 2])
def test_a_bad_target_is_a_400_naming_it_and_fails_alone(tmp_path, target, message, position):
    model = ToyNet()
    handler, context = vision_handler(ImageClassifier, model, tmp_path, {"image_size": 9, "mean": None, "std": None})
    raws = [png_bytes(9, 9, seed=s) for s in range(3)]
    rows = [{"body": raws[0], "target": "1"}, {"body": raws[1]}, {"body": raws[2], "target": "4"}]
    rows[position] = {**rows[position], "target": target}
    out = explain(handler, context, rows)
    assert out[position]["code"] == 400 and message in out[position]["message"]
    assert context.get_response_status(position)[0] == 400
    kept = [i for i in range(3) if i != position]
    batch = handler.preprocess([rows[i] for i in kept])
    want, _ = integrated_gradients(model, batch, [[1, 0, 4][i] for i in kept], n_steps=15)
    np.testing.assert_allclose(np.array([out[i] for i in kept]), want.numpy(), rtol=1e-6, atol=1e-9)


class Segments(nn.Module):
    def forward(self, x: serve.Tensor) -> dict[str, serve.Tensor]:
        return {"out": x[:, :2]}


def test_handlers_without_class_scores_answer_501_saying_why(tmp_path):
    handler, context = vision_handler(ImageSegmenter, Segments(), tmp_path, {"image_size": 9})
    with pytest.raises(PredictionException, match="not supported by Toy: its model returns dict") as e:
        explain(handler, context, [{"body": png_bytes(9, 9)}])
    assert e.value.code == 501


def test_the_base_handler_still_answers_501(tmp_path):
    from handlers.base_handler import BaseHandler

    handler = BaseHandler()
    context = Context("m", str(tmp_path), {"model": {}}, 1, None, "t")
    handler.context = context
    with pytest.raises(PredictionException, match="implement get_insights") as e:
        explain(handler, context, [{"body": b"[1]"}])
    assert e.value.code == 501


# ---- text ----------------------------------------------------------------------------------------------------

VOCAB = {"<unk>": 0, "the": 1, "movie": 2, "is": 3, "not": 4, "good": 5, "the movie": 6, "not good": 7, "bad": 8}
BAG_MODEL = """
import torch
from torch import nn


class TextSentiment(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(9, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))
"""


@needs_torch
def test_text_classifier_explains_as_torchserve_words_and_importances(tmp_path):
    from handlers.text_vocab import token_ids

    torch.manual_seed(0)
    bag, fc = torch.nn.EmbeddingBag(9, 4), torch.nn.Linear(4, 3)
    torch.save({"embedding.weight": bag.weight, "fc.weight": fc.weight, "fc.bias": fc.bias}, tmp_path / "model.pt")
    torch.save(VOCAB, tmp_path / "source_vocab.pt")
    (tmp_path / "model.py").write_text(BAG_MODEL)
    manifest = {"model": {"modelName": "news", "modelFile": "model.py", "serializedFile": "model.pt",
                          "handler": "text_classifier"}}  # fmt: skip
    context = Context("news", str(tmp_path), manifest, 4, None, "0.1", model_yaml_config={"torchCompat": True})
    handler = load_handler(context)
    texts = ["The movie isn't good!", "bad"]
    out = explain(handler, context, [{"body": texts[0].encode()}, {"body": texts[1].encode(), "target": "2"}])
    assert out[0]["words"] == ["the", "movie", "is", "not", "good"] and out[1]["words"] == ["bad"]
    for text, target, got in zip(texts, [0, 2], out):
        assert set(got) == {"importances", "words"}
        ids = torch.tensor(token_ids(VOCAB, text, 2))
        e_in = bag(ids, torch.tensor([0])).detach()
        e_base = bag(torch.zeros_like(ids), torch.tensor([0])).detach()
        attr = torch_ig(fc, e_in, [target], 50, "gausslegendre", e_base)  # (1, D): the bag's embedding
        assert np.array(got["importances"]).shape == (1, 4)
        np.testing.assert_allclose(got["importances"], _summarize(attr), rtol=1e-4, atol=1e-7)
        soft = torch.softmax(torch.from_numpy(attr), dim=-1)  # TorchServe's summarize_attributions, in torch
        np.testing.assert_allclose(got["importances"], (soft / soft.sum(-1).norm()).numpy(), rtol=1e-4, atol=1e-7)


@needs_torch
def test_tokenizer_text_classifier_gives_one_importance_per_token_and_a_small_delta(tmp_path):
    from tests.unit.handlers.test_text_classifier import BERT_MODEL, make_archive, torch_bert_classifier

    handler, ctx, _ = make_archive(tmp_path, BERT_MODEL, torch_bert_classifier().state_dict())
    handler.handler_config = {"ig_steps": 64}
    out = explain(handler, ctx, [{"body": b"the movie was great"}, {"data": json.dumps({"text": "awful plot"})}])
    assert out[0]["words"] == ["[CLS]", "the", "movie", "was", "great", "[SEP]"]
    assert out[1]["words"] == ["[CLS]", "awful", "plot", "[SEP]"]  # padding left out
    for got in out:
        assert set(got) == {"words", "importances", "delta"} and len(got["importances"]) == len(got["words"])
        assert np.linalg.norm(got["importances"]) == pytest.approx(1.0, rel=1e-5)
        assert abs(got["delta"]) < 1e-3


def test_a_torchserve_subclass_calling_self_ig_runs_unchanged(tmp_path):
    from serve.compat.ts.torch_handler.image_classifier import ImageClassifier as TsImageClassifier

    class Custom(TsImageClassifier):
        def get_insights(self, tensor_data, _, target=0):  # TorchServe's VisionHandler.get_insights, as written
            return self.ig.attribute(tensor_data, target=target, n_steps=15).tolist()

    model = ToyNet()
    handler, context = vision_handler(Custom, model, tmp_path, {"image_size": 9})
    rows = [{"body": png_bytes(9, 9, seed=1), "target": "2"}]
    (out,) = explain(handler, context, rows)
    want, _ = integrated_gradients(model, handler.preprocess(rows), 2, n_steps=15)
    np.testing.assert_allclose(np.array(out), want.numpy()[0], rtol=1e-6, atol=1e-9)
