"""`ts.torch_handler.request_envelope.body.BodyEnvelope`: each request's data/body as a flat list, output as is."""

from __future__ import annotations

from typing import Any

from serve.compat.ts.torch_handler.request_envelope.base import BaseEnvelope, payload


class BodyEnvelope(BaseEnvelope):
    def parse_input(self, data: list[Any]) -> list[Any]:
        return [payload(row) for row in data]

    def format_output(self, data: Any) -> Any:
        return data
