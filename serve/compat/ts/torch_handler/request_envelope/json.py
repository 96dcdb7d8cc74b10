"""`ts.torch_handler.request_envelope.json.JSONEnvelope`: TensorFlow Serving's JSON format, as TorchServe's.

Each request is `{"instances": [...]}` (JSON bytes or parsed); instances `{"b64": "..."}` (or columns holding one)
are base64-decoded. The instances of every request are joined into one batch for the handler, and its results
are cut back per request, each answered as the JSON text `{"predictions": [...]}`.
"""

from __future__ import annotations

import json
from base64 import b64decode
from typing import Any

from serve.compat.ts.torch_handler.request_envelope.base import BaseEnvelope, payload


class JSONEnvelope(BaseEnvelope):
    def __init__(self, handle_fn: Any) -> None:
        super().__init__(handle_fn)
        self._lengths: list[int] = []

    def parse_input(self, data: list[Any]) -> list[Any]:
        mini_batches = [self._from_json(row) for row in data]
        self._lengths = [len(batch) for batch in mini_batches]
        return [item for batch in mini_batches for item in batch]

    def format_output(self, data: list[Any]) -> list[str]:
        outputs, cursor = [], 0
        for length in self._lengths:
            outputs.append(self._to_json(data[cursor : cursor + length]))
            cursor += length
        return outputs

    def _from_json(self, row: Any) -> list[Any]:
        body = payload(row) or row
        if isinstance(body, (bytes, bytearray, str)):
            body = json.loads(body)
        if not isinstance(body, dict) or not isinstance(body.get("instances"), list):
            raise ValueError('the JSON envelope expects {"instances": [...]} in each request')
        rows = body["instances"]
        for i, item in enumerate(rows):
            if _is_b64(item):
                rows[i] = b64decode(item["b64"])
            elif isinstance(item, dict):
                for col, value in item.items():
                    if _is_b64(value):
                        item[col] = b64decode(value["b64"])
        return rows

    def _to_json(self, output: list[Any]) -> str:
        return json.dumps({"predictions": output})


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == ["b64"]
