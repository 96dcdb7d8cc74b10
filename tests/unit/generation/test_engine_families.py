"""The engine over the real decoder families (serve/zoo/decoders, from save_pretrained checkpoints) against
transformers' greedy `generate`: requests joining at different steps, prompts prefilled in chunks beside decodes,
and a KV budget small enough that sequences are preempted and recomputed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serve.generation import EngineConfig, LLMEngine, SamplingParams
from serve.zoo.decoders import load_pretrained
from serve.zoo.decoders.step import KVCache
from tests.unit.generation.tiny import run, tokens_of

reference = pytest.importorskip("tests.unit.zoo.decoders.reference")
EOS = 399


class IdsTokenizer:
    eos_token_ids = frozenset({EOS})

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f"<{i}>" for i in ids if not (skip_special_tokens and i == EOS))

    def id_to_token(self, token_id: int) -> str:
        return f"<{token_id}>"


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen3", "gemma2", "gemma3"])
def test_greedy_tokens_equal_transformers_generate_under_batching_chunking_and_preemption(
    family: str, tmp_path: Path
) -> None:
    model = reference.make_checkpoint(family, tmp_path)
    decoder = load_pretrained(tmp_path)
    rng = np.random.default_rng(0)
    requests = [(f"r{i}", [int(t) for t in rng.integers(2, 399, int(rng.integers(3, 30)))], 12) for i in range(6)]
    block_size = 4
    config = EngineConfig(max_model_len=48, max_num_seqs=4, max_num_batched_tokens=16, block_size=block_size,
                          kv_cache_bytes=16 * KVCache.bytes_per_block(decoder.spec, block_size))  # fmt: skip
    engine = LLMEngine(decoder, IdsTokenizer(), config)
    arrivals = {
        2 * i: [(r, ids, SamplingParams(max_tokens=n, temperature=0.0))] for i, (r, ids, n) in enumerate(requests)
    }
    outputs = run(engine, arrivals)
    assert engine.stats()["num_preemptions"] > 0
    for rid, ids, n in requests:
        expected = reference.reference_generate(model, ids, n)
        if EOS in expected:
            expected = expected[: expected.index(EOS) + 1]
        assert tokens_of(outputs[rid]) == expected, rid
