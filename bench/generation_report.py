"""The generative benchmark's report: the issue's targets, the memory-bandwidth bound, and the markdown table.

Decisions:
- Every ratio is serve's figure over the reference's from the same run. "The same requests one at a time" is the
  concurrency-1 level (each request alone); "batch 1 decode" compares end-to-end tokens/s at concurrency 1 (HTTP,
  prefill and all) with `generate`'s at batch 1 (prefill included too), and also serve's per-token decode rate
  (1 / TPOT) with it.
- The memory-bandwidth bound at batch 1: a decode step reads every weight once, so tokens/s <= copy bandwidth /
  weight bytes; the copy bandwidth is STREAM's (bytes read + written per second), numpy's best of 1 and 2 threads.
- The table goes into bench/RESULTS.md between `<!-- generation:MODELS:begin -->` and `<!-- generation:MODELS:end -->`
  (MODELS: the run's model list, so a GPT-2 run and a Llama run keep their own tables; appended at the end the
  first time), as bench/runtime_report.py does for its table.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def level(result: dict[str, Any], c: int) -> dict[str, Any] | None:
    return next((s for s in result.get("serve", []) if s["concurrency"] == c), None)


def targets(result: dict[str, Any]) -> list[tuple[str, float | None, str]]:
    """(what, ratio, the target) for each of the issue's targets this run can judge."""
    c1, c16, torch = level(result, 1), level(result, 16), result.get("torch")
    rows: list[tuple[str, float | None, str]] = []
    if c1 and c16:  # round by round (the same minute of a noisy machine), then the median
        pairs = [a / b for a, b in zip(c16["tokens_per_s_all"], c1["tokens_per_s_all"])]
        rows.append(("c16 aggregate / c1 aggregate (median of per-round ratios)", statistics.median(pairs), ">= 4"))
    if c16 and torch and "generate_b16_tokens_per_s" in torch:
        rows.append(("c16 aggregate / transformers padded batch 16", c16["tokens_per_s"]
                     / torch["generate_b16_tokens_per_s"], ">= 1.5"))  # fmt: skip
    if c1 and torch and "generate_b1_tokens_per_s" in torch:
        rows.append(("c1 tokens/s / transformers generate batch 1", c1["tokens_per_s"]
                     / torch["generate_b1_tokens_per_s"], ">= 1"))  # fmt: skip
        rows.append(("c1 decode rate (1/TPOT) / transformers generate batch 1", 1e3 / c1["tpot_p50_ms"]
                     / torch["generate_b1_tokens_per_s"], ">= 1"))  # fmt: skip
    if c1 and torch and "prefill_s" in torch:
        rows.append(("c1 TTFT p50 / torch prefill of the prompt", c1["ttft_p50_ms"] / 1e3 / torch["prefill_s"],
                     "<= 1.2"))  # fmt: skip
    return rows


def bandwidth_bound(result: dict[str, Any]) -> dict[str, float]:
    bound = result["copy_bandwidth"] / result["weight_bytes"]
    out = {"bound_tokens_per_s": bound}
    c1 = level(result, 1)
    if c1:
        out["serve_fraction"] = 1e3 / c1["tpot_p50_ms"] / bound
    if "generate_b1_tokens_per_s" in (result.get("torch") or {}):
        # generate's rate includes its prefill: a lower bound on its decode rate
        out["torch_fraction"] = result["torch"]["generate_b1_tokens_per_s"] / bound
    return out


def met(ratio: float | None, target: str) -> str:
    if ratio is None:
        return "n/a"
    op, value = target.split()
    return "yes" if (ratio >= float(value) if op == ">=" else ratio <= float(value)) else "no"


