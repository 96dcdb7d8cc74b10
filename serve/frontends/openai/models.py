"""`GET /v1/models` and `GET /v1/models/{id}`: OpenAI's model list, which shares its path with KServe v1's.

KServe v1 answers the same two paths (`{"models": [names]}`, `{"name", "ready"}`; routers/kserve_v1.py), so one
answer serves both clients: OpenAI's fields plus KServe's,

    {"object": "list", "data": [{"id", "object": "model", "created", "owned_by": "serve"}], "models": [names]}
    {"id", "object": "model", "created", "owned_by": "serve", "name", "ready"}

Both SDKs ignore the fields they do not know. Errors on these two paths keep KServe v1's `{"error": message}`
(the OpenAI SDK raises the same NotFoundError / AuthenticationError from it). Every registered model is listed
(serve cannot tell a generative model from its archive); `created` is when the server first listed it.
"""

from __future__ import annotations

import time
from typing import Any

from serve.frontends.dataplane import DataPlane
from serve.frontends.oip import core

OWNER = "serve"
_CREATED: dict[str, int] = {}


def names(dataplane: DataPlane) -> list[str]:
    out: list[str] = []
    token = 0
    while True:
        page = dataplane.list_models(100, token)
        out += [m["modelName"] for m in page["models"]]
        if "nextPageToken" not in page:
            return out
        token = int(page["nextPageToken"])


def entry(name: str) -> dict[str, Any]:
    created = _CREATED.setdefault(name, int(time.time()))
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


def listing(dataplane: DataPlane, only: str | None = None) -> dict[str, Any]:
    """All models, or only `only` (under /predictions/{m}/v1/models), which must exist (ModelNotFound: 404)."""
    if only is not None:
        core.model_ready(dataplane, only)
        found = [only]
    else:
        found = names(dataplane)
    return {"object": "list", "data": [entry(n) for n in found], "models": found}


def one(dataplane: DataPlane, name: str) -> dict[str, Any]:
    return {**entry(name), "name": name, "ready": core.model_ready(dataplane, name)}
