"""`POST /predictions/...` straight to its endpoint, around the inference app's middleware stack and router.

Under load, FastAPI's and Starlette's layers (error middleware, telemetry, body limit, exception middleware, exit
stack, two routers) took half of the server process's CPU per prediction. This wrapper sends a prediction (POST
or PUT) through only what it needs: `ServeHTTPMiddleware` (request id, no-cache headers, `max_request_size`,
Requests2XX/4XX/5XX), the same endpoint function the router would call, and TorchServe's error bodies for any
failure. Everything else (ping, explanations, the API description, docs, an unknown path) goes to the app
unchanged. With CORS configured the wrapper is not used, so CORS headers are never skipped.

The wrapper passes attribute reads through to the app (`app.state`, `app.openapi()`), so it stands in for it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from serve.frontends.http.middleware import ServeHTTPMiddleware
from serve.frontends.http.responses import error_response
from serve.frontends.http.routers.predictions import METHODS, predict
from serve.metrics import ServerMetrics

PREFIX = "/predictions/"


class PredictionFastPath:
    def __init__(self, app: FastAPI, max_request_size: int, metrics: ServerMetrics) -> None:
        self.app = app
        self._predict = ServeHTTPMiddleware(self._endpoint, max_request_size, metrics)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in METHODS and scope["path"].startswith(PREFIX):
            params = _path_params(scope["path"])
            if params is not None:
                await self._predict({**scope, "app": self.app, "path_params": params}, receive, send)
                return
        await self.app(scope, receive, send)

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await predict(Request(scope, receive))
        except Exception as exc:  # ServeError and bugs alike: TorchServe's error body, as the app's handlers give
            response = error_response(exc)
        await response(scope, receive, send)


def _path_params(path: str) -> dict[str, str] | None:
    """The router's path parameters of `/predictions/{model_name}[/{model_version}[/{url_path:path}]]`."""
    parts = path.rstrip("/")[len(PREFIX) :].split("/", 2)
    if not parts[0]:
        return None
    names = ("model_name", "model_version", "url_path")
    return dict(zip(names, parts))
