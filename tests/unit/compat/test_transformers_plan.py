"""transformers' GPT-2 on serve's torch alias through the inference plan (issue 26 item 4's follow-up): its `Conv1D`
layers (weight (in, out), `addmm`) are planned as linear layers on every kernel, `gelu_new` fused after each c_fc,
the residual adds and the LayerNorms after them fused, and the logits and greedy tokens equal torch's. The model is
built with the real transformers + torch from a seeded small config, `save_pretrained` into tmp_path and loaded in
another process with the alias on (plan_runner.py). The rules themselves, and the lookalikes they refuse:
tests/unit/inference/test_lookalikes.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from serve.inference import kernels
from tests.transformers_reference import needs_transformers, reference_transformers

pytestmark = needs_transformers
RUNNER = Path(__file__).with_name("plan_runner.py")
RUNNER_S = 600  # transformers' import and four small plans: seconds on a quiet machine, bounded for a load of 10
NEW_TOKENS = 4
CONFIG = {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 99, "n_positions": 64, "bos_token_id": 1,
          "eos_token_id": 2, "pad_token_id": 0}  # fmt: skip
CONV1D = [f"transformer.h.{i}.{c}" for i in (0, 1) for c in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
PLANS = [  # name, kernels each layer may choose (tune=False takes the last that applies), products
    {"name": "blas", "kernels": ["blas"], "dtype": "float32"},
    {"name": "native", "kernels": ["native"], "dtype": "float32"},
    {"name": "native_bf16", "kernels": ["native_bf16"], "dtype": "bfloat16"},
]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    import torch

    transformers = reference_transformers()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.GPT2Config(**CONFIG)).eval()
    folder = tmp_path_factory.mktemp("gpt2_plan")
    model.save_pretrained(folder)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 90, (2, 7)).astype(np.int64)  # (B, T)
    mask = np.ones_like(ids)
    mask[1, :2] = 0  # the second row left-padded, as batched generation pads
    np.save(folder / "input_ids.npy", ids)
    np.save(folder / "attention_mask.npy", mask)
    inputs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    with torch.no_grad():
        expected = {"logits": model(**inputs).logits.numpy(),
                    "tokens": model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()}  # fmt: skip
    job = {"folder": str(folder), "plans": PLANS, "new_tokens": NEW_TOKENS}
    (folder / "job.json").write_text(json.dumps(job))
    done = subprocess.run([sys.executable, str(RUNNER), str(folder / "job.json")], capture_output=True, text=True,
                          timeout=RUNNER_S, cwd=str(folder))  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return folder, expected


@pytest.mark.parametrize("plan", PLANS, ids=[p["name"] for p in PLANS])
def test_gpt2_conv1d_layers_are_planned_and_match_torch(planned, plan):
    name = plan["name"]
    if (name != "blas" and kernels.native() is None) or (name.endswith("bf16") and not kernels.bf16_products()):
        pytest.skip(f"this CPU has no {name} kernel")
    folder, expected = planned
    error = folder / f"{name}_error.txt"
    assert not error.exists(), error.read_text()[-3000:]
    report = json.loads((folder / f"{name}.json").read_text())
    info = report["describe"]
    assert info["optimized"], info["reason"]
    assert info["passes"]["conv1d"] == 8 and info["passes"]["linear"] == 9  # the 8 Conv1D and lm_head
    assert info["passes"]["act_fused"] == 2  # gelu_new after each c_fc, as the epilogue's gelu_tanh
    assert info["passes"]["residual_fused"] == 4 and info["passes"]["add_norm"] == 4  # ln_2, ln_1 of block 1, ln_f
    assert report["plan_type"] == "PlannedLinear"
    chosen = {e["layer"]: e["kernel"] for e in info["precision"]}
    assert sorted(chosen) == sorted(CONV1D + ["lm_head"])
    kept_float32 = {"transformer.h.0.attn.c_attn", "lm_head"}  # mixed precision: the reference kernel there
    for layer, kernel in chosen.items():
        assert kernel == ("blas" if name.endswith("bf16") and layer in kept_float32 else name), layer
    assert report["shared"] == dict.fromkeys(CONV1D, True)  # each product reads the model's (in, out) weight
    logits, want = np.load(folder / f"{name}_logits.npy"), expected["logits"]
    rtol = 1e-2 if name.endswith("bf16") else 1e-4  # the plan's own check against eager
    assert logits.shape == want.shape
    assert float(np.abs(logits - want).max()) <= rtol * float(np.abs(want).max())
    if not name.endswith("bf16"):
        np.testing.assert_array_equal(np.load(folder / f"{name}_tokens.npy"), expected["tokens"])
