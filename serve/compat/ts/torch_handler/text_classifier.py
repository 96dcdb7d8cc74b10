"""`ts.torch_handler.text_classifier.TextClassifier`: TorchServe's text classifier on serve's built-in one.

Always TorchServe's input: each text cleaned, tokenized with its n-grams (`ngrams` = 2) and looked up in the
source vocabulary, and the model called as `model(text, offsets)` (EmbeddingBag's input); the answer per request
is `{label: probability}` over every class. Unlike TorchServe's (which reads only the first request), every
request of a batch is classified. A subclass whose preprocess returns one text's id tensor gets offsets [0],
as TorchServe's inference adds them.
"""

from __future__ import annotations

from handlers import text_classifier as serve_text_classifier
from serve.compat.ts.torch_handler.text_handler import TextHandler


class TextClassifier(TextHandler, serve_text_classifier.TextClassifier):
    """TorchServe's TextClassifier: `model(text, offsets)`, softmax, `{label: prob}` per request."""

    text_input = "source_vocab"
    ngrams = 2
