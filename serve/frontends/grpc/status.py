"""Exception -> gRPC status: the code comes from THE table in serve.frontends.errors (its gRPC column), nothing else.

`abort(context, exc)` ends the call with that code and the error's message; `grpc_code(exc)` is the lookup alone.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

from serve.frontends.errors import error_info, grpc_code_for_status


def grpc_code(exc: BaseException) -> grpc.StatusCode:
    return grpc.StatusCode[error_info(exc).grpc_code]


def code_for_status(status: int) -> grpc.StatusCode:
    """For a handler's own non-2xx answer (it set an HTTP status): the same HTTP -> gRPC mapping."""
    return grpc.StatusCode[grpc_code_for_status(status)]


async def abort(context: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    info = error_info(exc)
    await context.abort(grpc.StatusCode[info.grpc_code], info.message)
    raise AssertionError("unreachable: context.abort raises")  # for type checkers: abort never returns
