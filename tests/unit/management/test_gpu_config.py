"""Model-config keys of ours for GPUs and precision: `dtype` and `gpuMemoryFraction`, checked at registration (400
naming the key and what is accepted), shown by describe; `deviceIds` that do not fit are ignored with a warning."""

from __future__ import annotations

import logging

import pytest

from serve.errors import InvalidInput, ModelNotFound
from serve.frontends.errors import error_info
from serve.management.model_version import resolve_config
from tests.unit.management.models import CONTROL_HANDLER, model_dir, run, running, settings


@pytest.mark.parametrize(
    "config, message",
    [
        ("dtype: float64\n", "dtype 'float64' is not valid: expected one of float32, float16, bfloat16"),
        ("dtype: 16\n", "dtype 16 is not valid"),
        ("gpuMemoryFraction: 0\n", "gpuMemoryFraction 0 is not valid: expected a number > 0 and <= 1"),
        ("gpuMemoryFraction: 1.5\n", "gpuMemoryFraction 1.5 is not valid"),
        ("gpuMemoryFraction: half\n", "gpuMemoryFraction 'half' is not valid"),
        ("gpuMemoryFraction: true\n", "gpuMemoryFraction True is not valid"),
    ],
)
def test_bad_values_refuse_the_registration(tmp_path, config, message):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config=config)

    async def scenario():
        async with running(tmp_path) as registry:
            with pytest.raises(InvalidInput, match=message) as refused:
                await registry.register(root.name, initial_workers=0)
            assert "model-config of m version 1.0" in str(refused.value)
            assert error_info(refused.value).status == 400  # what the management API answers
            with pytest.raises(ModelNotFound):
                registry.describe("m")

    run(scenario())


def test_describe_shows_the_dtype_and_the_memory_fraction(tmp_path):
    half = model_dir(tmp_path, "half", CONTROL_HANDLER, config="dtype: bfloat16\ngpuMemoryFraction: 0.5\n")
    plain = model_dir(tmp_path, "plain", CONTROL_HANDLER)

    async def scenario():
        async with running(tmp_path) as registry:
            await registry.register(half.name, initial_workers=0)
            await registry.register(plain.name, initial_workers=0)
            d = registry.describe("half")[0]
            assert (d["dtype"], d["gpuMemoryFraction"], d["deviceType"]) == ("bfloat16", 0.5, "cpu")
            keys = list(d)
            assert keys.index("deviceType") < keys.index("dtype") < keys.index("continuousBatching")
            d = registry.describe("plain")[0]
            assert d["dtype"] == "float32" and "gpuMemoryFraction" not in d

    run(scenario())


def test_device_ids_outside_the_gpus_are_ignored_with_a_warning(tmp_path, caplog):
    s = settings(tmp_path, number_of_gpu=2)
    with caplog.at_level(logging.WARNING, "serve.management"):
        config = resolve_config(s, "m", "1.0", {"deviceIds": [0, 2]}, {})
    assert config.gpu_ids == (0, 1) and "ignoring deviceIds=[0, 2] (expected a list of GPU ids in 0..1)" in caplog.text
    assert resolve_config(s, "m", "1.0", {"deviceIds": [1, 1, 0]}, {}).gpu_ids == (1, 1, 0)
    assert resolve_config(s, "m", "1.0", {"deviceType": "cpu", "deviceIds": [1]}, {}).gpu_ids == ()
    no_gpu = settings(tmp_path, number_of_gpu=0)
    assert resolve_config(no_gpu, "m", "1.0", {"deviceType": "gpu"}, {}).gpu_ids == ()  # falls back to the CPU