def render(header: dict[str, Any], results: list[dict[str, Any]]) -> str:
    lines = [f"`python bench/generation.py {header['argv']}` on {header['date']}, {header['cpu']} ({header['cpus']} "
             f"CPUs, 1-minute load average {header['load_start']:.1f} at the start, {header['load_end']:.1f} at the "
             f"end; Python {header['python']}), {header['threads']} threads for every library. Streaming "
             f"/v1/completions, {header['prompt']}-token prompts (token ids), {header['new']} new tokens, greedy, "
             "ignore_eos; medians over the rounds."]  # fmt: skip
    for r in results:
        lines += ["", f"**{r['model']}** ({r['params'] / 1e6:.0f}M parameters, random weights, serve dtype "
                  f"{r['dtype']}, {r['weight_bytes'] / 2**20:.0f} MiB of weights read per decode step)",
                  ""]  # fmt: skip
        lines += ["| concurrency | requests | tokens/s (rounds) | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms "
                  "| per-request tokens/s p50 | TPOT p50 ms | errors |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for s in r.get("serve", []):
            rounds = ", ".join(f"{x:g}" for x in s.get("tokens_per_s_all", []))
            lines.append(f"| {s['concurrency']} | {s['requests']} | {s['tokens_per_s']:.1f} ({rounds}) | "
                         f"{s['ttft_p50_ms']:.0f} | {s['ttft_p99_ms']:.0f} | {s['itl_p50_ms']:.1f} | "
                         f"{s['itl_p99_ms']:.1f} | {s['request_tokens_per_s_p50']:.1f} | {s['tpot_p50_ms']:.1f} | "
                         f"{s['errors']} |")  # fmt: skip
        for t in (r.get("torch_runs") or {}).values():
            figures = [f"prefill of one {header['prompt']}-token prompt {t['prefill_s'] * 1e3:.1f} ms"
                       if "prefill_s" in t else "",
                       f"generate batch 1 {t['generate_b1_tokens_per_s']:.1f} tokens/s"
                       if "generate_b1_tokens_per_s" in t else "",
                       f"padded batch 16 {t['generate_b16_tokens_per_s']:.1f} tokens/s"
                       if "generate_b16_tokens_per_s" in t else ""]  # fmt: skip
            late = " (ran out of its time limit; the rest not measured)" if t.get("partial") else ""
            lines += ["", f"transformers {t.get('transformers', '?')} + torch {t.get('torch', '?')} "
                      f"({t.get('attention', '?')} attention, {t['threads']} thread{'s' if t['threads'] > 1 else ''}): "
                      f"{', '.join(f for f in figures if f) or 'nothing measured'}{late}."]  # fmt: skip
        rows = r.get("targets", [])
        if rows:
            lines += ["", "| target | serve / reference | met? |", "|---|---:|---|"]
            lines += [f"| {what} {target} | {ratio:.2f} | {met(ratio, target)} |" for what, ratio, target in rows]
            if r.get("torch"):
                used = {k[: -len("_threads")]: v for k, v in r["torch"].items()
                        if k.endswith(("tokens_per_s_threads", "prefill_s_threads"))}  # fmt: skip
                lines += ["", "References judged against (the best over thread counts): " + ", ".join(
                    f"{k} on {v} thread{'s' if v > 1 else ''}" for k, v in used.items()) + "."]  # fmt: skip
        b = r.get("bandwidth", {})
        if b:
            lines += ["", f"Memory-bandwidth bound at batch 1: copy bandwidth {r['copy_bandwidth'] / 1e9:.1f} GB/s "
                      f"(numpy, read + written) / {r['weight_bytes'] / 2**20:.0f} MiB = "
                      f"{b['bound_tokens_per_s']:.1f} tokens/s; serve's decode (1/TPOT at c1) reaches "
                      f"{b.get('serve_fraction', 0):.0%} of it"]  # fmt: skip
            if "torch_fraction" in b:
                lines[-1] += f", transformers' generate (its prefill included) {b['torch_fraction']:.0%}"
            lines[-1] += "."
        kv = r.get("kv")
        if kv:
            blocks = kv["budget_bytes"] // kv["block_bytes"]
            metrics = "; ".join(kv["metrics"]) or "none exported for the KV cache or preemptions"
            lines += ["", f"KV cache run: budget {kv['budget_bytes'] / 2**20:.1f} MiB ({blocks} blocks of 16 tokens; "
                      f"{kv['concurrency']} streams at once need "
                      f"{kv['blocks_needed_at_once']}); {kv['requests'] - kv['errors']} of {kv['requests']} requests "
                      f"finished, completion tokens per request {kv['tokens_min_max'][0]}-{kv['tokens_min_max'][1]}, "
                      f"{kv['tokens_per_s']:.1f} tokens/s; the worker logged \"{kv['worker_log'][0]}\"; "
                      f"worker peak RSS {kv['worker_peak_rss'] / 2**20:.0f} MiB (main run, 1 GiB budget: "
                      f"{r.get('worker_peak_rss', 0) / 2**20:.0f} MiB); metrics: "
                      f"{metrics}."]  # fmt: skip
        lg = r.get("loadgen")
        if lg:
            lines += ["", f"Load generator: {lg['summary']}"]
            paired = lg.get("ours_before")
            if paired:
                lines[-1] += (f" Our client at concurrency 16 just before it (streamed): {paired['tokens_per_s']:.1f} "
                              f"tokens/s, TPOT p50 {paired['tpot_p50_ms']:.0f} ms.")  # fmt: skip
    return "\n".join(lines)


def write_results(text: str, key: str) -> None:
    """Replace this run's block (one per model list, `key`) in bench/RESULTS.md, or append it at the end."""
    begin, end = f"<!-- generation:{key}:begin -->", f"<!-- generation:{key}:end -->"
    doc = RESULTS.read_text()
    block = f"{begin}\n{text}\n{end}"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(doc)
