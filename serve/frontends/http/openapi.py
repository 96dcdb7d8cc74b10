"""The listeners' OpenAPI documents, made true (issue 17 item 9): `document(routes, generated, settings)`, and the
full `Allow` of a 405 (`allowed_methods`).

FastAPI writes the document of its path operations from their signatures, which know neither what our routers read
from the query string themselves (params.py) nor what they answer on failure, nor the plain Starlette routes of the
hot paths. This module finishes the generated document, in one place, from the routes the app really has:
- every method a route answers is listed (`/ping` and `/api-description` answer any method, as TorchServe's);
- the plain routes (`/predictions`, `/explanations`, KServe v1's `/v1` and `/`, the Open Inference Protocol's
  `/v2` and its generate extension, the OpenAI-compatible `/v1/...`) are described here, by path, with their path
  parameters and bodies;
- the management routes list their query parameters, with the bounds the server checks (the worker caps of this
  server's settings);
- each operation lists the statuses it answers: 202/206 for worker updates, and the errors of the one error table
  (frontends/errors.py) that the route can reach, with TorchServe's body `{code, type, message}` (v1 and v2 routes:
  `{"error": message}`); FastAPI's 422 is never declared, since a parameter it cannot convert is a 400 (app.py);
- `/metrics` is Prometheus text (`text/plain`), not JSON;
- with token authorization off, `GET /token` is left out: there is no key to rotate, and the route only answers
  400 saying so (a document must not offer an operation that no request can make succeed).
The connection-level answers of the HTTP limits (408, 414, 431) come before any route and are not listed.
A plain route none of the patterns here describes is left out (FastAPI's /docs, the /v2 catch-all that answers
404); tests/unit/frontends/test_openapi.py checks that every other route and method is in the document.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.routing import Match, Route

if TYPE_CHECKING:
    from serve.config import Settings

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
TS_ERROR = {
    "type": "object",
    "properties": {"code": {"type": "integer"}, "type": {"type": "string"}, "message": {"type": "string"}},
    "required": ["code", "type", "message"],
}
V2_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
STATUS_TEXT = {
    202: "Processing worker updates... (the workers start after the answer)",
    206: "Workers scaling in progress... (some workers are still starting)",
    400: "Bad request: a malformed parameter, body or input, or a worker cap exceeded; the message says which",
    401: "Missing or wrong key (token authorization)",
    403: "The default version cannot be unregistered while other versions exist",
    404: "Unknown model, version or archive",
    405: "The model API is off: start with --enable-model-api",
    409: "That model version is already registered",
    413: "Body larger than max_request_size",
    429: "Too many requests: the model's queue or KV cache budget is full (generative models)",
    500: "The model could not be loaded, or its worker died",
    503: "No ready worker, the queue is full, or the handler failed (TorchServe's 'Prediction failed')",
    504: "No answer within the model's response_timeout",
    507: "Insufficient storage: the answer is over max_response_size, out of GPU memory, or the archives would pass "
    "max_extracted_bytes_total",
}
INFERENCE_ERRORS = (400, 401, 404, 413, 500, 503, 504, 507)


def _query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


INTEGER, BOOLEAN, STRING = {"type": "integer"}, {"type": "boolean"}, {"type": "string"}
SYNCHRONOUS = _query("synchronous", BOOLEAN, "Answer once the workers are up")


def _scale_parameters(settings: Settings, with_version: bool) -> list[dict[str, Any]]:
    workers = {"type": "integer", "minimum": 0, "maximum": settings.max_workers_per_model}
    parameters = [
        _query("min_worker", workers, "Workers to run (capped by max_workers_per_model and max_workers)"),
        _query("max_worker", workers, "Most workers (at least min_worker)"),
        _query("synchronous", BOOLEAN, "Answer once the workers are up (default false)"),
        _query("timeout", INTEGER, "Seconds a synchronous scale waits (-1: no limit)"),
        _query("number_gpu", INTEGER, "Accepted and ignored, as in TorchServe"),
    ]
    return parameters if with_version else [*parameters, _query("model_version", STRING, "The version to scale")]


def _management(settings: Settings) -> dict[tuple[str, str], tuple[tuple[int, ...], list[dict[str, Any]]]]:
    """(method, path) -> (statuses besides 200, query parameters)."""
    customized = [_query("customized", BOOLEAN, "Add the handler's describe output (customizedMetadata)")]
    workers = {"type": "integer", "minimum": 0, "maximum": settings.max_workers_per_model}
    register = [
        _query("url", {"type": "string", "minLength": 1}, "An archive in the model store, or an allowed URL", True),
        _query("model_name", STRING, "Name to register under (default: the archive's)"),
        _query("handler", STRING, "Handler overriding the archive's"),
        _query("runtime", {"type": "string", "enum": ["", "python", "python3"]}, "Runtime (empty: the archive's)"),
        _query("batch_size", {"type": "integer", "minimum": 1}, "Most requests per batch"),
        _query("max_batch_delay", {"type": "integer", "minimum": 0}, "Milliseconds to wait for a batch to fill"),
        _query("initial_workers", workers, "Workers to start (capped by max_workers_per_model and max_workers)"),
        SYNCHRONOUS,
        _query("response_timeout", {"type": "integer", "minimum": 1}, "Seconds a batch may take"),
        _query("startup_timeout", {"type": "integer", "minimum": 1}, "Seconds a worker may take to load"),
    ]
    page_token = {"type": "integer", "minimum": 0}
    listing = [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "Models per page (default 100)"),
        _query("next_page_token", page_token, "The previous page's nextPageToken (past the end: an empty page)"),
    ]
    errors = (400, 401, 404)
    scaled = (202, 206, *errors, 500, 503)
    return {
        ("get", "/models"): ((400, 401), listing),
        ("post", "/models"): ((202, 206, 400, 401, 404, 405, 409, 500, 503, 507), register),
        ("get", "/models/{model_name}"): (errors, customized),
        ("get", "/models/{model_name}/{model_version}"): (errors, customized),
        ("put", "/models/{model_name}"): (scaled, _scale_parameters(settings, False)),
        ("put", "/models/{model_name}/{model_version}"): (scaled, _scale_parameters(settings, True)),
        ("put", "/models/{model_name}/{model_version}/set-default"): (errors, []),
        ("delete", "/models/{model_name}"): ((*errors, 403, 405, 504), []),
        ("delete", "/models/{model_name}/{model_version}"): ((*errors, 403, 405, 504), []),
        ("get", "/token"): ((400, 401), [_query("type", {"type": "string", "enum": ["management", "inference"]},
                                                "Which key to rotate", True)]),
        **_workflows(listing),
    }  # fmt: skip


def _workflows(listing: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[tuple[int, ...], list[dict[str, Any]]]]:
    """TorchServe's workflow management routes (routers/workflows.py)."""
    register = [
        _query("url", {"type": "string", "minLength": 1}, "A .war in the workflow store, or an allowed URL", True),
        _query("workflow_name", STRING, "Name to register under (default: the archive's)"),
        _query("response_timeout", {"type": "integer", "minimum": 1}, "Seconds a batch of a node's model may take"),
        _query("startup_timeout", {"type": "integer", "minimum": 1}, "Seconds a node's worker may take to load"),
    ]
    return {
        ("get", "/workflows"): ((400, 401), listing),
        ("post", "/workflows"): ((400, 401, 404, 405, 409, 500, 503, 507), register),
        ("get", "/workflows/{workflow_name}"): ((400, 401, 404), []),
        ("delete", "/workflows/{workflow_name}"): ((400, 401, 404, 405, 500), []),
    }


