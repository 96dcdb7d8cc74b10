"""Run in its own process by test_transformers_plan.py: a transformers model on serve's torch alias, through the
inference plan.

    python plan_runner.py JOB.json

Installs the alias as a worker of a torch-compat archive does, loads the saved model with
`AutoModelForCausalLM.from_pretrained(folder)`, and for each plan in the job ({name, kernels, dtype}) makes
`serve.inference.optimize(model, kernels=..., dtype=..., tune=False)` on the saved inputs and writes
<folder>/<name>_logits.npy, <name>_tokens.npy (greedy `generate` of the planned tree) and <name>.json (describe(),
and whether each planned Conv1D's product operand is the model's own weight array); a plan that fails writes
<name>_error.txt and the others still run.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np

from serve.worker.torch_compat import install_torch_compat


def run(folder: Path, plan: dict, new_tokens: int) -> None:
    import torch  # serve's alias
    import transformers

    from serve.inference import optimize

    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    inputs = {k: torch.from_numpy(np.load(folder / f"{k}.npy")) for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        opt = optimize(model, kernels=tuple(plan["kernels"]) or None, dtype=plan["dtype"], tune=False)
        logits = opt(**inputs).logits.numpy()
        np.save(folder / f"{plan['name']}_logits.npy", logits)
        assert opt.plan is not None, opt.reason
        tokens = opt.plan.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
        np.save(folder / f"{plan['name']}_tokens.npy", tokens.numpy())
    modules = dict(model.named_modules())
    fused = opt._rewrite.fused
    shared = {name: bool(np.shares_memory(layer.weight_kn(), modules[name].weight._data))
              for name, layer in fused.items() if type(modules.get(name)).__name__ == "Conv1D"}  # fmt: skip
    c_fc = type(opt.plan.transformer.h[0].mlp.c_fc).__name__
    report = {"describe": opt.describe(), "shared": shared, "plan_type": c_fc}
    (folder / f"{plan['name']}.json").write_text(json.dumps(report))


def main() -> int:
    install_torch_compat()
    if "torch" in sys.modules and "/serve/" not in (sys.modules["torch"].__file__ or ""):
        raise SystemExit("the real torch is loaded: the runner must run with serve's alias only")
    job = json.loads(Path(sys.argv[1]).read_text())
    folder = Path(job["folder"])
    for plan in job["plans"]:
        try:
            run(folder, plan, job["new_tokens"])
        except Exception:
            (folder / f"{plan['name']}_error.txt").write_text(traceback.format_exc())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
