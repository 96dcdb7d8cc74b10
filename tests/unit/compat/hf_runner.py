"""Run in its own process by test_transformers_families.py: transformers on serve's torch alias.

    python hf_runner.py JOBS.json

Installs the alias as a worker of a torch-compat archive does (install_torch_compat, before transformers is
imported), then for each job {name, folder, auto_class, inputs: {arg: file.npy}, output, generate: n | 0,
num_beams} loads the saved model with `AutoModel...from_pretrained(folder)`, runs a forward (and `generate` when
n > 0: greedy, or beam search returning every beam) and writes the forward's `output` (default "logits") to
<folder>/out_logits.npy and the tokens to out_tokens.npy; a job that fails writes <folder>/error.txt and the others
still run.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np

from serve.worker.torch_compat import install_torch_compat


def run(job: dict) -> None:
    import torch  # serve's alias
    import transformers

    folder = Path(job["folder"])
    model = getattr(transformers, job["auto_class"]).from_pretrained(folder).eval()
    inputs = {k: torch.from_numpy(np.load(folder / v)) for k, v in job["inputs"].items()}
    with torch.no_grad():
        out = model(**inputs)
        np.save(folder / "out_logits.npy", getattr(out, job.get("output", "logits")).numpy())
        if job["generate"]:
            gen_inputs = {k: v for k, v in inputs.items() if not k.startswith("decoder_")}
            beams = job.get("num_beams", 1)
            tokens = model.generate(**gen_inputs, max_new_tokens=job["generate"], do_sample=False, num_beams=beams,
                                    num_return_sequences=beams)  # fmt: skip
            np.save(folder / "out_tokens.npy", tokens.numpy())


def main() -> int:
    install_torch_compat()
    if "torch" in sys.modules and "/serve/" not in (sys.modules["torch"].__file__ or ""):
        raise SystemExit("the real torch is loaded: the runner must run with serve's alias only")
    for job in json.loads(Path(sys.argv[1]).read_text()):
        for stale in Path(job["folder"]).glob("out_*.npy"):
            stale.unlink()
        Path(job["folder"], "error.txt").unlink(missing_ok=True)
        try:
            run(job)
        except Exception:
            Path(job["folder"], "error.txt").write_text(traceback.format_exc())
    real = sorted(
        name for name, m in list(sys.modules.items()) if "site-packages/torch/" in (getattr(m, "__file__", "") or "")
    )
    if real:  # every family must have run on serve alone
        raise SystemExit(f"the real torch was imported: {real[:5]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
