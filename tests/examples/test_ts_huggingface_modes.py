"""TorchServe's Huggingface_Transformers example in its token classification and question answering modes.

As test_ts_huggingface.py (the handler unchanged, transformers 4.51 and captum from .venv/transformers451 in the
workers, stand-in models and hub tokenizers), with the model-config's `handler:` section changed as the README
says for each mode (token_classification with 9 labels and Token_classification_artifacts/index_to_name.json;
question_answering on `distilbert-base-cased-distilled-squad` with `embedding_name: distilbert`), the rest of the
file, pt2 included, as shipped. Archives with the README's flags for each mode; one server serves both.

Reference: the handler itself on the real torch with the same transformers and captum (hf_handler_reference.py) on
the archive's files: token classification's (token, label) pairs for all 150 positions, question answering's
answer span, equal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from tests.examples.test_ts_huggingface import LEG, SNAPSHOT, WORDS, handler_on_torch, transformers
from tests.examples.ts_files import archive, example_files
from tests.helpers import torch
from tests.integration.server import ServerProcess

pytestmark = pytest.mark.skipif(not (LEG / "transformers").is_dir() or not (LEG / "captum").is_dir(),
                                reason="transformers 4.51 and captum are not installed in .venv/transformers451 "
                                       "(make test installs them)")  # fmt: skip

TOKEN_TEXTS = ["the movie was great", "a new report on the economy", "i love the actors"]
QUESTIONS = [{"question": "was the movie good", "context": "the movie was great i love the actors"},
             {"question": "the report", "context": "a new report on the economy was bad"}]  # fmt: skip


def hub_tokenizer(hub: Path, name: str, tokenizer_class: str, lower: bool) -> None:
    repo = hub / f"models--{name}"
    snapshot = repo / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    (snapshot / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lower, "model_max_length": 512,
                                                                "tokenizer_class": tokenizer_class}))  # fmt: skip


def model_config(src: Path, changes: dict[str, str]) -> Path:
    """The example's model-config.yaml with its handler lines changed as the README says for the mode."""
    text = (src / "model-config.yaml").read_text()
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    path = src / f"model-config-{len(changes)}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_huggingface_modes")
    store, hub = base / "store", base / "hf" / "hub"
    store.mkdir()
    src = example_files(base, "Huggingface_Transformers")
    hub_tokenizer(hub, "bert-base-uncased", "BertTokenizer", True)
    hub_tokenizer(hub, "distilbert-base-cased-distilled-squad", "DistilBertTokenizer", False)
    torch.manual_seed(27)
    bert = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64, max_position_embeddings=160,
                                   num_labels=9)  # fmt: skip
    transformers.BertForTokenClassification(bert).eval().save_pretrained(src / "token_model")
    distil = transformers.DistilBertConfig(vocab_size=len(WORDS) + 5, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                           max_position_embeddings=160)  # fmt: skip
    transformers.DistilBertForQuestionAnswering(distil).eval().save_pretrained(src / "qa_model")
    token_yaml = model_config(src, {"mode: sequence_classification": "mode: token_classification",
                                    "num_labels: 2": "num_labels: 9"})  # fmt: skip
    qa_yaml = model_config(src, {"model_name: bert-base-uncased": "model_name: distilbert-base-cased-distilled-squad",
                                 "mode: sequence_classification": "mode: question_answering",
                                 "num_labels: 2": "num_labels: 0",
                                 "embedding_name: bert": "embedding_name: distilbert"})  # fmt: skip
    archive(store, "--model-name", "BERTTokenClassification", "--version", "1.0",
            "--serialized-file", str(src / "token_model" / "model.safetensors"),
            "--handler", str(src / "Transformer_handler_generalized.py"), "--config-file", str(token_yaml),
            "--extra-files", f"{src / 'token_model' / 'config.json'},"
            f"{src / 'Token_classification_artifacts' / 'index_to_name.json'}")  # fmt: skip
    archive(store, "--model-name", "BERTQA", "--version", "1.0",
            "--serialized-file", str(src / "qa_model" / "model.safetensors"),
            "--handler", str(src / "Transformer_handler_generalized.py"), "--config-file", str(qa_yaml),
            "--extra-files", str(src / "qa_model" / "config.json"))  # fmt: skip
    leg_env = {"PYTHONPATH": str(LEG), "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    token_bodies = [json.dumps({"text": t, "target": 1}) for t in TOKEN_TEXTS]
    qa_bodies = [json.dumps(q) for q in QUESTIONS]
    (base / "token_ref").mkdir()
    (base / "qa_ref").mkdir()
    token_ref = handler_on_torch(base / "token_ref", store / "BERTTokenClassification.mar", leg_env, token_bodies, [])
    qa_ref = handler_on_torch(base / "qa_ref", store / "BERTQA.mar", leg_env, qa_bodies, [])
    refs = {"BERTTokenClassification": (token_bodies, token_ref), "BERTQA": (qa_bodies, qa_ref)}
    with pytest.MonkeyPatch.context() as env:
        for key, value in leg_env.items():
            env.setenv(key, value)
        models = "BERTTokenClassification=BERTTokenClassification.mar,BERTQA=BERTQA.mar"
        server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models", models).start()
    try:
        yield server, refs
    finally:
        server.stop()
        shutil.rmtree(base / "hf", ignore_errors=True)


@pytest.mark.parametrize("name", ["BERTTokenClassification", "BERTQA"])
def test_mode_answers_as_the_handler_on_torch(served, name):
    server, refs = served
    bodies, reference = refs[name]
    for body, want in zip(bodies, reference["predictions"], strict=True):
        response = httpx.post(f"{server.inference}/predictions/{name}", content=body, timeout=300)
        assert response.status_code == 200, f"{response.status_code} {response.text[:500]}\n{server.log()}"
        json_body = response.headers.get("content-type", "").startswith("application/json")
        got = response.json() if json_body else response.text
        assert got == want, f"{name} {body}: {got!r} vs torch's {want!r}"
