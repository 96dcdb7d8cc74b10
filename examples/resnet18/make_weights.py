"""Write seeded random ResNet-18 weights with `serve.save` (a PyTorch-readable state_dict checkpoint).

    .venv/bin/python examples/resnet18/make_weights.py [OUTPUT]   # default build/examples/resnet18/resnet18.pt

The file is ~45 MB, so it is made at build time (examples/build_model_store.py) rather than committed; the
default output lies under the git-ignored build/. The same seed gives the same weights on every machine:
torchvision's initialisation (Kaiming normal convolutions, unit BatchNorm) drawn from serve's seeded generator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import serve

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE.parents[1] / "build" / "examples" / "resnet18" / "resnet18.pt"
SEED = 0


def make_weights(output: Path = DEFAULT_OUTPUT, seed: int = SEED) -> Path:
    """Build ResNet18 from model.py with `serve.manual_seed(seed)` and save its state_dict to `output`."""
    sys.path.insert(0, str(HERE))
    try:
        from model import ResNet18
    finally:
        sys.path.remove(str(HERE))
    serve.manual_seed(seed)
    model = ResNet18()
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    serve.save(model.state_dict(), partial)
    partial.replace(output)  # never leave a half-written checkpoint under the final name
    return output


if __name__ == "__main__":
    print(make_weights(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT))
