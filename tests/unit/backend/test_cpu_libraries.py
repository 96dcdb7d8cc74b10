"""serve.backend.cpu_libraries: the AMX build is used only where every condition holds, and each refusal says why
(the path to "on" is driven by the emulated build in test_amx_emulated.py); cpu_native.bf16_engine() agrees."""

from __future__ import annotations

import pytest

from serve.backend import cpu_libraries, cpu_native

AMX = {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}


@pytest.fixture(autouse=True)
def _keep_status(monkeypatch):
    monkeypatch.setattr(cpu_libraries, "_status", cpu_libraries.amx_status())


def test_serve_amx_0_turns_it_off_first():
    assert not cpu_libraries.choose_amx(cpu_libraries.library_path("amx"), AMX, {"SERVE_AMX": "0"})
    assert cpu_libraries.amx_status() == "SERVE_AMX=0"


def test_a_cpu_without_amx_flags_never_tries():
    assert not cpu_libraries.choose_amx(cpu_libraries.library_path("amx"), {"avx512f", "amx_tile"}, {})
    assert "no AMX" in cpu_libraries.amx_status()


def test_a_missing_build_is_named():
    assert not cpu_libraries.choose_amx(None, AMX, {})
    assert "not installed" in cpu_libraries.amx_status()


def test_the_real_build_on_a_cpu_without_amx_is_refused_not_crashed():
    """Flags that claim AMX on a CPU without it: Linux refuses the tile state, nothing runs a tile instruction."""
    path = cpu_libraries.library_path("amx")
    if path is None:
        pytest.skip("the _sk_amx build is not installed")
    if cpu_libraries.cpu_flags() >= cpu_libraries.AMX_FLAGS:
        pytest.skip("this CPU has AMX: the refusal cannot be provoked here")
    assert not cpu_libraries.choose_amx(path, AMX, {})
    assert "refused" in cpu_libraries.amx_status()


def test_bf16_engine_names_what_runs_the_bf16_products():
    engine = cpu_native.bf16_engine()
    if not cpu_native.bf16_available():
        assert engine is None
    else:
        assert engine == ("amx" if cpu_libraries.amx_status() == "on" else "avx512_bf16")
        assert cpu_native.bf16_library() is not None
