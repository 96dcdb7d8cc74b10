"""FastAPI dependencies: the collaborators a router needs, read from `app.state` (never from globals).

The app factories put `dataplane`, `settings`, `auth` and `metrics` on `app.state`, so a test builds an app with
a fake registry behind a real DataPlane. They are `async def`: FastAPI runs a plain `def` dependency in a thread
pool, which costs more than the whole request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import Request

from serve.frontends.dataplane import DataPlane
from serve.frontends.http.auth import MANAGEMENT, TokenAuth


async def dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane


DataPlaneDep = Annotated[DataPlane, Depends(dataplane)]


async def require_management_key(request: Request) -> None:
    """The management routers' guard (the inference routes check their key inline, see predictions.py)."""
    auth: TokenAuth = request.app.state.auth
    auth.check(MANAGEMENT, request.headers.get("authorization"))
