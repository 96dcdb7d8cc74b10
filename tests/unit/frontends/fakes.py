"""A fake ModelRegistry (the design's interface) and helpers to call the apps in-process with httpx.

The fake records every call and answers from small tables, so the frontends are tested without workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from serve.batching import InferenceRequest, InferenceResponse
from serve.config import Settings
from serve.errors import ModelNotFound
from serve.frontends import DataPlane
from serve.frontends.http import TokenAuth, create_inference_app, create_management_app, create_metrics_app
from serve.metrics import ServerMetrics

Responder = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


async def echo(request: InferenceRequest) -> InferenceResponse:
    return InferenceResponse(body=b'{"ok": true}')


class FakeRegistry:
    """Models `mnist` (versions 1.0 default, 2.0) and `bert` (1.0); `responder` answers submits."""

    def __init__(self) -> None:
        self.versions = {"mnist": ["1.0", "2.0"], "bert": ["1.0"]}
        self.calls: list[tuple[Any, ...]] = []
        self.healthy = True
        self.responder: Responder = echo
        self.message = "ok"  # what management calls answer

    def _check(self, name: str, version: str | None) -> None:
        if name not in self.versions:
            raise ModelNotFound(f"Model not found: {name}")
        if version is not None and version not in self.versions[name]:
            raise ModelNotFound(f"Model version: {version} does not exist for model: {name}")

    async def submit(self, name: str, version: str | None, request: InferenceRequest) -> InferenceResponse:
        self.calls.append(("submit", name, version, request))
        self._check(name, version)
        return await self.responder(request)

    async def register(self, url: str, **options: Any) -> str:
        self.calls.append(("register", url, options))
        return self.message

    async def unregister(self, name: str, version: str | None = None) -> str:
        self.calls.append(("unregister", name, version))
        self._check(name, version)
        return f'Model "{name}" unregistered'

    async def scale(self, name: str, version: str | None, min_worker: int | None, max_worker: int | None,
                    synchronous: bool = False, timeout: float | None = None) -> str:  # fmt: skip
        self.calls.append(("scale", name, version, min_worker, max_worker, synchronous, timeout))
        self._check(name, version)
        return self.message

    def set_default(self, name: str, version: str) -> str:
        self.calls.append(("set_default", name, version))
        self._check(name, version)
        return f'Default version successfully updated for model "{name}" to "{version}"'

    def describe(self, name: str, version: str | None = None, all_versions: bool = False) -> list[dict]:
        self.calls.append(("describe", name, version, all_versions))
        self._check(name, version)
        versions = self.versions[name] if all_versions else [version or self.versions[name][0]]
        return [{"modelName": name, "modelVersion": v, "workers": []} for v in versions]

    async def describe_custom(self, name: str, version: str | None) -> list[dict]:
        self.calls.append(("describe_custom", name, version))
        self._check(name, version)
        return [{"modelName": name, "customizedMetadata": {"hello": "world"}}]

    def list_models(self, limit: int = 100, next_page_token: int = 0) -> dict:
        self.calls.append(("list_models", limit, next_page_token))
        return {"models": [{"modelName": n, "modelUrl": f"{n}.mar"} for n in sorted(self.versions)]}

    def health(self) -> tuple[bool, dict]:
        return self.healthy, {}

    def model_config(self, name: str, version: str | None = None) -> dict[str, Any]:
        self._check(name, version)
        return {}


@dataclasses.dataclass
class Server:
    """The three apps over one fake registry, and a client per app."""

    registry: FakeRegistry
    metrics: ServerMetrics
    auth: TokenAuth
    inference: httpx.AsyncClient
    management: httpx.AsyncClient
    metrics_api: httpx.AsyncClient


def settings(tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(key_file=tmp_path / "key_file.json", **{"disable_token_authorization": True, **overrides})


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def run(test: Callable[[Server], Awaitable[None]], tmp_path: Path, registry: FakeRegistry | None = None,
        **overrides: Any) -> None:  # fmt: skip
    """Build the apps with Settings(**overrides) and run `test(server)` with a 10 s bound."""
    config = settings(tmp_path, **overrides)
    registry = registry or FakeRegistry()
    metrics = ServerMetrics(hostname="testhost")
    dataplane = DataPlane(registry, metrics, config)
    auth = TokenAuth.from_settings(config)

    async def main() -> None:
        async with (
            client(create_inference_app(dataplane, config, auth)) as inference,
            client(create_management_app(dataplane, config, auth)) as management,
            client(create_metrics_app(metrics, config)) as metrics_api,
        ):
            await test(Server(registry, metrics, auth, inference, management, metrics_api))

    asyncio.run(asyncio.wait_for(main(), timeout=10))
