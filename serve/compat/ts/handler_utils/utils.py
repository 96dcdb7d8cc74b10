"""`ts.handler_utils.utils`: TorchServe's streaming call for handlers that answer in several parts.

    send_intermediate_predict_response(ret_list, request_id_map, message, code, context)

Each call sends one intermediate chunk to the clients of the requests in `request_id_map` (batch index -> request
id, usually `context.request_ids`): `ret_list[idx]` for each idx of the map, serialised as a result is (bytes, str,
JSON). The list the handler returns is the last chunk. REST answers with chunked HTTP/1.1, gRPC `StreamPredictions`
with one message per chunk. `message` is TorchServe's log text and is not sent; `code` other than 200 becomes the
status of those requests' answer when it is their first chunk. TorchServe sends only from rank 0 (`LOCAL_RANK`):
serve runs one process per worker, so every call sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serve.worker.context import Context


def send_intermediate_predict_response(ret: list[Any], req_id_map: Mapping[int, str], message: str, code: int,
                                       context: Context | None = None) -> None:  # fmt: skip
    if context is None:
        raise TypeError("send_intermediate_predict_response needs the handler's context as its fifth argument")
    context.send_intermediate_response(ret, req_id_map, code)
