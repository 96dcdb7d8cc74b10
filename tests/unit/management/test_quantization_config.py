"""The model-config key `quantization` (ours): int8 accepted and shown by describe; anything else, or int8 beside a
half dtype, refused at registration with a 400 naming the key and what to write."""

from __future__ import annotations

import pytest

from serve.errors import InvalidInput
from serve.frontends.errors import error_info
from tests.unit.management.models import CONTROL_HANDLER, model_dir, run, running


@pytest.mark.parametrize("config, message", [
    ("quantization: int4\n", "quantization 'int4' is not valid: use int8, or leave it out"),
    ("quantization: int8\ndtype: bfloat16\n", "quantization int8 with dtype 'bfloat16': choose one"),
])  # fmt: skip
def test_bad_values_refuse_the_registration(tmp_path, config, message):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config=config)

    async def scenario():
        async with running(tmp_path) as registry:
            with pytest.raises(InvalidInput, match=message) as refused:
                await registry.register(root.name, initial_workers=0)
            assert error_info(refused.value).status == 400

    run(scenario())


def test_describe_shows_int8_only_when_set(tmp_path):
    quantized = model_dir(tmp_path, "q", CONTROL_HANDLER, config="quantization: int8\n")
    plain = model_dir(tmp_path, "plain", CONTROL_HANDLER)

    async def scenario():
        async with running(tmp_path) as registry:
            await registry.register(quantized.name, initial_workers=0)
            await registry.register(plain.name, initial_workers=0)
            assert registry.describe("q")[0]["quantization"] == "int8"
            assert "quantization" not in registry.describe("plain")[0]

    run(scenario())
