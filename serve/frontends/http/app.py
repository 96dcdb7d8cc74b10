"""The app factories, one per listener: inference (8080), management (8081), metrics (8082).

Each app carries its collaborators on `app.state` (dataplane, settings, auth, metrics), the routers of its
resources, TorchServe's error bodies for every failure (ServeError, unknown path 404, wrong method 405, bad
parameter 400), CORS when `cors_allowed_origin` is set, and `ServeHTTPMiddleware` (request id, no-cache headers,
`max_request_size`, Requests2XX/4XX/5XX). The server (serve/server.py) runs the three apps on one event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response

from serve import __version__
from serve.errors import InvalidInput, ServeError
from serve.frontends.dataplane import DataPlane
from serve.frontends.http.auth import TokenAuth
from serve.frontends.http.fast_path import PredictionFastPath
from serve.frontends.http.middleware import ServeHTTPMiddleware
from serve.frontends.http.openapi import allowed_methods
from serve.frontends.http.openapi import document as openapi_document
from serve.frontends.http.responses import pretty_json, serve_error_handler
from serve.frontends.http.routers import (
    api_description,
    kserve_v1,
    metrics,
    models,
    oip,
    ping,
    predictions,
    token,
    triton,
)
from serve.frontends.http.routers import workflows as workflow_routes
from serve.frontends.openai import routes as openai_routes
from serve.metrics import ServerMetrics

if TYPE_CHECKING:
    from serve.config import Settings

TITLE = "TorchServe APIs"
HTTP_ERRORS = {
    404: ("ResourceNotFoundException", "Requested resource is not found, please refer to API document."),
    405: ("MethodNotAllowedException", "Requested method is not allowed, please refer to API document."),
}


def create_inference_app(dataplane: DataPlane, settings: Settings, auth: TokenAuth) -> FastAPI | PredictionFastPath:
    """`/ping`, `/predictions/...`, `/explanations/...`, `OPTIONS /`, `/api-description`, `/docs`, the Open Inference
    Protocol's `/v2/...` with Triton's statistics and model control (routers/triton.py, before oip.py's model
    routes) and KServe v1's `/v1/models/...` (routers/oip.py, kserve_v1.py), the OpenAI-compatible
    `/v1/...` and the v2 generate extension (frontends/openai, first: its routes go before /predictions' sub-routes
    and the /v2 catch-all); predictions take
    the fast path (fast_path.py) unless CORS is configured."""
    app = _app("inference API", settings, dataplane.metrics,
               [openai_routes.router, predictions.router, ping.router, api_description.router, triton.router,
                oip.router, kserve_v1.router, workflow_routes.inference_router],
               {**predictions.OPENAPI_PATHS, **workflow_routes.OPENAPI_PATHS}, dataplane=dataplane,
               auth=auth)  # fmt: skip
    if settings.cors_allowed_origin:
        return app
    return PredictionFastPath(app, settings, dataplane, auth)


def create_management_app(dataplane: DataPlane, settings: Settings, auth: TokenAuth) -> FastAPI:
    """`/models...`, `/token`, `OPTIONS /`, `/api-description`, `/docs`."""
    return _app("management API", settings, dataplane.metrics,
                [api_description.router, models.router, token.router, workflow_routes.router],
                dataplane=dataplane, auth=auth)  # fmt: skip


def create_metrics_app(metrics_: ServerMetrics, settings: Settings) -> FastAPI:
    """`/metrics` (Prometheus, with the GPU gauges of the server's GPUs), `OPTIONS /`, `/api-description`."""
    metrics_.watch_gpus(settings.gpu_uuids[: settings.number_of_gpu])
    return _app("metrics API", settings, metrics_, [api_description.router, metrics.router])


def _app(name: str, settings: Settings, server_metrics: ServerMetrics, routers: list[APIRouter],
         openapi_paths: dict[str, Any] | None = None, **state: Any) -> FastAPI:  # fmt: skip
    app = FastAPI(title=TITLE, version=__version__, description=f"serve's {name}, compatible with TorchServe's",
                  redirect_slashes=False, redoc_url=None)  # fmt: skip
    for key, value in {"settings": settings, "metrics": server_metrics, **state}.items():
        setattr(app.state, key, value)
    for router in routers:
        app.include_router(router)
    # routes match in order: FastAPI added its docs routes at creation; the API's own go before them
    docs = {app.openapi_url, app.docs_url, app.swagger_ui_oauth2_redirect_url}
    app.router.routes.sort(key=lambda route: getattr(route, "path", None) in docs)
    app.add_exception_handler(ServeError, _serve_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    if settings.cors_allowed_origin:
        app.add_middleware(CORSMiddleware, **_cors(settings))
    # added last = outermost: it sees every response, CORS preflights and errors included
    app.add_middleware(ServeHTTPMiddleware, max_request_size=settings.max_request_size, metrics=server_metrics)
    _add_openapi_paths(app, openapi_paths or {}, settings)
    return app


def _add_openapi_paths(app: FastAPI, paths: dict[str, Any], settings: Settings) -> None:
    """Document routes that are not FastAPI path operations (FastAPI's "extending OpenAPI" recipe), and finish
    the document so that it lists what the routes really take and answer (openapi.py)."""
    generate = app.openapi
    finished: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not finished:
            schema = generate()  # cached by FastAPI
            finished.update(openapi_document(app.routes, {**schema, "paths": {**schema["paths"], **paths}}, settings))
        return finished

    app.openapi = openapi  # type: ignore[method-assign]


def _cors(settings: Settings) -> dict[str, Any]:
    """TorchServe's three keys; unset methods or headers allow all, since the origin is what the user restricts."""

    def split(value: str | None) -> list[str]:
        return [v.strip() for v in (value or "*").split(",") if v.strip()]

    return {
        "allow_origins": split(settings.cors_allowed_origin),
        "allow_methods": split(settings.cors_allowed_methods),
        "allow_headers": split(settings.cors_allowed_headers),
    }


async def _serve_error(request: Request, exc: Exception) -> Response:
    """TorchServe's error body; a 405 (the model API is off) names in Allow the methods the path still answers."""
    response = await serve_error_handler(request, exc)
    if response.status_code == 405:
        response.headers["Allow"] = ", ".join(m for m in allowed_methods(request) if m != request.method)
    return response


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no route, wrong method) with TorchServe's types and fixed messages."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status in HTTP_ERRORS:
        type_name, message = HTTP_ERRORS[status]
    else:
        type_name = "InternalServerException" if status >= 500 else "BadRequestException"
        message = str(getattr(exc, "detail", exc))
    headers = getattr(exc, "headers", None)
    if status == 405:  # Starlette's Allow names one route's methods; every route of the path counts
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    return pretty_json({"code": status, "type": type_name, "message": message}, status, headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    """A path or query value FastAPI could not convert: 400 (never FastAPI's 422)."""
    problems = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = "; ".join(f"{'.'.join(map(str, p.get('loc', ())))}: {p.get('msg')}" for p in problems) or str(exc)
    return await serve_error_handler(request, InvalidInput(f"Invalid request parameters: {detail}"))
