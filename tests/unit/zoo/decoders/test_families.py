"""Each decoder family against transformers + torch on the same checkpoint: logits of a prefill, of a prompt
chunked across steps beside another sequence's decode, and of decode steps through a paged KV cache of 4-token
blocks handed out of order; greedy tokens equal to `generate(do_sample=False)`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serve.zoo.decoders import layers, load_pretrained
from tests.unit.zoo.decoders.reference import (
    CONFIGS,
    PagedRunner,
    assert_close,
    make_checkpoint,
    reference_generate,
    reference_logits,
)

NEW_TOKENS = 8


def run_and_compare(model: object, folder: Path) -> None:
    runner = PagedRunner(load_pretrained(folder))
    rng = np.random.default_rng(1)
    a, b = runner.add(rng.integers(2, 398, 7).tolist()), runner.add(rng.integers(2, 398, 10).tolist())
    prompts = [list(a.tokens), list(b.tokens)]
    # step 1: a's whole prompt and the first 6 tokens of b's (a chunk), every row's logits
    logits = runner.step([(a, 7), (b, 6)], all_logits=True)
    assert_close(logits[:7], reference_logits(model, a.tokens))
    assert_close(logits[7:], reference_logits(model, b.tokens[:6]))
    a.tokens.append(int(logits[6].argmax()))
    # step 2: a decodes while b's prompt finishes; then both decode, one row each
    work = [(a, 1), (b, 4)]
    while len(b.tokens) < len(prompts[1]) + NEW_TOKENS:
        logits = runner.step(work)
        for row, (seq, _) in zip(logits, work, strict=True):
            assert_close(row, reference_logits(model, seq.tokens)[-1])
            seq.tokens.append(int(row.argmax()))
        work = [(a, 1), (b, 1)]
    for seq, prompt in zip((a, b), prompts, strict=True):
        expected = reference_generate(model, prompt, NEW_TOKENS)  # stops early only at eos
        assert seq.tokens[len(prompt) : len(prompt) + len(expected)] == expected


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_greedy_tokens_match_transformers(name: str, tmp_path: Path) -> None:
    model = make_checkpoint(name, tmp_path)
    run_and_compare(model, tmp_path)


def test_a_sharded_checkpoint_loads_from_its_index(tmp_path: Path) -> None:
    model = make_checkpoint("qwen3", tmp_path, max_shard_size="60KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    run_and_compare(model, tmp_path)


def test_the_sliding_window_changes_the_answer(tmp_path: Path) -> None:
    """The Mistral case above is only a test of the window if the window matters for these lengths."""
    model = make_checkpoint("mistral", tmp_path)
    ids = list(range(2, 20))
    windowed = reference_logits(model, ids)[-1]
    model.config.sliding_window = None
    for layer in model.model.layers:
        layer.self_attn.sliding_window = None
    assert not np.allclose(windowed, reference_logits(model, ids)[-1], atol=1e-3)


def test_the_numpy_fallback_matches_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without serve's native kernels (SERVE_NATIVE=0, a CPU without AVX2) the products are numpy's."""
    monkeypatch.setattr(layers.cpu_native, "available", lambda: False)
    model = make_checkpoint("llama", tmp_path)
    assert load_pretrained(tmp_path).blocks[0].qkv.weight is not None  # type: ignore[attr-defined]
    run_and_compare(model, tmp_path)


@pytest.mark.skipif(not layers.cpu_native.bf16_available(), reason="needs AVX512-BF16 and serve's native kernels")
@pytest.mark.parametrize("name", ["gpt2", "qwen3"])
def test_bfloat16_weights_stay_near_float32(name: str, tmp_path: Path) -> None:
    make_checkpoint(name, tmp_path)
    runs = []
    for dtype in ("float32", "bfloat16"):
        runner = PagedRunner(load_pretrained(tmp_path, dtype=dtype))
        seq = runner.add(list(range(2, 40)))
        runs.append(runner.step([(seq, len(seq.tokens))], all_logits=True))
    fp32, bf16 = runs
    scale = float(np.abs(fp32).max())
    assert np.abs(bf16 - fp32).max() > 1e-5 * scale  # the products really ran in bf16
    np.testing.assert_allclose(bf16, fp32, rtol=0, atol=3e-2 * scale)
    assert (bf16.argmax(-1) == fp32.argmax(-1)).mean() >= 0.9


def test_a_sequence_without_new_rows_beside_one_with_two(tmp_path: Path) -> None:
    """As many rows as sequences is not a decode-only step when one sequence has none and another two."""
    model = make_checkpoint("qwen2", tmp_path)
    runner = PagedRunner(load_pretrained(tmp_path))
    a, b = runner.add([5, 6, 7, 8, 9]), runner.add([10, 11, 12])
    runner.step([(a, 3), (b, 3)])
    logits = runner.step([(a, 2), (b, 0)], all_logits=True)
    assert_close(logits, reference_logits(model, a.tokens)[3:5])


def test_auto_dtype_is_the_checkpoints_where_the_cpu_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.backend import cpu_native
    from serve.zoo.decoders.loader import auto_dtype

    monkeypatch.setattr(cpu_native, "bf16_available", lambda: True)
    assert (auto_dtype("bfloat16"), auto_dtype("float32"), auto_dtype("float16")) == ("bfloat16", "float32",
                                                                                        "float32")  # fmt: skip
    monkeypatch.setattr(cpu_native, "bf16_available", lambda: False)
    assert auto_dtype("bfloat16") == "float32"
