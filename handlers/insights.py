"""The built-in handlers' explanations (`/explanations/{model}`, `/v2/models/{model}/explain`): TorchServe's JSON.

    image_classifier (and every VisionHandler whose model returns class scores (N, classes)):
        one nested list per request, the integrated-gradients attributions of the request's target class with
        respect to its preprocessed image, shape (C, H, W) as the model sees it (TorchServe's
        `IntegratedGradients(model).attribute(images, target=target, n_steps=15).tolist()`)
    text_classifier, source_vocab archives (TorchServe's `model(text, offsets)`):
        {"importances": [[...]], "words": [...]} per request: layer integrated gradients over `model.embedding`'s
        output (the bag's embedding, (1, D)), baseline token 0 at every position, 50 steps, summarized as
        TorchServe's `summarize_attributions` does (softmax over D, divided by the norm of its sum), so the
        importances are per embedding dimension, as TorchServe's are; words are the text's tokens
    text_classifier, tokenizer archives:
        {"words": [...], "importances": [...], "delta": d} per request (the shape of TorchServe's Transformers
        example): layer integrated gradients over the word-embedding layer, baseline = the pad token everywhere
        but the special tokens, one importance per token (summed over the embedding, divided by the norm)

The target class is the request's `target` field (a form field, or a key of a JSON body), 0 when absent, as in
TorchServe; unlike TorchServe (which takes the first request's target for the whole batch) each request gets its
own, and a target that is not a class index or not one of the model's outputs is that request's 400 (TorchServe
fails the batch). Bounded: model-config `handler: {ig_steps: N}` (TorchServe's 15 for images, 50 for text; at
most 256) and `ig_batch_size` (points per forward, default 16) keep one explanation from holding the worker for
minutes.

Handlers whose model does not answer class scores (image_segmenter's dict, object_detector's list of
detections) answer 501 with a message that says so, as does any handler without `get_insights`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from handlers.explanations import (
    TargetOutOfRange,
    integrated_gradients,
    layer_integrated_gradients,
    repeat_bags,
    repeat_rows,
    row_target,
    steps_setting,
)
from handlers.text_input import decode_text
from handlers.text_vocab import clean_text
from serve.errors import InvalidInput, PredictionException

DEFAULT_BATCH = 16  # interpolation points per forward
MAX_BATCH = 4096


def explain_rows(handler: Any, data_preprocess: Any, raw_data: list[Any]) -> list[Any]:
    """`handler.get_insights` on the requests that decoded, each with its own target; [] when none did. A target
    that is not a class index, or not one of the model's outputs, is that request's 400: its batch-mates are
    explained (after an out-of-range one, in a second pass with it at target 0, its answer dropped)."""
    if data_preprocess is None:
        return []
    errors = getattr(handler, "_row_errors", {})
    indices = [i for i in range(len(raw_data)) if i not in errors]
    rows = [raw_data[i] for i in indices]
    targets: list[int] = []
    refused: set[int] = set()  # positions in `rows`
    for position, row in enumerate(rows):
        try:
            targets.append(row_target(row))
        except InvalidInput as e:
            handler.row_error(indices[position], 400, str(e))
            refused.add(position)
            targets.append(0)
    if len(refused) == len(rows):
        return []
    try:
        answers = list(handler.get_insights(data_preprocess, rows, targets))
    except TargetOutOfRange as e:
        for position, target in enumerate(targets):
            if target >= e.outputs and position not in refused:
                handler.row_error(indices[position], 400, f"target {target} is out of range for a model with "
                                  f"{e.outputs} outputs: send a class index from 0 to {e.outputs - 1}")  # fmt: skip
                refused.add(position)
                targets[position] = 0
        answers = list(handler.get_insights(data_preprocess, rows, targets)) if len(refused) < len(rows) else []
    return [answer for position, answer in enumerate(answers) if position not in refused]


def ig_settings(handler: Any, default_steps: int) -> tuple[int, int]:
    """(n_steps, points per forward) from the model-config `handler:` section."""
    config = getattr(handler, "handler_config", None) or {}
    return steps_setting(config, "ig_steps", default_steps), steps_setting(config, "ig_batch_size", DEFAULT_BATCH,
                                                                              MAX_BATCH)  # fmt: skip


def not_explainable(handler: Any, why: str) -> PredictionException:
    return PredictionException(
        f"explanations are not supported by {type(handler).__name__}: {why}; explanations (integrated gradients) "
        "need a model that returns class scores (batch, classes)",
        501,
    )


# ---- images ----------------------------------------------------------------------------------------------------


def image_insights(handler: Any, images: Any, target: Any) -> list[Any]:
    """Integrated gradients of each image's target score: (N, C, H, W) as nested lists, one per image."""
    if not isinstance(images, serve.Tensor):
        raise not_explainable(handler, f"its preprocess gives {type(images).__name__}, not one image batch tensor")
    steps, per_forward = ig_settings(handler, getattr(handler, "ig_steps", 15))

    def forward(x: serve.Tensor) -> serve.Tensor:
        out = handler.model(handler.model_input(x))
        if not isinstance(out, serve.Tensor) or out.ndim != 2:
            got = list(out.shape) if isinstance(out, serve.Tensor) else type(out).__name__
            raise not_explainable(handler, f"its model returns {got}")
        return out

    attributions, _ = integrated_gradients(forward, images.float(), _targets(target, images.shape[0]),
                                           n_steps=steps, internal_batch_size=per_forward)  # fmt: skip
    return attributions.tolist()


# ---- text ------------------------------------------------------------------------------------------------------


