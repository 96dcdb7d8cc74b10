"""Images, hostile image bytes and handler set-up shared by the vision handler tests.

handler, context = vision_handler(ImageClassifier, ToyNet(), tmp_path, {"image_size": 8})
results = run_batch(handler, context, [{"body": png_bytes(img)}, {"data": b"junk"}])
"""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from serve.worker.context import Context


def random_image(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    arr = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    return Image.fromarray(arr[..., 0] if channels == 1 else arr)


def encode(image: Image.Image, fmt: str = "PNG", **options: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


def png_bytes(width: int = 12, height: int = 10, mode: str = "RGB", seed: int = 0) -> bytes:
    return encode(random_image(width, height, mode, seed))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height 8-bit gray pixels, with a token of compressed data after it."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(bytes(1000))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def make_context(
    model_dir: Path, config: dict[str, Any] | None = None, limit: bool | int = True, batch: int = 8
) -> Context:
    return Context(
        "toy",
        str(model_dir),
        {"runtime": "python", "model": {"modelName": "toy", "modelVersion": "1.0"}},
        batch,
        None,
        "test",
        limit_max_image_pixels=limit,
        model_yaml_config={"handler": config} if config is not None else {},
    )


def vision_handler(
    cls: type,
    model: Any,
    model_dir: Path,
    config: dict[str, Any] | None = None,
    mapping: dict[str, Any] | None = None,
    limit: bool | int = True,
) -> tuple[Any, Context]:
    """`cls` initialised on `model` (no archive: load_model returns it), with an optional index_to_name.json."""
    if mapping is not None:
        (model_dir / "index_to_name.json").write_text(json.dumps(mapping))

    class Toy(cls):  # type: ignore[misc, valid-type]
        def load_model(self, context: Context) -> Any:
            return model.eval()

    handler = Toy()
    context = make_context(model_dir, config, limit)
    handler.initialize(context)
    return handler, context


def run_batch(handler: Any, context: Context, rows: list[dict[str, Any]]) -> list[Any]:
    context.begin_batch({i: f"req-{i}" for i in range(len(rows))}, [{} for _ in rows])
    results = handler.handle(rows, context)
    assert len(results) == len(rows)
    return results


def assert_row_error(result: Any, context: Context, idx: int, code: int, *fragments: str) -> None:
    """Row `idx` was answered with `code` (body and context status) and a message holding every fragment."""
    assert isinstance(result, dict) and result.get("code") == code, result
    assert context.get_response_status(idx)[0] == code
    for fragment in fragments:
        assert fragment in result["message"], (fragment, result["message"])
