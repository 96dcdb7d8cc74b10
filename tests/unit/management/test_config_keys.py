"""TorchServe model-config keys serve does not implement (issue 17 item 5): those that would change behaviour are a
400 at registration naming the key; harmless ones are warned about once and listed in describe."""

from __future__ import annotations

import logging

import pytest

from serve.errors import InvalidInput, ModelNotFound
from serve.frontends.errors import error_info
from tests.unit.management.models import CONTROL_HANDLER, model_dir, run, running


@pytest.mark.parametrize(
    "config, key",
    [
        ("stateful: true\n", "stateful"),
        ("useJobTicket: true\n", "useJobTicket"),
        ("asyncCommunication: true\n", "asyncCommunication"),
        ("parallelType: tp\n", "parallelType"),
        ("parallelLevel: 4\n", "parallelLevel"),
        ("clientTimeoutInMills: 500\n", "clientTimeoutInMills"),
    ],
)
def test_keys_that_change_behaviour_refuse_the_registration(tmp_path, config, key):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config=config)

    async def scenario():
        async with running(tmp_path) as registry:
            with pytest.raises(InvalidInput, match=f"{key}=.* is not supported by serve") as refused:
                await registry.register(root.name, initial_workers=0)
            assert "model-config of m version 1.0" in str(refused.value)
            assert error_info(refused.value).status == 400
            with pytest.raises(ModelNotFound):
                registry.describe("m")

    run(scenario())


def test_harmless_keys_are_warned_once_and_shown_in_describe(tmp_path, caplog):
    config = ("sequenceBatching: false\ncontinuousBatching: false\nuseJobTicket: false\nparallelType: ''\n"
              "parallelLevel: 1\nclientTimeoutInMills: 0\nuseVenv: false\n"
              "maxNumSequence: 4\npt2:\n  compile:\n    enable: true\n")  # fmt: skip
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config=config)

    async def scenario():
        async with running(tmp_path) as registry:
            with caplog.at_level(logging.WARNING, logger="serve.management.config_keys"):
                await registry.register(root.name, initial_workers=0)
            warnings = [r.getMessage() for r in caplog.records if r.name == "serve.management.config_keys"]
            assert warnings == ["model-config of m version 1.0: model-config keys not supported by serve and "
                                "ignored: maxNumSequence, pt2"]  # fmt: skip
            assert registry.describe("m")[0]["ignoredConfigKeys"] == ["maxNumSequence", "pt2"]

    run(scenario())


def test_a_plain_config_lists_nothing_ignored(tmp_path):
    root = model_dir(tmp_path, "m", CONTROL_HANDLER, config="batchSize: 2\n")

    async def scenario():
        async with running(tmp_path) as registry:
            await registry.register(root.name, initial_workers=0)
            assert "ignoredConfigKeys" not in registry.describe("m")[0]

    run(scenario())
