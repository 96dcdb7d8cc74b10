"""The generative benchmark's models: seeded random Hugging Face folders, their tokenizer, and serve's archive of them.

    folder = make_folder("gpt2")          # bench/out/generation/models/gpt2, made once
    archive(folder, store, "gpt2", {"max_num_seqs": 64, ...})

Decisions:
- transformers builds the model from a config (seeded) and `save_pretrained`s it (safetensors), so serve and the
  references load the very same folder. GPT-2 small is the real 124M shape; `llama` is a Llama-style model of
  ~340M parameters (hidden 1024, 24 layers, GQA 16 query / 4 KV heads, SwiGLU 2816, untied 32000-token head), the
  size class of the issue's llama.cpp anchor.
- The tokenizer is a byte-level BPE trained with `tokenizers` on synthetic words (120k random letter strings), to
  exactly the config's vocab size, so every id the random model picks decodes (as GPT-2's does) and the server's
  detokenizer does its real work. Prompts are sent as token ids, so the tokenizer's quality does not matter.
- Weight bytes per token (the memory-bandwidth bound) count every tensor a decode step reads in full: all but the
  position table and an input embedding that is not also the output head (those are read one row per token).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "bench" / "out" / "generation" / "models"

SIZES: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    # family: (transformers config class, its arguments, special tokens (ids 0..n-1))
    "gpt2": ("GPT2Config", dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                                bos_token_id=0, eos_token_id=0), ["<|endoftext|>"]),
    "llama": ("LlamaConfig", dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                                  num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                                  tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
              ["<unk>", "<s>", "</s>"]),
}  # fmt: skip


def make_folder(family: str) -> Path:
    """The family's folder under bench/out (made once: model, tokenizer, configs)."""
    folder = MODELS / family
    if (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file():
        return folder
    import torch

    sys.modules.setdefault("torchvision._meta_registrations", type(sys)("torchvision._meta_registrations"))
    import transformers

    cls, kwargs, specials = SIZES[family]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs))
    model.save_pretrained(folder, safe_serialization=True)
    make_tokenizer(folder, kwargs["vocab_size"], specials)
    return folder


def make_tokenizer(folder: Path, vocab_size: int, specials: list[str]) -> None:
    import numpy as np
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(120_000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator((" ".join(words[i : i + 1000]) for i in range(0, len(words), 1000)), trainer)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"the trained tokenizer has {tok.get_vocab_size()} ids, the config {vocab_size}")
    tok.save(str(folder / "tokenizer.json"))
    eos = specials[-1] if len(specials) > 1 else specials[0]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": specials[min(1, len(specials) - 1)],
              "eos_token": eos, "pad_token": specials[0], "model_max_length": 1024,
              "clean_up_tokenization_spaces": False}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def weight_bytes_per_token(folder: Path, itemsize: int) -> tuple[int, int]:
    """(parameters read in full per decode step, their bytes at `itemsize`), from model.safetensors' header."""
    with open(folder / "model.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    shapes = {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    untied = "lm_head.weight" in shapes
    params = 0
    for name, shape in shapes.items():
        if name.endswith("wpe.weight") or (untied and name.endswith("embed_tokens.weight")):
            continue  # read one row per token
        count = 1
        for d in shape:
            count *= d
        params += count
    return params, params * itemsize


def total_params(folder: Path) -> int:
    with open(folder / "model.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    total = 0
    for k, v in header.items():
        if k != "__metadata__":
            count = 1
            for d in v["shape"]:
                count *= d
            total += count
    return total


def archive(folder: Path, store: Path, name: str, handler: dict[str, Any], threads: int) -> str:
    """Archive `folder` as `name` (handler text_generation, no-archive format) with a model-config holding the
    engine settings `handler` and the worker's threads (TorchServe's torchrun.OMP_NUMBER_THREADS); the --models
    entry that serves it."""
    sys.path.insert(0, str(ROOT))
    from serve.cli.model_archiver import main as model_archiver

    store.mkdir(parents=True, exist_ok=True)
    config = store / f"{name}-config.yaml"
    lines = ["minWorkers: 1", "maxWorkers: 1", "responseTimeout: 600", "jobQueueSize: 1024",
             "torchrun:", f"  OMP_NUMBER_THREADS: {threads}", "handler:"]  # fmt: skip
    lines += [f"  {k}: {v}" for k, v in handler.items()]
    config.write_text("\n".join(lines) + "\n")
    files = ",".join(str(p) for p in sorted(folder.iterdir()) if p.is_file())
    argv = ["--model-name", name, "--version", "1.0", "--handler", "text_generation", "--config-file",
            str(config), "--export-path", str(store), "--force", "--archive-format", "no-archive",
            "--extra-files", files]  # fmt: skip
    if model_archiver(argv) != 0:
        raise RuntimeError(f"model-archiver failed for {name}")
    return f"{name}={name}"
