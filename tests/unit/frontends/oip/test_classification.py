"""Triton's classification extension (serve/frontends/oip/classification.py): top k by score against numpy's
argsort, Triton's "score:index:label" text, and the model-config's format / label_filename declarations."""

from __future__ import annotations

import numpy as np
import pytest

from serve.errors import InvalidInput
from serve.frontends.oip.classification import declared, top_k


def test_top_k_matches_numpy_with_labels_and_without() -> None:
    scores = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    labels = ["a", "b", "c", "d", "e", "f"]
    got = top_k(scores, 2, labels, batched=True)
    assert got.shape == (3, 2)
    for row, answer in zip(scores, got, strict=True):
        best = np.argsort(-row)[:2]
        assert [s.decode() for s in answer] == [f"{row[i]:f}:{i}:{labels[i]}" for i in best]
    flat = top_k(np.array([1, 5, 3], dtype=np.int32), 5, None, batched=False)  # k past the classes: all of them
    assert flat.tolist() == [b"5.000000:1", b"3.000000:2", b"1.000000:0"]
    short = top_k(np.array([[0.1, 0.9]]), 2, ["only"], batched=True)  # no label line for index 1
    assert short.tolist() == [[b"0.900000:1", b"0.100000:0:only"]]
    assert top_k(np.array([2.0, 2.0]), 2, None, batched=False).tolist() == [b"2.000000:0", b"2.000000:1"]


def test_classification_of_bytes_is_refused() -> None:
    with pytest.raises(InvalidInput, match="numeric"):
        top_k(np.array([b"x"], dtype=np.object_), 1, None, batched=False)


def test_declared_format_and_labels() -> None:
    handler = {"inputs": [{"name": "x", "format": "FORMAT_NHWC"}, {"name": "y"}],
               "outputs": [{"name": "z", "label_filename": "labels.txt"}]}  # fmt: skip
    assert declared(handler, "inputs", "format") == {"x": "FORMAT_NHWC"}
    assert declared(handler, "outputs", "label_filename") == {"z": "labels.txt"}
    with pytest.raises(InvalidInput, match="FORMAT_CHW"):
        declared({"inputs": [{"name": "x", "format": "FORMAT_CHW"}]}, "inputs", "format")
