"""torchvision's OWN model source on serve: how many classification architectures run with only `import torch`
resolved to serve (issue 18).

    .venv/bin/python bench/torchvision_source.py                 # every classification builder, cheapest first
    .venv/bin/python bench/torchvision_source.py resnet18 vgg11  # just these
    .venv/bin/python bench/torchvision_source.py --max-gflops 40 --budget 1800

For each builder of `torchvision.models.list_models(module=torchvision.models)` (the real torchvision, via
tests/torchvision_reference.py): the real model with weights=None, seeded, in eval mode gives the state_dict and
the reference logits on one seeded (1, 3, 224, 224) input, after every weight matrix / kernel is redrawn from
N(0, 1/fan_in) (torchvision's own init for some models, googlenet's std 0.01 for one, makes the activations vanish
and the logits equal the last bias, which would compare nothing). Then the file that defines the builder is executed
from the installed torchvision's directory under serve's torch compatibility (`import torch` -> serve, with the
thin names of serve.compat.torch), the builder is called with weights=None, the torch checkpoint (torch.save of the
state_dict) is read with serve.load and loaded strictly and the logits are compared: max |ours - torch| / max |torch|.

The loader (`TorchvisionSource`) puts torchvision's own modules in place of serve.compat.torchvision: every
`torchvision.*` module is the installed file, except the package `__init__`s of torchvision, torchvision.models,
torchvision.ops and torchvision.transforms, which are empty packages over the real directories (the real ones
import datasets, io, detection and the compiled ops library, none of which a classification model uses);
`from torchvision.ops import X` looks X up in ops.misc and ops.stochastic_depth, `torchvision.transforms.X` in
transforms.functional. One module is a stub: torchvision.transforms.functional (image preprocessing; the model
files reach it only through the weights' preset transforms, transforms/_presets.py) gives just the real
InterpolationMode enum, since its tensor path imports torch.nn.functional.grid_sample, which serve lacks.
Models above --max-gflops (torchvision's weights metadata, its smallest input size) are skipped (named in the
output), and the run starts no new model after --budget seconds.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import serve
from serve.worker.torch_compat import torch_compat
from tests.torchvision_reference import reference_torchvision

EMPTY_PACKAGES = ("torchvision", "torchvision.models", "torchvision.ops", "torchvision.transforms")
LOOKUP = {  # names an empty package gives, found in these real modules (as the real __init__ re-exports them)
    "torchvision.ops": ("torchvision.ops.misc", "torchvision.ops.stochastic_depth"),
    "torchvision.transforms": ("torchvision.transforms.functional",),
}


class TorchvisionSource(importlib.abc.MetaPathFinder):
    """Finds `torchvision.*` in the installed torchvision directory (package __init__s left empty, see above)."""

    def __init__(self, root: Path, interpolation_mode: Any) -> None:
        self.root = root
        functional = ModuleType("torchvision.transforms.functional", "stub: InterpolationMode only (see above)")
        functional.InterpolationMode = interpolation_mode  # type: ignore[attr-defined]
        self.modules: dict[str, ModuleType] = {"torchvision.transforms.functional": functional}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] != "torchvision":
            return None
        rel = Path(*fullname.split(".")[1:])
        if fullname in EMPTY_PACKAGES:
            spec = importlib.machinery.ModuleSpec(fullname, _EmptyPackage(), is_package=True)
            spec.submodule_search_locations = [str(self.root / rel)]
            return spec
        file = self.root / rel.with_suffix(".py")
        if not file.is_file():
            file = self.root / rel / "__init__.py"
        if not file.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, file)

    def install(self) -> None:
        """Put this finder first and the modules it loaded earlier back (call inside torch_compat())."""
        sys.meta_path.insert(0, self)
        sys.modules.update(self.modules)

    def remove(self) -> None:
        sys.meta_path.remove(self)
        self.modules.update({k: v for k, v in sys.modules.items() if k.split(".")[0] == "torchvision"})


class _EmptyPackage(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        subs = LOOKUP.get(module.__name__, ())

        def lookup(name: str) -> Any:
            for sub in subs:
                found = getattr(importlib.import_module(sub), name, None)
                if found is not None:
                    return found
            raise AttributeError(f"{module.__name__}.{name} (looked in {', '.join(subs) or 'nothing'})")

        module.__getattr__ = lookup  # type: ignore[method-assign]


def reference(tv: Any, name: str, x: np.ndarray) -> tuple[bytes, np.ndarray, int]:
    """torch's checkpoint (torch.save of the state_dict, as a user ships it), logits and parameter count."""
    import torch

    torch.manual_seed(0)
    model = tv.models.get_model(name, weights=None).eval()
    with torch.no_grad():
        for p in model.parameters():  # N(0, 1/fan_in): some inits (googlenet's std 0.01) make logits = bias
            if p.ndim >= 2:
                p.normal_(0.0, (p[0].numel()) ** -0.5)
        logits = model(torch.from_numpy(x))
    checkpoint = io.BytesIO()
    torch.save(model.state_dict(), checkpoint)  # keeps _metadata (module versions: mnasnet's loading reads them)
    return checkpoint.getvalue(), logits.numpy(), sum(p.numel() for p in model.parameters())


