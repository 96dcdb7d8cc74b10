"""TorchServe's Hugging Face handler run on the real torch: the reference of tests/examples/test_ts_huggingface.py.

    python hf_handler_reference.py MODEL_DIR JOB.json OUT.json     (PYTHONPATH: .venv/transformers451, cwd: MODEL_DIR)

Run in its own process with the same transformers 4.51 and captum the served worker has, but the real torch: the
handler file is imported unchanged, with `ts.torch_handler.base_handler.BaseHandler` a bare class (TorchServe is
not installed; the handler overrides everything it calls), initialised with a context of the archive's manifest
and model-config, and each request of JOB.json ({"bodies": [...], "explain": [...]}) goes through its
preprocess, inference and postprocess, one request per batch as the server sends them; each `explain` body
through `get_insights`, as TorchServe's explanation route calls it. OUT.json: {"predictions": [...],
"explanations": [...]}.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stub_ts() -> None:
    """`ts.torch_handler.base_handler.BaseHandler` for the import: a bare class with TorchServe's attributes."""

    class BaseHandler:
        def __init__(self) -> None:
            self.model, self.mapping, self.device, self.initialized, self.context = None, None, None, False, None

    for name in ("ts", "ts.torch_handler", "ts.torch_handler.base_handler"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["ts.torch_handler.base_handler"].BaseHandler = BaseHandler  # type: ignore[attr-defined]


def main(model_dir: str, job_file: str, out_file: str) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.torchvision_reference import reference_torchvision

    reference_torchvision()  # transformers imports torchvision, whose wheel here needs this to import
    import yaml

    _stub_ts()
    folder = Path(model_dir)
    manifest = json.loads((folder / "MAR-INF" / "MANIFEST.json").read_text())
    spec = importlib.util.spec_from_file_location("hf_handler", folder / manifest["model"]["handler"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    context = types.SimpleNamespace(
        manifest=manifest, system_properties={"model_dir": str(folder), "gpu_id": None},
        model_yaml_config=yaml.safe_load((folder / manifest["model"]["configFile"]).read_text()),
    )  # fmt: skip
    handler = module.TransformersSeqClassifierHandler()
    handler.initialize(context)
    job = json.loads(Path(job_file).read_text())
    predictions = []
    for body in job["bodies"]:
        batch = handler.preprocess([{"body": body.encode()}])
        predictions.extend(handler.postprocess(handler.inference(batch)))
    explanations = []
    for body in job["explain"]:
        batch = handler.preprocess([{"body": body.encode()}])
        explanations.extend(handler.get_insights(batch, body.encode(), 0))
    Path(out_file).write_text(json.dumps({"predictions": predictions, "explanations": explanations}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
