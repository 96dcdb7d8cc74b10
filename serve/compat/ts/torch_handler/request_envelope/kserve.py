"""`ts.torch_handler.request_envelope.kserve.KServeEnvelope`: KServe v1 (`{"instances": [...]}`), as TorchServe's.

parse_input takes the FIRST request's `instances` (TorchServe's behaviour: the envelope serves one KServe request
per batch, its instances being the batch); format_output answers `{"predictions": results}`, or
`{"explanations": results}` for an explain request.
"""

from __future__ import annotations

import json
from typing import Any

from serve.compat.ts.torch_handler.request_envelope.base import BaseEnvelope, payload


class KServeEnvelope(BaseEnvelope):
    def parse_input(self, data: list[Any]) -> Any:
        self._data_list = [payload(row) for row in data]
        body = self._data_list[0]
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body.decode())
        if not isinstance(body, dict):
            raise ValueError('the KServe v1 envelope expects a JSON object {"instances": [...]}')
        self._inputs = body.get("instances")
        return self._inputs

    def format_output(self, data: Any) -> list[dict[str, Any]]:
        key = "explanations" if self._is_explain() else "predictions"
        return [{key: data}]

    def _is_explain(self) -> bool:
        return bool(self.context) and self.context.get_request_header(0, "explain") == "True"
