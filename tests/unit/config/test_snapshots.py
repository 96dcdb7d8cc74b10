"""Config snapshots: write/read round trip, the latest choice, pruning, TorchServe's files, and restore on load."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.config import load_settings
from serve.config.snapshots import snapshot_files
from serve.errors import ConfigError
from serve.management import snapshot
from serve.management.snapshot import latest_snapshot, write_snapshot

MODELS = {
    "digits": {
        "1.0": {"defaultVersion": True, "marName": "digits.mar", "minWorkers": 1, "maxWorkers": 2, "batchSize": 8,
                "maxBatchDelay": 5, "responseTimeout": 120, "startupTimeout": 120},
        "2.0": {"defaultVersion": False, "marName": "digits_v2.mar", "minWorkers": 0, "maxWorkers": 0, "batchSize": 1,
                "maxBatchDelay": 100, "responseTimeout": 60, "startupTimeout": 30},
    },
    "minilm": {"1.0": {"defaultVersion": True, "marName": "minilm.mar", "minWorkers": 1, "maxWorkers": 1,
                       "batchSize": 1, "maxBatchDelay": 100, "responseTimeout": 120, "startupTimeout": 120}},
}  # fmt: skip

# the shape of a file written by TorchServe's Properties.store: escaped separators, the JSON on one line
TORCHSERVE_FILE = (
    "#Saving snapshot\n#Mon Mar 17 12:00:00 UTC 2025\ninference_address=http\\://127.0.0.1\\:8080\n"
    'model_snapshot={\\n  "name"\\: "20250317120000123-startup.cfg",\\n  "modelCount"\\: 1,\\n  "models"\\: '
    '{\\n    "noop"\\: {\\n      "1.0"\\: {\\n        "defaultVersion"\\: true,\\n        "marName"\\: "noop.mar",'
    '\\n        "minWorkers"\\: 1,\\n        "maxWorkers"\\: 1\\n      }\\n    }\\n  }\\n}\n'
)


def test_round_trip(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path / "logs" / "config", MODELS)
    assert path.parent == tmp_path / "logs" / "config"
    assert path.name.endswith("-snapshot.cfg") and len(path.name) == len("20250317120000123-snapshot.cfg")
    assert "model_snapshot=" in path.read_text()
    got = latest_snapshot(path.parent)
    assert got == {"name": path.name, "modelCount": 3, "models": MODELS}


def test_latest_is_the_newest_and_names_never_collide(tmp_path: Path) -> None:
    written = [write_snapshot(tmp_path, {"m": {str(i): {"marName": f"m{i}.mar"}}}) for i in range(5)]
    assert [p.name for p in written] == sorted({p.name for p in written})
    got = latest_snapshot(tmp_path)
    assert got is not None and got["models"] == {"m": {"4": {"marName": "m4.mar"}}}


def test_empty_dir_and_missing_dir(tmp_path: Path) -> None:
    assert latest_snapshot(tmp_path) is None
    assert latest_snapshot(tmp_path / "missing") is None


def test_other_files_are_ignored_and_torchserve_files_read(tmp_path: Path) -> None:
    (tmp_path / "notes.cfg").write_text("model_snapshot={broken")
    (tmp_path / ".tmp-123").write_text("model_snapshot={broken")
    (tmp_path / "20250317120000123-startup.cfg").write_text(TORCHSERVE_FILE)
    got = latest_snapshot(tmp_path)
    assert got is not None and got["modelCount"] == 1
    assert got["models"]["noop"]["1.0"] == {"defaultVersion": True, "marName": "noop.mar", "minWorkers": 1,
                                            "maxWorkers": 1}  # fmt: skip
    newer = write_snapshot(tmp_path, {})
    assert newer.name > "20250317120000123" and latest_snapshot(tmp_path) == {
        "name": newer.name,
        "modelCount": 0,
        "models": {},
    }


def test_pruning_keeps_the_newest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "KEEP", 3)
    written = [write_snapshot(tmp_path, {}) for _ in range(5)]
    assert snapshot_files(tmp_path) == written[-3:]


def test_malformed_latest_snapshot_is_an_error(tmp_path: Path) -> None:
    write_snapshot(tmp_path, MODELS)
    (tmp_path / "99990101000000000-snapshot.cfg").write_text("model_snapshot={oops\n")
    with pytest.raises(ConfigError, match=r"99990101000000000-snapshot\.cfg.*--ncs"):
        latest_snapshot(tmp_path)
    (tmp_path / "99990101000000000-snapshot.cfg").write_text("something=else\n")
    with pytest.raises(ConfigError, match="has no model_snapshot line"):
        latest_snapshot(tmp_path)


def test_write_refuses_a_malformed_structure(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="field minWorkers"):
        write_snapshot(tmp_path, {"m": {"1.0": {"minWorkers": "one"}}})
    assert snapshot_files(tmp_path) == []


def test_load_settings_restores_the_latest_unless_ncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_snapshot(tmp_path / "logs" / "config", MODELS)
    restored = load_settings({}, {}).model_snapshot
    assert restored is not None and restored["models"] == MODELS
    assert load_settings({"ncs": True}, {}).model_snapshot is None
    # a TorchServe snapshot given as the config file restores too (TorchServe's way), also with --ncs
    cfg = tmp_path / "20250317120000123-startup.cfg"
    cfg.write_text(TORCHSERVE_FILE)
    from_file = load_settings({"ts_config": str(cfg), "ncs": True}, {}).model_snapshot
    assert from_file is not None and list(from_file["models"]) == ["noop"]
    # without --ncs our own latest snapshot wins over the file's
    latest = load_settings({"ts_config": str(cfg)}, {}).model_snapshot
    assert latest is not None and list(latest["models"]) == ["digits", "minilm"]
