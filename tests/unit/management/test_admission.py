"""serve/management/admission.py: the extraction budget shared by every registered archive, the handler check, and
urls.py's refusal of the model store itself (issue 17 item 4)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from serve.archive import package
from serve.config import Settings
from serve.errors import ArchiveError, InvalidInput
from serve.management.admission import ExtractionBudget, check_handler
from serve.management.urls import resolve_url


def _archive(tmp_path: Path, size: int) -> Path:
    """A .mar whose weights are `size` incompressible bytes, with a handler file `h.py`."""
    (tmp_path / "w.bin").write_bytes(os.urandom(size))
    (tmp_path / "h.py").write_text("def handle(data, context):\n    return data\n")
    return package("m", "1.0", str(tmp_path / "h.py"), serialized_file=tmp_path / "w.bin",
                   export_path=tmp_path / "store", progress=False)  # fmt: skip


def test_an_archive_over_what_is_left_is_507_naming_the_key_and_its_bytes_return_on_release(tmp_path: Path) -> None:
    mar = _archive(tmp_path, 300_000)

    async def scenario() -> None:
        budget = ExtractionBudget(500_000)
        first = await budget.open(mar)
        assert 300_000 <= budget.used < 310_000
        with pytest.raises(ArchiveError, match="max_extracted_bytes_total") as info:
            await budget.open(mar)
        assert getattr(info.value, "code", None) == 507
        assert 300_000 <= budget.used < 310_000  # the refused one holds nothing
        budget.release(first)
        first.close()
        assert budget.used == 0
        (await budget.open(mar)).close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_handler_must_be_built_in_or_in_the_archive(tmp_path: Path) -> None:
    async def scenario() -> None:
        with await ExtractionBudget(1 << 30).open(_archive(tmp_path, 10)) as archive:
            for good in ("h", "h.py", "h:handle", "image_classifier"):
                check_handler(archive, good)
            for bad in ("os:system", "subprocess", "../h.py"):
                with pytest.raises(InvalidInput, match="Invalid handler"):
                    check_handler(archive, bad)

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("url", [".", "{store}", "{store}/", "file://{store}", "{parent}"])
def test_the_store_itself_or_a_directory_holding_it_is_400(tmp_path: Path, url: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    settings = Settings(model_store=store, allowed_urls=("file://.*",))
    with pytest.raises(InvalidInput, match="is the model store itself"):
        asyncio.run(resolve_url(url.format(store=store, parent=tmp_path), settings))
