"""Hugging Face transformers runs unchanged on serve's torch alias (issue 26 item 2): for each family a seeded model
is built from a small config with the REAL transformers + torch (this process), `save_pretrained` into tmp_path, then
loaded in another process with the alias on (hf_runner.py: installed as a worker of a torch-compat archive installs
it) through `AutoModel...from_pretrained(folder)`; its forward (and greedy `generate` for the generative ones) must
match torch's: logits within 1e-5 of the largest, tokens equal. One aliased process runs every family (transformers'
import dominates its start); each family reports its own failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.transformers_reference import needs_transformers, reference_transformers

pytestmark = needs_transformers
RUNNER = Path(__file__).with_name("hf_runner.py")
RUNNER_S = 600  # every family in one process: about 20 s on a quiet machine, bounded for a load of 10
NEW_TOKENS = 4
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "vocab_size": 99}  # fmt: skip
DECODER = SMALL | {"num_key_value_heads": 2, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                   "max_position_embeddings": 64}  # fmt: skip
SEQ2SEQ_HEADS = {"encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                 "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}  # fmt: skip

# name: (config class, auto class, config kwargs, inputs kind, new tokens to generate)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], str, int]] = {
    "bert": ("BertConfig", "AutoModelForSequenceClassification", SMALL | {"num_labels": 3}, "text", 0),
    "distilbert": ("DistilBertConfig", "AutoModelForSequenceClassification",
                   {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64, "vocab_size": 99, "num_labels": 3},
                   "text", 0),
    "roberta": ("RobertaConfig", "AutoModelForSequenceClassification",
                SMALL | {"num_labels": 3, "max_position_embeddings": 64}, "text", 0),
    "albert": ("AlbertConfig", "AutoModelForSequenceClassification", SMALL | {"embedding_size": 16, "num_labels": 2},
               "text", 0),
    "electra": ("ElectraConfig", "AutoModelForSequenceClassification", SMALL | {"embedding_size": 16, "num_labels": 2},
                "text", 0),
    "gpt2": ("GPT2Config", "AutoModelForCausalLM",
             {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 99, "n_positions": 64, "bos_token_id": 1,
              "eos_token_id": 2, "pad_token_id": 0}, "text", NEW_TOKENS),
    "llama": ("LlamaConfig", "AutoModelForCausalLM", DECODER, "text", NEW_TOKENS),
    "qwen2": ("Qwen2Config", "AutoModelForCausalLM", DECODER, "text", NEW_TOKENS),
    "mistral": ("MistralConfig", "AutoModelForCausalLM", DECODER, "text", NEW_TOKENS),
    "t5": ("T5Config", "AutoModelForSeq2SeqLM",
           {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4, "vocab_size": 99,
            "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 98}, "seq2seq", NEW_TOKENS),
    "bart": ("BartConfig", "AutoModelForSeq2SeqLM",
             {"d_model": 32, "vocab_size": 99, "max_position_embeddings": 64, "pad_token_id": 1, "bos_token_id": 0,
              "eos_token_id": 98, "decoder_start_token_id": 2, "forced_eos_token_id": None} | SEQ2SEQ_HEADS,
             "seq2seq", NEW_TOKENS),
    "vit": ("ViTConfig", "AutoModelForImageClassification",
            {"image_size": 16, "patch_size": 4, "num_channels": 3, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 64, "num_labels": 3}, "image", 0),
    "clip": ("CLIPConfig", "AutoModel",
             {"text_config": {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                              "num_hidden_layers": 2, "vocab_size": 99, "max_position_embeddings": 16},
              "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                                "num_hidden_layers": 2, "image_size": 16, "patch_size": 4},
              "projection_dim": 16}, "text+image", 0),
    "whisper": ("WhisperConfig", "AutoModelForSpeechSeq2Seq",
                {"d_model": 32, "vocab_size": 99, "num_mel_bins": 8, "max_source_positions": 8,
                 "max_target_positions": 32, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 98,
                 "decoder_start_token_id": 1, "begin_suppress_tokens": None, "suppress_tokens": None}
                | SEQ2SEQ_HEADS, "audio", NEW_TOKENS),
    "bert_mean_pooling": ("BertConfig", "AutoModel", SMALL, "text", 0),  # sentence embeddings: the hidden states
}  # fmt: skip
FAMILIES["gpt2_beam_search"] = FAMILIES["gpt2"]  # generate(num_beams=2, num_return_sequences=2)
OUTPUTS = {"clip": "logits_per_image", "bert_mean_pooling": "last_hidden_state"}  # default: "logits"
BEAMS = {"gpt2_beam_search": 2}


def _inputs(kind: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if kind == "image":
        return {"pixel_values": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    if kind == "audio":  # (batch, mel bins, 2 * max_source_positions frames)
        return {"input_features": rng.standard_normal((2, 8, 16)).astype(np.float32),
                "decoder_input_ids": rng.integers(3, 90, (2, 3)).astype(np.int64)}  # fmt: skip
    ids = rng.integers(3, 90, (2, 7)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, :2] = 0  # the second row left-padded, as batched generation pads
    inputs = {"input_ids": ids, "attention_mask": mask}
    if kind == "seq2seq":
        inputs["decoder_input_ids"] = rng.integers(3, 90, (2, 3)).astype(np.int64)
    if kind == "text+image":
        inputs["pixel_values"] = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    return inputs


def _build(root: Path, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The family's model made and saved with torch; the job for the runner and torch's outputs."""
    import torch

    transformers = reference_transformers()
    config_class, auto_class, kwargs, kind, new_tokens = FAMILIES[name]
    torch.manual_seed(0)
    model = getattr(transformers, auto_class).from_config(getattr(transformers, config_class)(**kwargs)).eval()
    folder = root / name
    model.save_pretrained(folder)
    inputs = _inputs(kind)
    for key, value in inputs.items():
        np.save(folder / f"{key}.npy", value)
    tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
    with torch.no_grad():
        expected = {"logits": getattr(model(**tensors), OUTPUTS.get(name, "logits")).numpy()}
        if new_tokens:
            prompt = {k: v for k, v in tensors.items() if not k.startswith("decoder_")}
            beams = BEAMS.get(name, 1)
            expected["tokens"] = model.generate(**prompt, max_new_tokens=new_tokens, do_sample=False, num_beams=beams,
                                                num_return_sequences=beams).numpy()  # fmt: skip
    job = {"name": name, "folder": str(folder), "auto_class": auto_class,
           "inputs": {k: f"{k}.npy" for k in inputs}, "generate": new_tokens,
           "output": OUTPUTS.get(name, "logits"), "num_beams": BEAMS.get(name, 1)}  # fmt: skip
    return job, expected


@pytest.fixture(scope="module")
def aliased_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    root = tmp_path_factory.mktemp("hf_families")
    built = {name: _build(root, name) for name in FAMILIES}
    (root / "jobs.json").write_text(json.dumps([job for job, _ in built.values()]))
    done = subprocess.run([sys.executable, str(RUNNER), str(root / "jobs.json")], capture_output=True, text=True,
                          timeout=RUNNER_S, cwd=str(root))  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return {name: (Path(job["folder"]), expected) for name, (job, expected) in built.items()}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_family_loads_with_from_pretrained_and_matches_torch(aliased_runs, name):
    folder, expected = aliased_runs[name]
    error = folder / "error.txt"
    assert not error.exists(), error.read_text()[-3000:]
    logits = np.load(folder / "out_logits.npy")
    assert logits.shape == expected["logits"].shape
    scale = float(np.abs(expected["logits"]).max())
    assert float(np.abs(logits - expected["logits"]).max()) <= 1e-5 * scale
    if "tokens" in expected:
        np.testing.assert_array_equal(np.load(folder / "out_tokens.npy"), expected["tokens"])
