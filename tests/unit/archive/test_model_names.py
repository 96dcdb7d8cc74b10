"""Model names (issue 17 item 3): at most 256 characters of TorchServe's [A-Za-z0-9][A-Za-z0-9_.-]*, and `shown`,
the bounded, escaped form in which a message may echo a name a client sent."""

from __future__ import annotations

import json

import pytest

from serve.archive import check_model_name, shown
from serve.config import values
from serve.errors import ArchiveError, ConfigError


@pytest.mark.parametrize("name", ["a", "resnet-18_v1.2", "9" * 256])
def test_valid_names_pass_and_are_shown_whole(name: str) -> None:
    check_model_name(name)
    assert shown(name) == name


@pytest.mark.parametrize(("name", "says"), [("a" * 257, "longer than 256 characters (257)"),
                                            ("name\n", "special characters"), (".hidden", "special characters"),
                                            ("a/b", "special characters"), ("", "special characters"),
                                            ("é", "special characters")])  # fmt: skip
def test_invalid_names_are_refused_naming_the_rule(name: str, says: str) -> None:
    with pytest.raises(ArchiveError, match="at most 256 characters") as info:
        check_model_name(name)
    assert says in str(info.value)


def test_shown_escapes_and_bounds() -> None:
    assert shown("a\x1b[31m") == "'a\\x1b[31m'"
    long = shown("x" * 100_000)
    assert long == repr("x" * 64) + "... (100000 characters)"


def test_config_models_refuses_a_name_serve_would_never_register() -> None:
    assert values.models("models", '{"ok-name": {"1.0": {}}}') == {"ok-name": {"1.0": {}}}
    for name in ("a" * 257, "bad name"):
        with pytest.raises(ConfigError, match="at most 256 characters"):
            values.models("models", json.dumps({name: {"1.0": {}}}))
    assert values.MODEL_NAME.pattern == r"[A-Za-z0-9][A-Za-z0-9_\-.]*"
