"""Every built-in name that model-archiver leaves out of archives resolves to a handler class of `handlers`."""

from __future__ import annotations

from pathlib import Path

import pytest

from handlers import BUILTIN_HANDLERS
from handlers.base_handler import BaseHandler
from serve.worker import resolve_handler


@pytest.mark.parametrize("name", BUILTIN_HANDLERS)
def test_builtin_name_resolves_to_a_handler(name: str, tmp_path: Path) -> None:
    handler = resolve_handler(name, tmp_path)
    assert isinstance(handler, BaseHandler)
    assert type(handler).__module__ == f"handlers.{name}"


def test_every_handler_module_is_listed() -> None:
    package = Path(__file__).resolve().parents[3] / "handlers"
    building_blocks = {"__init__", "transforms", "vision_handler", "text_input", "text_vocab", "explanations",
                       "insights", "shape_groups", "generation_metrics"}  # fmt: skip
    modules = {p.stem for p in package.glob("*.py")} - building_blocks
    assert modules == set(BUILTIN_HANDLERS)
