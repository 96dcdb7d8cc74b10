"""`ts.context`: TorchServe's `Context` and `RequestProcessor` are serve's worker classes, re-exported.

serve.worker.context already keeps TorchServe's attributes and methods (model_name, manifest, system_properties,
model_yaml_config, request_ids, request_processor, metrics, get_request_id/header, set_response_status/header,
get_response_headers, ...), so a handler's `from ts.context import Context` type hint is the real class.
"""

from serve.worker.context import Context, RequestProcessor

__all__ = ["Context", "RequestProcessor"]
