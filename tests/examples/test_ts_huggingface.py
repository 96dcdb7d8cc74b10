"""TorchServe's Huggingface_Transformers example, its handler and model-config unchanged, on a real server.

`Transformer_handler_generalized.py` imports captum and transformers at the top, loads the model with
`AutoModelForSequenceClassification.from_pretrained(model_dir)` in initialize, its tokenizer by the hub name of
the model-config (`bert-base-uncased`: the archive holds no vocab file), calls `torch.compile(model,
backend="inductor", mode="reduce-overhead")` (the model-config's pt2 section), tokenizes with
`encode_plus(..., pad_to_max_length=True)`, which transformers removed in 4.52, and reads each request as the
captum input format (`{"text": ..., "target": 1}`, `captum_explanation: true`). So its worker runs transformers
4.51.3 (and captum 0.9 with matplotlib), installed beside the venv in `.venv/transformers451` by the Makefile
(`pip install --no-deps --target`), on PYTHONPATH of the server (the workers inherit it) and nowhere else; the
test skips without it. Everything torch-shaped in that worker is serve's alias.

Stand-ins for what the README downloads: a seeded small BERT made here by torch and transformers 5.24 and saved
with `save_pretrained` (model.safetensors and config.json, archived with the README's flags), and the
`bert-base-uncased` tokenizer as a hub cache entry (a vocabulary of the test's words) read with HF_HUB_OFFLINE=1.

References: (1) the same folder loaded by transformers 5.24 on the real torch, the same text tokenized to 150
tokens (padding="max_length", what pad_to_max_length=True meant) with that vocabulary: the handler's answer is the
index_to_name.json name of torch's argmax, for texts whose two logits are apart; (2) the handler itself on the real
torch with the same transformers 4.51 and captum (hf_handler_reference.py, its own process, on the archive's files):
the explanation (`/explanations`: captum's LayerIntegratedGradients over the embeddings, on serve's autograd in the
worker) has the same words, and importances and convergence delta within EXPLAIN_TOL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.examples.ts_files import archive, example_files
from tests.integration.server import ServerProcess
from tests.torchvision_reference import reference_torchvision

reference_torchvision()  # transformers 5.x imports torchvision, whose wheel here needs this to import
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

LEG = Path(__file__).resolve().parents[2] / ".venv" / "transformers451"
WORDS = ["the", "a", "movie", "was", "great", "bad", "good", "terrible", "i", "love", "it", "hate", "this", "film",
         "plot", "actors", "report", "economy", "new"]  # fmt: skip
EXPLAINED = json.dumps({"text": "a new report on the economy", "target": 1})
TEXTS = ["the movie was great", "i hate this film", "a new report on the economy", "the plot was terrible",
         "i love the actors"]  # fmt: skip
SNAPSHOT = "0" * 40
EXPLAIN_TOL = 1e-6  # 50 integration steps through BERT, float32 on both sides: measured 1.0e-7 off
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not (LEG / "transformers").is_dir() or not (LEG / "captum").is_dir(),
                                reason="transformers 4.51 and captum are not installed in .venv/transformers451 "
                                       "(make test installs them)")  # fmt: skip


def stand_in_tokenizer(hub: Path) -> Path:
    """`bert-base-uncased` in a hub cache: refs/main -> a snapshot with the vocabulary and tokenizer config."""
    repo = hub / "models--bert-base-uncased"
    snapshot = repo / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    (snapshot / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512,
                                                                "tokenizer_class": "BertTokenizer"}))  # fmt: skip
    (snapshot / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": len(WORDS) + 5}))
    return snapshot


def handler_on_torch(base: Path, mar: Path, leg_env: dict[str, str], bodies: list[str], explain: list[str]) -> dict:
    """hf_handler_reference.py's answers for these request bodies (and explanations), on the archive's files
    (extracted as the worker has them)."""
    folder = base / "reference"
    with zipfile.ZipFile(mar) as z:
        z.extractall(folder)
    (base / "job.json").write_text(json.dumps({"bodies": bodies, "explain": explain}))
    env = {**os.environ, **leg_env}
    done = subprocess.run([sys.executable, str(HERE / "hf_handler_reference.py"), str(folder), str(base / "job.json"),
                           str(base / "reference.json")], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((base / "reference.json").read_text())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_huggingface")
    store = base / "store"
    store.mkdir()
    src = example_files(base, "Huggingface_Transformers")
    vocab = stand_in_tokenizer(base / "hf" / "hub")
    torch.manual_seed(26)
    config = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=160,
                                     num_labels=2)  # fmt: skip
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(src / "Transformer_model")
    archive(store, "--model-name", "BERTSeqClassification", "--version", "1.0",
            "--serialized-file", str(src / "Transformer_model" / "model.safetensors"),
            "--handler", str(src / "Transformer_handler_generalized.py"),
            "--config-file", str(src / "model-config.yaml"),
            "--extra-files", f"{src / 'Transformer_model' / 'config.json'},"
            f"{src / 'Seq_classification_artifacts' / 'index_to_name.json'}")  # fmt: skip
    leg_env = {"PYTHONPATH": str(LEG), "HF_HUB_CACHE": str(base / "hf" / "hub"), "HF_HUB_OFFLINE": "1",
               "MPLBACKEND": "Agg"}  # fmt: skip  # the workers' transformers 4.51 and captum (serve's root first)
    reference = handler_on_torch(base, store / "BERTSeqClassification.mar", leg_env,
                                 [json.dumps({"text": t, "target": 1}) for t in TEXTS], [EXPLAINED])  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        for key, value in leg_env.items():
            env.setenv(key, value)
        server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models",
                               "BERTSeqClassification=BERTSeqClassification.mar").start()  # fmt: skip
    try:
        yield server, src, vocab, reference
    finally:
        server.stop()
        shutil.rmtree(base / "hf", ignore_errors=True)


def test_sequence_classification_answers_torchs_label(served):
    server, src, vocab, reference = served
    names = json.loads((src / "Seq_classification_artifacts" / "index_to_name.json").read_text())
    model = transformers.AutoModelForSequenceClassification.from_pretrained(src / "Transformer_model").eval()
    tokenizer = transformers.BertTokenizer(str(vocab / "vocab.txt"), do_lower_case=True)
    compared = 0
    for text in TEXTS:
        inputs = tokenizer(text, max_length=150, padding="max_length", truncation=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(inputs["input_ids"], inputs["attention_mask"]).logits[0]
        body = json.dumps({"text": text, "target": 1})  # the captum input format the model-config asks for
        response = httpx.post(f"{server.inference}/predictions/BERTSeqClassification", content=body, timeout=300)
        assert response.status_code == 200, f"{response.status_code} {response.text[:500]}\n{server.log()}"
        if abs(float(logits[0] - logits[1])) > 1e-4:  # a label the 1e-5 agreement cannot flip
            assert response.text == names[str(int(logits.argmax()))]
            compared += 1
    assert compared >= 3
    assert reference["predictions"][: len(TEXTS)] == [names[str(int(m))] for m in _argmaxes(model, tokenizer)]


def _argmaxes(model, tokenizer) -> list[int]:
    """The handler on the real torch agrees with transformers 5.24 on torch: the two references are one."""
    out = []
    for text in TEXTS:
        inputs = tokenizer(text, max_length=150, padding="max_length", truncation=True, return_tensors="pt")
        with torch.no_grad():
            out.append(int(model(inputs["input_ids"], inputs["attention_mask"]).logits[0].argmax()))
    return out


def test_captum_explanation_matches_the_handler_on_torch(served):
    server, _, _, reference = served
    response = httpx.post(f"{server.inference}/explanations/BERTSeqClassification", content=EXPLAINED, timeout=600)
    assert response.status_code == 200, f"{response.status_code} {response.text[:500]}\n{server.log()}"
    got, want = response.json(), reference["explanations"][0]
    assert got["words"] == want["words"] and len(got["importances"]) == len(want["words"]) == 8  # [CLS] 6 [SEP]
    assert max(abs(x) for x in want["importances"]) > 1e-3  # attributions worth comparing
    np.testing.assert_allclose(got["importances"], want["importances"], atol=EXPLAIN_TOL, rtol=0)
    np.testing.assert_allclose(got["delta"], want["delta"], atol=EXPLAIN_TOL, rtol=0)
