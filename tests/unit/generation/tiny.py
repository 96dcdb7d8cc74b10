"""A tiny decoder for the engine's tests: one attention layer with random weights over the paged KVCache, and the
same model recomputing the whole sequence without a cache as the reference (numpy only, float64 so that the two
agree to rounding and greedy tokens compare exactly).

Grouped-query attention (4 heads over 2 KV heads) and learned positions, so a wrong slot, a wrong position or a
token attending to the wrong keys changes the logits.
"""

from __future__ import annotations

import numpy as np

from serve.generation import EngineConfig, LLMEngine, SamplingParams
from serve.zoo.decoders.step import DecoderSpec, KVCache, StepBatch

VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM, MAX_POS = 48, 32, 4, 2, 8, 256
EOS = 0


class TinyDecoder:
    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.spec = DecoderSpec(num_layers=1, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=VOCAB,
                                max_position_embeddings=MAX_POS, dtype=np.dtype(np.float64))  # fmt: skip
        self.embed = rng.normal(0, 1, (VOCAB, DIM))
        self.pos = rng.normal(0, 1, (MAX_POS, DIM))
        self.wq = rng.normal(0, DIM**-0.5, (DIM, HEADS * HEAD_DIM))
        self.wk = rng.normal(0, DIM**-0.5, (DIM, KV_HEADS * HEAD_DIM))
        self.wv = rng.normal(0, DIM**-0.5, (DIM, KV_HEADS * HEAD_DIM))
        self.wo = rng.normal(0, DIM**-0.5, (HEADS * HEAD_DIM, DIM))
        self.head = rng.normal(0, 0.25, (DIM, VOCAB))  # logits of std ~2.5: sampling is not greedy
        self.batches: list[StepBatch] = []  # every batch it ran, for the tests' checks
        self.fail_next = False

    def _qkv(self, ids: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, ...]:
        x = self.embed[ids] + self.pos[positions]  # (T, D)
        t = len(ids)
        q = (x @ self.wq).reshape(t, HEADS, HEAD_DIM)  # (T, H, hd)
        k = (x @ self.wk).reshape(t, KV_HEADS, HEAD_DIM)  # (T, KV, hd)
        v = (x @ self.wv).reshape(t, KV_HEADS, HEAD_DIM)
        return x, q, k, v

    def _attend(self, x: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray) -> np.ndarray:
        k = np.repeat(k, HEADS // KV_HEADS, axis=1)  # (N, H, hd)
        v = np.repeat(v, HEADS // KV_HEADS, axis=1)
        scores = np.einsum("thd,nhd->htn", q, k) / np.sqrt(HEAD_DIM)  # (H, T, N)
        scores[:, np.arange(k.shape[0])[None, :] > q_pos[:, None]] = -np.inf  # causal: key position <= query's
        att = np.exp(scores - scores.max(axis=2, keepdims=True))
        att /= att.sum(axis=2, keepdims=True)
        out = np.einsum("htn,nhd->thd", att, v).reshape(len(q), HEADS * HEAD_DIM)  # (T, H*hd)
        return x + out @ self.wo  # (T, D)

    def step(self, batch: StepBatch, cache: KVCache) -> np.ndarray:
        self.batches.append(batch)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the model failed on purpose")
        x, q, k, v = self._qkv(batch.input_ids, batch.positions)
        cache.write(0, k, v, batch.slot_mapping)
        hidden = np.empty_like(x)
        bs = cache.block_size
        for i in range(batch.num_sequences):
            rows = slice(batch.query_starts[i], batch.query_starts[i + 1])
            n = int(batch.context_lens[i])
            blocks = batch.block_tables[i][: -(-n // bs)]
            keys = cache.key[0][blocks].reshape(-1, KV_HEADS, HEAD_DIM)[:n]  # (n, KV, hd)
            values = cache.value[0][blocks].reshape(-1, KV_HEADS, HEAD_DIM)[:n]
            hidden[rows] = self._attend(x[rows], q[rows], keys, values, batch.positions[rows])
        return (hidden[batch.logits_indices] @ self.head).astype(np.float32)  # (L, V)

    def reference_logits(self, token_ids: list[int]) -> np.ndarray:
        """The last position's logits, recomputing the whole sequence without a cache."""
        ids = np.asarray(token_ids)
        positions = np.arange(len(ids))
        x, q, k, v = self._qkv(ids, positions)
        return (self._attend(x, q, k, v, positions)[-1] @ self.head).astype(np.float32)  # (V,)

    def reference_greedy(self, prompt: list[int], max_tokens: int, ignore_eos: bool = False) -> list[int]:
        tokens = list(prompt)
        out: list[int] = []
        while len(out) < max_tokens:
            out.append(int(np.argmax(self.reference_logits(tokens))))
            tokens.append(out[-1])
            if out[-1] == EOS and not ignore_eos:
                break
        return out


class ToyTokenizer:
    """Token i is the text "t{i} "; EOS (0) is special, skipped by decode."""

    eos_token_ids = frozenset({EOS})

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f"t{i} " for i in ids if not (skip_special_tokens and i == EOS))

    def id_to_token(self, token_id: int) -> str:
        return f"t{token_id}"


def make_engine(decoder: TinyDecoder | None = None, *, num_blocks: int = 256, block_size: int = 4,
                **config: object) -> LLMEngine:  # fmt: skip
    decoder = decoder or TinyDecoder()
    per_block = KVCache.bytes_per_block(decoder.spec, block_size)
    cfg = EngineConfig(block_size=block_size, kv_cache_bytes=num_blocks * per_block, **config)  # type: ignore[arg-type]
    return LLMEngine(decoder, ToyTokenizer(), cfg)


def run(engine: LLMEngine, arrivals: dict[int, list[tuple[str, list[int], SamplingParams]]] | None = None,
        max_steps: int = 2000) -> dict[str, list]:  # fmt: skip
    """Step until done, adding `arrivals[step]` before that step; request id -> its outputs in order."""
    arrivals = arrivals or {}
    outputs: dict[str, list] = {}
    for step in range(max_steps):
        for rid, prompt, params in arrivals.get(step, []):
            engine.add_request(rid, prompt, params)
        if not engine.has_unfinished() and step > max(arrivals, default=0):
            return outputs
        for out in engine.step():
            outputs.setdefault(out.request_id, []).append(out)
    raise AssertionError(f"not finished after {max_steps} steps")


def tokens_of(outputs: list) -> list[int]:
    return [t for o in outputs for t in o.new_token_ids]


def prompt(seed: int, length: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1, VOCAB, length)]