V2_TENSOR = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {
            "type": "string",
            "enum": [
                "BOOL",
                "UINT8",
                "UINT16",
                "UINT32",
                "UINT64",
                "INT8",
                "INT16",
                "INT32",
                "INT64",
                "FP16",
                "FP32",
                "FP64",
                "BF16",
                "BYTES",
            ],
        },
        "data": {"type": "array"},
    },
    "required": ["name", "shape", "datatype", "data"],
}
V2_INFER = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "inputs": {"type": "array", "items": V2_TENSOR, "minItems": 1},
                   "outputs": {"type": "array"}},
    "required": ["inputs"],
}  # fmt: skip
V1_INSTANCES = {
    "type": "object",
    "properties": {"instances": {"type": "array"}},
    "required": ["instances"],
}
RAW_BODY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {"schema": {}}, "text/plain": {"schema": {"type": "string"}}}  # fmt: skip

OPENAI_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "object", "properties": {"message": {"type": "string"}, "type": {"type":
                   "string"}, "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}},
                             "required": ["message", "type"]}},
    "required": ["error"],
}  # fmt: skip


def _openai_body(required: str) -> dict[str, Any]:
    """OpenAI's request body with the one field the route cannot do without (`model` too at the root)."""
    schema = {
        "type": "object",
        "properties": {"model": {"type": "string"}, required: {}},
        "required": [required],
        "description": "OpenAI's request body (serve/frontends/openai/schemas.py); unknown fields are a 400",
    }
    return {"application/json": {"schema": schema}}


