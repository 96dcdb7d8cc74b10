"""`text_classifier`, batched, against PyTorch twins (a tiny BERT classifier and an LSTM classifier) sharing one
torch-saved state_dict: softmax probabilities per request, labelled from index_to_name.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from handlers.text_classifier import TextClassifier, takes_attention_mask
from serve.worker import Context, load_handler
from tests.helpers import needs_torch, torch

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "movie", "was", "great", "awful", "plot", "acting", "fine"]
TEXTS = ["The movie was GREAT", "awful plot", "the acting was fine , the plot was awful", "great"]

BERT_MODEL = """
from serve import nn
from serve.zoo.bert import BertConfig, BertModel

CONFIG = BertConfig(vocab_size=12, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                    max_position_embeddings=32)


class TinyBertClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = BertModel(CONFIG)
        self.classifier = nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask):
        return self.classifier(self.bert(input_ids, attention_mask).pooler_output)
"""

LSTM_MODEL = """
from serve.zoo.lstm_classifier import LSTMClassifier


class Sentiment(LSTMClassifier):
    def __init__(self):
        super().__init__(vocab_size=12, embedding_dim=6, hidden_size=5, num_classes=2)
"""


def write_tokenizer(path: Path, special_tokens: bool, left_padding: bool = False) -> Tokenizer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if special_tokens:
        specials = [("[CLS]", 2), ("[SEP]", 3)]
        tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=specials)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", direction="left" if left_padding else "right")
    tok.save(str(path))
    return tok


def make_archive(root: Path, source: str, state_dict, mapping=None, special_tokens=True, left_padding=False):
    (root / "MAR-INF").mkdir(parents=True)
    (root / "model.py").write_text(source)
    torch.save(state_dict, root / "weights.pt")
    tokenizer = write_tokenizer(root / "tokenizer.json", special_tokens, left_padding)
    if mapping is not None:
        (root / "index_to_name.json").write_text(json.dumps(mapping))
    manifest = {"model": {"modelName": "clf", "modelFile": "model.py", "serializedFile": "weights.pt",
                          "handler": "text_classifier"}}  # fmt: skip
    (root / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    ctx = Context("clf", str(root), manifest, 8, None, "0.1.0")
    return load_handler(ctx), ctx, tokenizer


def torch_bert_classifier():
    from serve.zoo.bert import BertConfig
    from tests.unit.zoo import twins_text as tt

    config = BertConfig(vocab_size=12, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                        max_position_embeddings=32)  # fmt: skip

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = tt.BertModel(config)
            self.classifier = torch.nn.Linear(8, 3)

        def forward(self, input_ids, attention_mask):
            return self.classifier(self.bert(input_ids, attention_mask)[1])

    torch.manual_seed(0)
    return Twin().eval()


def reference_probs(model, tokenizer, texts, with_mask: bool) -> np.ndarray:
    enc = tokenizer.encode_batch(texts)
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    with torch.no_grad():
        logits = model(ids, mask) if with_mask else model(ids)
        return torch.softmax(logits, dim=-1).numpy()


@needs_torch
def test_bert_classifier_matches_torch_for_the_whole_batch(tmp_path):
    twin = torch_bert_classifier()
    mapping = {"0": "negative", "1": ["n-1", "neutral"], "2": "positive"}
    handler, ctx, tokenizer = make_archive(tmp_path, BERT_MODEL, twin.state_dict(), mapping)
    assert isinstance(handler, TextClassifier) and handler.pass_attention_mask
    rows = [
        {"body": TEXTS[0].encode()},
        {"data": {"text": TEXTS[1]}},
        {"data": TEXTS[2]},
        {"body": b'{"inputs": "great"}'},
    ]
    out = handler.handle(rows, ctx)
    expected = reference_probs(twin, tokenizer, TEXTS, with_mask=True)
    assert len(out) == 4 and all(list(o) == ["negative", "neutral", "positive"] for o in out)  # every request answered
    np.testing.assert_allclose(np.array([list(o.values()) for o in out]), expected, rtol=1e-5, atol=1e-6)


@needs_torch
def test_lstm_classifier_gets_only_the_ids_and_labels_default_to_indices(tmp_path):
    from tests.unit.zoo import twins_text as tt

    torch.manual_seed(1)
    twin = tt.LSTMClassifier(12, 6, 5, 2).eval()
    handler, ctx, tokenizer = make_archive(tmp_path, LSTM_MODEL, twin.state_dict(), special_tokens=False,
                                           left_padding=True)  # fmt: skip
    assert not handler.pass_attention_mask and handler.mapping is None
    out = handler.handle([{"body": t.encode()} for t in TEXTS], ctx)
    expected = reference_probs(twin, tokenizer, TEXTS, with_mask=False)
    assert all(list(o) == ["0", "1"] for o in out)
    np.testing.assert_allclose(np.array([[o["0"], o["1"]] for o in out]), expected, rtol=1e-5, atol=1e-6)
    assert handler.tokenizer.padding["direction"] == "left"  # the file's padding side is kept


@needs_torch
def test_bad_rows_do_not_disturb_the_others(tmp_path):
    twin = torch_bert_classifier()
    handler, ctx, tokenizer = make_archive(tmp_path, BERT_MODEL, twin.state_dict())
    ctx.begin_batch({0: "a", 1: "b", 2: "c"}, [{}, {}, {}])
    out = handler.handle([{"body": b""}, {"body": TEXTS[1].encode()}, {"body": b"\xc3\x28"}], ctx)
    assert out[0]["code"] == 400 and out[2]["code"] == 400 and "not UTF-8" in out[2]["message"]
    expected = reference_probs(twin, tokenizer, [TEXTS[1]], with_mask=True)[0]
    np.testing.assert_allclose(list(out[1].values()), expected, rtol=1e-5, atol=1e-6)
    assert [ctx.get_response_status(i)[0] for i in range(3)] == [400, 200, 400]


def test_signature_decides_whether_the_mask_is_passed():
    class A:
        def forward(self, input_ids, attention_mask=None): ...

    class B:
        def forward(self, input_ids): ...

    class C:
        def forward(self, *inputs): ...

    class D:
        def forward(self, ids, mask): ...

    assert [takes_attention_mask(m()) for m in (A, B, C, D)] == [True, False, True, True]


def test_output_that_is_not_logits_is_a_clear_error(tmp_path):
    pytest.importorskip("torch")
    source = (
        "from serve import nn\nclass Bad(nn.Module):\n    def forward(self, ids):\n        return ids[:, :, None]\n"
    )
    handler, ctx, _ = make_archive(tmp_path, source, {})
    with pytest.raises(RuntimeError, match=r"expects logits \(batch, classes\) from the model, got \(1, 4, 1\)"):
        handler.handle([{"body": b"the movie"}], ctx)
