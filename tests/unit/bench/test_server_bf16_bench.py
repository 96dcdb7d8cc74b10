"""bench/server_bf16.py: TorchServe's ResNet-50 file is the torch twin's network, and the table's medians and ratios."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import server_bf16  # noqa: E402


def test_torchserve_model_file_is_the_twin():
    """The .mar's model (plain torch, torchvision's names) takes the twin's state_dict strictly and gives its output."""
    torch = pytest.importorskip("torch")
    import ts_resnet50_model

    from tests.unit.zoo import twins_vision
    from tests.unit.zoo.parity import randomize_norms

    torch.manual_seed(0)
    twin = twins_vision.resnet50()
    randomize_norms(twin)
    twin.eval()
    ours = ts_resnet50_model.resnet50()
    ours.load_state_dict(twin.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(twin.state_dict())
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want, got = twin(x), ours(x)
    assert got.shape == (2, 1000)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _run(rps: float, p50: float, batch: float | None = None) -> dict[str, float]:
    return {"rps": rps, "p50_ms": p50, "p99_ms": 2 * p50, "errors": 0.0, **({} if batch is None else {"batch": batch})}


def test_table_gives_medians_over_rounds_and_ratios():
    runs = {
        ("serve fp32", 8): [_run(5, 1500, 7.5), _run(6, 1300, 8.0), _run(100, 10, 6.0)],  # median 6 req/s, 1300 ms
        ("serve bf16", 8): [_run(9, 900), _run(8, 1000), _run(7, 1100)],  # median 8
        ("TorchServe", 8): [_run(2, 4000), _run(1, 5000), _run(4, 3000)],  # median 2
        ("serve fp32", 1): [_run(4, 250)] * 3,
        ("serve bf16", 1): [_run(5, 200)] * 3,
        ("TorchServe", 1): [_run(0, 0)] * 3,  # no answer within the run
    }
    text = server_bf16.table({"runs": runs, "loads": [3.0]}, [8, 1], {"head": "HEAD"}, {"numerics": "8 / 8"})
    assert "| serve fp32 | 8 | 6.0 | 1300 | 2600 | 7.50 | 0 |" in text
    assert "| serve bf16 | 8 | 8.0 | 1000 | 2000 | - | 0 |" in text  # no batch sizes recorded: TorchServe's case
    # per round: fp32 5, 6, 100 against bf16 9, 8, 7 -> 1.80, 1.33, 0.07
    assert "| serve bf16 / serve fp32 | 1.33 | 1.33 [0.07-1.80] | 1.25 | 1.25 [1.25-1.25] |" in text
    assert "| serve bf16 / TorchServe | 4.00 | 4.50 [1.75-8.00] | n/a (no answer in the run) | n/a |" in text
    assert "| serve fp32 / TorchServe | 3.00 | 6.00 [2.50-25.00] | n/a (no answer in the run) | n/a |" in text
    assert text.startswith("HEAD") and text.endswith("- numerics: 8 / 8")


def test_table_without_torchserve_has_no_torchserve_ratio():
    runs = {("serve fp32", 8): [_run(6, 1300)], ("serve bf16", 8): [_run(9, 900)]}
    text = server_bf16.table({"runs": runs, "loads": [1.0]}, [8], {"head": "H"}, {})
    assert "| serve bf16 / serve fp32 | 1.50 | 1.50 [1.50-1.50] |" in text
    assert "TorchServe" not in text