GENERATE_BODY = {"application/json": {"schema": {"type": "object", "properties": {"text_input": {"type": "string"},
                 "parameters": {"type": "object"}}, "required": ["text_input"]}}}  # fmt: skip
OPENAI_ERRORS = (400, 401, 404, 413, 429, 500, 503, 504, 507)

# plain routes: path pattern -> (summary, success answer, error statuses, error body, request body content)
PLAIN: list[tuple[str, str, tuple[int, ...], dict[str, Any], dict[str, Any] | None]] = [
    (r"/v1/completions$", "OpenAI-compatible completions (JSON, or Server-Sent Events with stream=true)",
     OPENAI_ERRORS, OPENAI_ERROR, _openai_body("prompt")),
    (r"/v1/chat/completions$", "OpenAI-compatible chat completions (JSON, or Server-Sent Events with stream=true)",
     OPENAI_ERRORS, OPENAI_ERROR, _openai_body("messages")),
    (r"/v1/embeddings$", "OpenAI-compatible embeddings", OPENAI_ERRORS, OPENAI_ERROR, _openai_body("input")),
    (r"^/predictions/.+/v1/models(/[^/]+)?$", "OpenAI-compatible model list", (400, 401, 404), OPENAI_ERROR, None),
    (r"/generate(_stream)?$", "Open Inference Protocol generate extension (generate_stream: Server-Sent Events)",
     (400, 401, 404, 413, 500, 503, 504, 507), V2_ERROR, GENERATE_BODY),
    (r"^/predictions/", "Run the model's handler on the body", INFERENCE_ERRORS, TS_ERROR, RAW_BODY),
    (r"^/explanations/", "Explain with the model's handler", INFERENCE_ERRORS, TS_ERROR, RAW_BODY),
    (r"^/wfpredict/", "Run the workflow's DAG on the body (the leaf's answer)", INFERENCE_ERRORS, TS_ERROR, RAW_BODY),
    (r"^/v2/health/", "Open Inference Protocol health", (503,), V2_ERROR, None),
    (r"^/v2/repository/index$", "Models and their state", (400, 401), V2_ERROR,
     {"application/json": {"schema": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}),
    (r"^/v2/repository/models/[^/]+/(load|unload)$", "Triton's model repository: register or unregister a model",
     (400, 401, 404, 405, 409, 500, 503), V2_ERROR,
     {"application/json": {"schema": {"type": "object", "properties": {"parameters": {"type": "object"}}}}}),
    (r"/stats$", "Triton's statistics of a model's versions (all models: /v2/models/stats)", (401, 404), V2_ERROR,
     None),
    (r"/(infer|explain)$", "Open Inference Protocol inference", (400, 401, 404, 413, 500, 503, 504, 507), V2_ERROR,
     {"application/json": {"schema": V2_INFER}}),
    (r"^/v2(/models/[^/]+(/versions/[^/]+)?(/ready|/config)?)?$", "Open Inference Protocol metadata",
     (401, 404, 503), V2_ERROR, None),
    (r":(predict|explain)$", "KServe v1 inference", (400, 401, 404, 413, 500, 503, 504, 507), V2_ERROR,
     {"application/json": {"schema": V1_INSTANCES}}),
    (r"^/v1/models(/[^/:]+)?$", "KServe v1 model list or readiness", (401, 404), V2_ERROR, None),
    (r"^/$", "KServe v1 liveness", (), V2_ERROR, None),
]  # fmt: skip
UNDESCRIBED = "Undescribed route"


def flat_routes(routes: list[Any]) -> list[Route]:
    """The routes of an app, those of its included routers too (FastAPI keeps an included router as one node)."""
    flat: list[Route] = []
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI >= 0.16x: include_router's node
        if included is not None:
            flat += flat_routes(list(included.routes))
        elif isinstance(route, Route):
            flat.append(route)
    return flat


def allowed_methods(request: Request, catch_all: bool = True) -> list[str]:
    """Every method the app answers on the request's path: the full `Allow` of a 405 (Starlette's names one
    route's methods, though GET and POST of a path are two routes). A catch-all (`{...:path}`) route counts only
    where no other route has the path (the /v2 catch-all answers 404 for any other path, not a method)."""
    scope = {**request.scope, "method": "GET"}  # a route matches a path FULL or PARTIAL whatever the method
    matching = [r for r in flat_routes(request.app.router.routes) if r.methods and r.matches(scope)[0] != Match.NONE]
    specific = [r for r in matching if ":path}" not in r.path]
    if specific:  # `/v1/models/{m}:predict` before `/v1/models/{m}` (whose {m} would take "x:predict")
        literal = max(_literal_length(r.path) for r in specific)
        specific = [r for r in specific if _literal_length(r.path) == literal]
    return sorted({m for route in (specific or (matching if catch_all else [])) for m in (route.methods or ())})


def _literal_length(path: str) -> int:
    return len(re.sub(r"\{[^}]*\}", "", path))


def document(routes: list[Any], generated: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The generated document, finished as the module docstring says (a new dict; `generated` is unchanged)."""
    schema = copy.deepcopy(generated)
    paths: dict[str, dict[str, Any]] = schema.setdefault("paths", {})
    for route in flat_routes(routes):
        if not route.methods:
            continue
        path = _openapi_path(route.path)
        if path not in paths and _plain_entry(path)[0] == UNDESCRIBED:
            continue  # FastAPI's /docs and /openapi.json, the /v2 catch-all that answers 404
        operations = paths.setdefault(path, {})
        documented = [op for method, op in operations.items() if method in HTTP_METHODS]
        for method in sorted(m.lower() for m in route.methods if m != "HEAD"):
            if method not in operations:
                operations[method] = copy.deepcopy(documented[0]) if documented else _plain(path, method)
                if documented:
                    operations[method]["operationId"] = f"{operations[method].get('operationId', path)}_{method}"
    if settings.disable_token_authorization:
        paths.pop("/token", None)
    management = _management(settings)
    for path, operations in paths.items():
        for method, operation in operations.items():
            if method not in HTTP_METHODS:
                continue
            _finish(path, method, operation, management.get((method, path)))
    return schema


def _openapi_path(path: str) -> str:
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)  # Starlette's {url_path:path} is OpenAPI's {url_path}


def _plain_entry(path: str) -> tuple[str, tuple[int, ...], dict[str, Any], dict[str, Any] | None]:
    """(summary, error statuses, error body, request body content) of a plain route."""
    for pattern, summary, statuses, error_body, body in PLAIN:
        if re.search(pattern, path):
            return summary, statuses, error_body, body
    return UNDESCRIBED, (), TS_ERROR, None


def _plain(path: str, method: str) -> dict[str, Any]:
    names = re.findall(r"\{(\w+)\}", path)
    return {
        "summary": _plain_entry(path)[0],
        "operationId": re.sub(r"\W+", "_", f"{method}{path}").strip("_"),
        "parameters": [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names],
        "responses": {"200": {"description": "Successful answer"}},
    }


def _finish(path: str, method: str, operation: dict[str, Any],
            management: tuple[tuple[int, ...], list[dict[str, Any]]] | None) -> None:  # fmt: skip
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)
    if management is not None:
        statuses, query = management
        error_body = TS_ERROR
        known = {p["name"] for p in operation.get("parameters", [])}
        operation["parameters"] = [*operation.get("parameters", []), *(q for q in query if q["name"] not in known)]
    else:
        _, statuses, error_body, body = _plain_entry(path)
        if body is not None and method in ("post", "put"):
            required = any("required" in media["schema"] for media in body.values())  # a JSON body with fields
            operation["requestBody"] = {"required": required, "content": copy.deepcopy(body)}
    for status in sorted(statuses):
        if str(status) in responses:
            continue
        if status in (202, 206):
            responses[str(status)] = {"description": STATUS_TEXT[status], "content": _json(_STATUS_BODY)}
        else:
            responses[str(status)] = {"description": STATUS_TEXT[status], "content": _json(error_body)}
    if path == "/metrics":
        responses["200"] = {"description": "Prometheus text exposition format",
                            "content": {"text/plain": {"schema": {"type": "string"}}}}  # fmt: skip
        operation["parameters"] = [{"name": "name[]", "in": "query", "required": False, "description":
                                    "Only these metrics (repeat the parameter)", "style": "form", "explode": True,
                                    "schema": {"type": "array", "items": {"type": "string"}}}]  # fmt: skip
    if path == "/ping":
        unhealthy = 'Unhealthy: a startup model has no ready worker ({"status": "Unhealthy"})'
        responses["500"] = {"description": unhealthy, "content": _json(_STATUS_BODY)}
    if path == "/health":  # vLLM's: no body either way
        responses["200"] = {"description": "Healthy (no body)"}
        responses["503"] = {"description": "Unhealthy: a startup model has no ready worker (no body)"}


_STATUS_BODY = {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}