def text_insights(handler: Any, data: Any, rows: Any, target: Any) -> list[dict[str, Any]]:
    """TorchServe's text explanation per request (see the module docstring for the two kinds of archive)."""
    if data is None:
        return []
    texts = [decode_text(_payload(row)) for row in rows] if isinstance(rows, list) else []
    if getattr(handler, "text_input", None) == "source_vocab":
        return _bag_insights(handler, data, texts, target)
    return _token_insights(handler, data, texts, target)


def _bag_insights(handler: Any, data: Any, texts: list[str], target: Any) -> list[dict[str, Any]]:
    text, offsets = (data, serve.tensor([0], dtype=serve.int64)) if isinstance(data, serve.Tensor) else data[:2]
    text, offsets = text.to(handler.device), offsets.to(handler.device)
    model = handler.model
    layer = embedding_layer(model, "embedding", (serve.nn.EmbeddingBag, serve.nn.Embedding))
    steps, per_forward = ig_settings(handler, getattr(handler, "ig_steps", 50))
    n = offsets.shape[0]
    attributions, _ = layer_integrated_gradients(
        lambda *a: _logits_of(handler, model(*a)), layer, (text, offsets), (serve.zeros_like(text), offsets),
        _targets(target, n), repeat=repeat_bags, n_steps=steps, internal_batch_size=per_forward,
    )  # fmt: skip
    words = [_word_tokens(clean_text(t)) for t in texts] if len(texts) == n else [[] for _ in range(n)]
    return [{"importances": _summarize(row[None]).tolist(), "words": w} for row, w in zip(attributions.numpy(), words)]


def _token_insights(handler: Any, data: Any, texts: list[str], target: Any) -> list[dict[str, Any]]:
    input_ids, attention_mask = (t.to(handler.device) for t in data[:2])
    encodings = handler.tokenizer.encode_batch(texts) if texts else []
    if len(encodings) != input_ids.shape[0]:
        raise not_explainable(handler, "its preprocess does not give one row of token ids per request")
    special = np.asarray([e.special_tokens_mask for e in encodings], dtype=bool)
    mask = attention_mask.cpu().numpy().astype(bool)
    pad_id = (handler.tokenizer.padding or {}).get("pad_id", 0)
    base = np.where(special | ~mask, input_ids.cpu().numpy(), pad_id)
    baseline = serve.from_numpy(base.astype(np.int64)).to(handler.device)
    with_mask = bool(getattr(handler, "pass_attention_mask", True))
    inputs = (input_ids, attention_mask) if with_mask else (input_ids,)
    baselines = (baseline, attention_mask) if with_mask else (baseline,)
    model = handler.model
    layer = embedding_layer(model, "word_embeddings", (serve.nn.Embedding,))
    steps, per_forward = ig_settings(handler, getattr(handler, "ig_steps", 50))
    attributions, delta = layer_integrated_gradients(
        lambda *a: _logits_of(handler, model(*a)), layer, inputs, baselines, _targets(target, len(encodings)),
        repeat=repeat_rows, n_steps=steps, internal_batch_size=per_forward,
    )  # fmt: skip
    per_token = attributions.numpy().astype(np.float64).sum(axis=-1)  # (B, T)
    answers = []
    for i, enc in enumerate(encodings):
        keep = mask[i]
        scores = per_token[i][keep]
        norm = np.linalg.norm(scores)
        answers.append({
            "words": _word_tokens([tok for tok, k in zip(enc.tokens, keep) if k]),
            "importances": (scores / norm if norm > 0 else scores).tolist(),
            "delta": float(delta[i]),
        })  # fmt: skip
    return answers


def embedding_layer(model: Any, name: str, kinds: tuple[type, ...]) -> Any:
    """`model.<name>` when it is one of `kinds`, else the first such module whose name ends with `name`, else
    the first such module; 501 when the model has none."""
    module = getattr(model, "original", model)
    named = getattr(module, name, None)
    if isinstance(named, kinds):
        return named
    found = (
        [(n, m) for n, m in module.named_modules() if isinstance(m, kinds)] if hasattr(module, "named_modules") else []
    )
    for n, m in found:
        if n.endswith(name):
            return m
    if found:
        return found[0][1]
    raise PredictionException(
        f"explanations of text need an embedding layer (model.{name}, an nn.Embedding or nn.EmbeddingBag) to "
        f"integrate over; {type(module).__name__} has none",
        501,
    )


def _summarize(attributions: np.ndarray) -> np.ndarray:
    """TorchServe's `summarize_attributions`: softmax over the last dimension, divided by the norm of its sums."""
    shifted = np.exp(attributions - attributions.max(axis=-1, keepdims=True))
    soft = shifted / shifted.sum(axis=-1, keepdims=True)
    return soft / np.linalg.norm(soft.sum(axis=-1))


def _word_tokens(tokens: list[str]) -> list[str]:
    """TorchServe's `get_word_token`: the byte-level BPE space marker removed."""
    return [t.replace("\u0120", "") for t in tokens]


def _logits_of(handler: Any, out: Any) -> Any:
    if isinstance(out, dict):
        out = out.get("logits")
    elif isinstance(out, (tuple, list)) and out:
        out = out[0]
    elif not isinstance(out, serve.Tensor):
        out = getattr(out, "logits", None)
    if not isinstance(out, serve.Tensor) or out.ndim != 2:
        got = list(out.shape) if isinstance(out, serve.Tensor) else type(out).__name__
        raise not_explainable(handler, f"its model returns {got}")
    return out


def _targets(target: Any, n: int) -> list[int]:
    if isinstance(target, (list, tuple)):
        if len(target) != n:
            raise ValueError(f"{len(target)} targets for {n} inputs: give one target per input, or one int")
        return [int(t) for t in target]
    return [int(target or 0)] * n


def _payload(row: Any) -> Any:
    if not isinstance(row, dict):
        return row
    value = row.get("data")
    return row.get("body") if value is None or value in (b"", "") else value
