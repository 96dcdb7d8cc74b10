"""`Context`: what a handler knows about its model and the batch it is answering (TorchServe's `ts/context.py`).

Fixed at load time: `model_name`, `manifest`, `system_properties` (model_dir, gpu_id, batch_size, server_name,
server_version, limit_max_image_pixels), `model_yaml_config` (the model-config YAML's backend keys, {} when
none), `metrics`. Per batch (`begin_batch`): `request_ids` and one `RequestProcessor` per request holding its
request headers and the response status and headers the handler sets.

For a stateful model (sequenceBatching) each request's headers hold its sequence: `get_sequence_id(idx)` is its
`ts_request_sequence_id`, and `ts_request_sequence_start` / `ts_request_sequence_end` are "true" on its first and last
request (`header_key_sequence_id/start/end` name them, as TorchServe's context does).

Request header names are matched case-insensitively (HTTP header names are), unlike TorchServe's exact match.

Streaming (TorchServe's `send_intermediate_predict_response`): while a batch runs, the worker installs a sink
(`intermediate_sink`); `send_intermediate_response(ret, request_id_map, code)` hands it one intermediate chunk per
request named in `request_id_map` (`ret[idx]` for each `idx` of the map), from the handler's thread or any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from serve.batching.job import InferenceRequest
from serve.worker.metrics_cache import MetricsCache

SEQUENCE_ID_HEADER = "ts_request_sequence_id"
SEQUENCE_START_HEADER, SEQUENCE_END_HEADER = "ts_request_sequence_start", "ts_request_sequence_end"


class RequestProcessor:
    """One request's headers in, and the status and headers of its response out."""

    def __init__(self, request_header: Mapping[str, Any] | None = None) -> None:
        self._request_header = {str(k).lower(): v for k, v in (request_header or {}).items()}
        self._status_code = 200
        self._reason_phrase = ""
        self._response_header: dict[str, str] = {}

    def get_request_property(self, key: str) -> Any:
        return self._request_header.get(key.lower())

    def get_request_properties(self) -> dict[str, Any]:
        return self._request_header

    def report_status(self, code: int, reason_phrase: str = "") -> None:
        self._status_code = code
        self._reason_phrase = reason_phrase

    def get_response_status_code(self) -> int:
        return self._status_code

    def get_response_status_phrase(self) -> str:
        return self._reason_phrase

    def add_response_property(self, key: str, value: str) -> None:
        self._response_header[key] = value

    def get_response_headers(self) -> dict[str, str]:
        return self._response_header

    def get_response_header(self, key: str) -> str | None:
        return self._response_header.get(key)


class Context:
    """Model information fixed at load time, plus the request ids and headers of the batch being handled."""

    def __init__(
        self,
        model_name: str,
        model_dir: str,
        manifest: dict[str, Any] | None,
        batch_size: int,
        gpu: int | None,
        server_version: str,
        limit_max_image_pixels: bool | int = True,
        metrics: MetricsCache | None = None,
        model_yaml_config: dict[str, Any] | None = None,
    ) -> None:
        self.model_name = model_name
        self.manifest = manifest
        self._system_properties: dict[str, Any] = {
            "model_dir": str(model_dir),
            "gpu_id": gpu,
            "batch_size": batch_size,
            "server_name": "MMS",
            "server_version": server_version,
            "limit_max_image_pixels": limit_max_image_pixels,
        }
        self.model_yaml_config: dict[str, Any] = model_yaml_config or {}
        self.metrics = metrics if metrics is not None else MetricsCache(model_name)
        self.request_ids: dict[int, str] = {}
        self.request_processor: list[RequestProcessor] = []
        self.stopping_criteria = None
        # TorchServe's names of the sequence headers (stateful models: serve/management/sequences.py sets them)
        self.header_key_sequence_id = SEQUENCE_ID_HEADER
        self.header_key_sequence_start = SEQUENCE_START_HEADER
        self.header_key_sequence_end = SEQUENCE_END_HEADER
        self.cl_socket = None
        # set by the worker while a batch runs: (ret, request_id_map, code) -> one chunk per request of the map
        self.intermediate_sink: Callable[[list[Any], Mapping[int, str], int], None] | None = None

    @property
    def system_properties(self) -> dict[str, Any]:
        return self._system_properties

    def begin_batch(self, request_ids: Mapping[int, str], headers: list[Mapping[str, Any]] | None = None) -> None:
        """Start a batch: its request ids by batch index, and each request's headers (fresh response state)."""
        self.request_ids = dict(request_ids)
        headers = headers if headers is not None else [{} for _ in self.request_ids]
        self.request_processor = [RequestProcessor(h) for h in headers]
        self.metrics.request_ids = self.request_ids

    def send_intermediate_response(self, ret: list[Any], request_id_map: Mapping[int, str], code: int = 200) -> None:
        """Send `ret[idx]` to the client of `request_id_map[idx]`, for each idx of the map, as one chunk of its
        streamed answer (TorchServe's send_intermediate_predict_response); what the handler returns is the last."""
        sink = self.intermediate_sink
        if sink is None:
            raise RuntimeError(
                "send_intermediate_predict_response was called outside a batch (the handler returned, "
                "or no request is being handled): send intermediate chunks before handle() returns"
            )
        sink(ret, request_id_map, code)

    def get_request_id(self, idx: int = 0) -> str | None:
        return self.request_ids.get(idx)

    def get_request_header(self, idx: int, key: str) -> Any:
        return self._processor(idx).get_request_property(key)

    def get_all_request_header(self, idx: int) -> dict[str, Any]:
        return self._processor(idx).get_request_properties()

    def get_sequence_id(self, idx: int) -> str | None:
        return self.get_request_header(idx, SEQUENCE_ID_HEADER)

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self._processor(idx).report_status(code, phrase)

    def set_all_response_status(self, code: int = 200, phrase: str = "") -> None:
        for processor in self.request_processor:
            processor.report_status(code, phrase)

    def get_response_status(self, idx: int) -> tuple[int, str]:
        processor = self._processor(idx)
        return processor.get_response_status_code(), processor.get_response_status_phrase()

    def set_response_header(self, idx: int, key: str, value: str) -> None:
        self._processor(idx).add_response_property(key, value)

    def get_response_headers(self, idx: int) -> dict[str, str]:
        return self._processor(idx).get_response_headers()

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.set_response_header(idx, "content-type", value)

    def get_response_content_type(self, idx: int) -> str | None:
        return self.get_response_headers(idx).get("content-type")

    def _processor(self, idx: int) -> RequestProcessor:
        # a handler called without begin_batch (a test, a script) still gets empty headers and a 200 status
        while len(self.request_processor) <= idx:
            self.request_processor.append(RequestProcessor())
        return self.request_processor[idx]


def handler_headers(request: InferenceRequest, describe: bool) -> dict[str, Any]:
    """TorchServe's per-request header dict: each input's content type, then the request headers, then the
    `explain`/`describe` flags the frontend adds."""
    headers: dict[str, Any] = {name: {"content-type": ct} for name, ct in request.content_types.items()}
    headers.update(request.headers)
    headers["explain"] = "True" if request.explain else "False"
    if describe:
        headers["describe"] = "True"
    return headers