def ours(source: TorchvisionSource, module_name: str, name: str, checkpoint: bytes, x: np.ndarray) -> Any:
    with torch_compat():
        source.install()
        try:
            module = importlib.import_module(module_name)
            model = getattr(module, name)(weights=None)
            model.load_state_dict(serve.load(io.BytesIO(checkpoint)), strict=True)
            model.eval()
            with serve.no_grad():
                return model(serve.from_numpy(x)).numpy()
        finally:
            source.remove()


def gflops(tv: Any, name: str) -> float:
    """The smallest GFLOPS torchvision's weights metadata gives for the architecture (the weights at the smallest
    input size, usually 224; larger SWAG weights count more FLOPs for the same architecture)."""
    return min((float(w.meta.get("_ops", 0.0)) for w in tv.models.get_model_weights(name)), default=0.0)


def run_one(tv: Any, source: TorchvisionSource, name: str, max_gflops: float) -> tuple[str, str, float | None]:
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    builder = tv.models.get_model_builder(name)
    if gflops(tv, name) > max_gflops:
        return "skip", f"{gflops(tv, name):.0f} GFLOPS > --max-gflops {max_gflops:g} (time bound)", None
    try:
        state, want, _ = reference(tv, name, x)
    except Exception as e:  # a reference that fails is reported, not fatal
        return "skip", f"torch reference failed: {type(e).__name__}: {e}", None
    try:
        got = ours(source, builder.__module__, name, state, x)
    except Exception as e:  # the failure reason is the measurement
        where = traceback.extract_tb(e.__traceback__)[-1]
        return "fail", f"{type(e).__name__}: {str(e)[:160]} ({Path(where.filename).name}:{where.lineno})", None
    if got.shape != want.shape:
        return "fail", f"output shape {got.shape} != torch {want.shape}", None
    rel = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
    top1 = "same top-1" if int(got.argmax()) == int(want.argmax()) else "top-1 differs"
    return ("ok" if rel < 1e-4 else "fail"), top1, rel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="builder names (default: every classification model)")
    parser.add_argument("--max-gflops", type=float, default=40.0, help="skip models above this many GFLOPS")
    parser.add_argument("--budget", type=float, default=3600.0, help="start no new model after this many seconds")
    args = parser.parse_args(argv)
    tv = reference_torchvision()
    if tv is None:
        sys.exit("bench/torchvision_source.py needs torch and torchvision (the test extras)")
    source = TorchvisionSource(Path(tv.__file__).parent, tv.transforms.InterpolationMode)
    names = args.names or sorted(tv.models.list_models(module=tv.models), key=lambda n: (gflops(tv, n), n))
    start, results = time.perf_counter(), []
    print("| model | result | max rel. diff to torch | note | s |\n| --- | --- | --- | --- | --- |")
    for name in names:
        if time.perf_counter() - start > args.budget:
            results.append((name, "skip", f"--budget {args.budget:g} s spent", None, 0.0))
        else:
            t0 = time.perf_counter()
            status, note, rel = run_one(tv, source, name, args.max_gflops)
            results.append((name, status, note, rel, time.perf_counter() - t0))
        name, status, note, rel, secs = results[-1]
        print(f"| {name} | {status} | {'' if rel is None else f'{rel:.1e}'} | {note} | {secs:.0f} |", flush=True)
    counts = {s: sum(r[1] == s for r in results) for s in ("ok", "fail", "skip")}
    print(f"\n{counts['ok']} ok, {counts['fail']} failed, {counts['skip']} skipped of {len(results)} builders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
