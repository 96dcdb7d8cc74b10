"""The generative benchmark's references, run in their own process: transformers + torch on the same folder.

    OMP_NUM_THREADS=2 python bench/generation_torch.py FOLDER --rounds 3 --prompt 32 --new 128   # prints one JSON

Decisions:
- `generate` is transformers' own (greedy, `max_new_tokens` = `min_new_tokens` = 128 so every sequence runs the
  full length, as serve's requests do with ignore_eos), eager PyTorch (no compile), the model's default attention
  (SDPA), `torch.inference_mode`, `torch.set_num_threads` from OMP_NUM_THREADS. Batch 1, and 16 prompts as one
  padded batch (the prompts are all 32 tokens, so the mask is all ones: the padded batch's best case).
- The prefill is one forward over one 32-token prompt with the cache on (what TTFT must beat): a server's first
  token is that forward plus the argmax.
- The prompts are the ones the server gets (seeded ids, `prompts()`), each figure the median of `rounds` runs
  after a short warm-up (a 4-token generate).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """`n` seeded prompts of `length` token ids, clear of the special ids at the bottom of the vocab."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(16, vocab, (n, length)).tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    args = p.parse_args()

    import torch

    sys.modules.setdefault("torchvision._meta_registrations", type(sys)("torchvision._meta_registrations"))
    import transformers

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    model = transformers.AutoModelForCausalLM.from_pretrained(args.folder).eval()
    vocab = model.config.vocab_size
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    result: dict[str, object] = {"torch": torch.__version__, "transformers": transformers.__version__,
                                 "threads": torch.get_num_threads(),
                                 "attention": model.config._attn_implementation}  # fmt: skip
    with torch.inference_mode():
        one = torch.tensor(prompts(1, args.prompt, vocab))
        times = []
        for i in range(args.rounds * 5 + 2):
            t0 = time.perf_counter()
            model(one, use_cache=True)
            if i >= 2:
                times.append(time.perf_counter() - t0)
        result["prefill_s"] = statistics.median(times)
        print(json.dumps(result), flush=True)  # each figure as it is measured: a caller that times out keeps these
        for batch in args.batch:
            ids = torch.tensor(prompts(batch, args.prompt, vocab))
            mask = torch.ones_like(ids)
            model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=4, pad_token_id=pad)  # warm-up
            times = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=args.new,
                                     min_new_tokens=args.new, pad_token_id=pad)  # fmt: skip
                times.append(time.perf_counter() - t0)
                assert out.shape == (batch, args.prompt + args.new), out.shape
            result[f"generate_b{batch}_s"] = statistics.median(times)
            result[f"generate_b{batch}_all_s"] = times
            result[f"generate_b{batch}_tokens_per_s"] = batch * args.new / statistics.median(times)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
