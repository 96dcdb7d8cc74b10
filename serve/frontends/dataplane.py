"""`DataPlane`: the protocol-free core every frontend calls (REST now, gRPC in issue 7).

It checks what does not depend on the wire format (the model API switch, the ranges of numeric parameters,
TorchServe's clamping of list pagination), forwards to the model registry, and records the inference metrics.
Frontends only parse their protocol, call one method here and map exceptions with `frontends.errors`.

Decisions:
- Numeric parameters out of range (batch_size < 1, negative workers or delays) are 400 InvalidInput; TorchServe
  silently falls back to defaults for some and answers 500 for a negative min_worker.
- `ts_inference_requests_total` counts the requests that reached a model: an unknown model name is not counted
  (it would let any client create label values), a full queue or a model with no worker is.
- A scale `timeout` of -1 (TorchServe's "wait forever") is passed as None: the registry bounds every wait.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import InvalidInput, ModelApiDisabled, ModelNotFound, ResponseTooLarge
from serve.frontends.errors import error_info
from serve.metrics import ServerMetrics

if TYPE_CHECKING:
    from serve.config import Settings
    from serve.workflows import WorkflowManager

MAX_LIST_LIMIT = 100
RUNTIMES = ("python", "python3")


MODEL_API_DISABLED = "Requested method is not allowed, please refer to API document."  # TorchServe's 405


class ModelRegistry(Protocol):
    """What the dataplane needs of `serve.management.registry.ModelRegistry` (the design's interface)."""

    async def register(self, url: str, *, model_name: str | None = None, handler: str | None = None,
                       runtime: str | None = None, batch_size: int | None = None, max_batch_delay: int | None = None,
                       initial_workers: int | None = None, synchronous: bool = True,
                       response_timeout: int | None = None, startup_timeout: int | None = None) -> str: ...  # fmt: skip
    async def unregister(self, name: str, version: str | None = None) -> str: ...
    async def scale(self, name: str, version: str | None, min_worker: int | None, max_worker: int | None,
                    synchronous: bool = False, timeout: float | None = None) -> str: ...  # fmt: skip
    def set_default(self, name: str, version: str) -> str: ...
    def describe(self, name: str, version: str | None = None, all_versions: bool = False) -> list[dict]: ...
    async def describe_custom(self, name: str, version: str | None) -> list[dict]: ...
    def list_models(self, limit: int = 100, next_page_token: int = 0) -> dict: ...
    async def submit(self, name: str, version: str | None, request: InferenceRequest) -> InferenceResponse: ...
    def health(self) -> tuple[bool, dict]: ...
    def model_config(self, name: str, version: str | None = None) -> dict[str, Any]: ...
    def model_dir(self, name: str, version: str | None = None) -> Path: ...


class DataPlane:
    """One instance per server; the REST and gRPC frontends share it."""

    workflows: WorkflowManager | None = None  # TorchServe's workflows (serve/workflows); the server sets it

    def __init__(self, registry: ModelRegistry, metrics: ServerMetrics, settings: Settings) -> None:
        self.registry = registry
        self.metrics = metrics
        self.settings = settings

    # --- inference ---------------------------------------------------------------------------------------------

    def ping(self) -> bool:
        """True when every model has a live worker (the registry decides); `/ping` answers 500 otherwise."""
        healthy, _details = self.registry.health()
        return healthy

    async def predict(self, model: str, version: str | None, request: InferenceRequest) -> InferenceResponse:
        """Run one request through the model's queue; metrics are recorded once the answer is complete."""
        start = time.perf_counter()
        request.requested_version = version or ""
        try:
            response = await self.registry.submit(model, version, request)
        except ModelNotFound:
            raise
        except Exception as exc:
            self.metrics.request(model, version or "", error_info(exc).status, time.perf_counter() - start)
            raise
        chunks = response.chunks
        if chunks is None:
            self.metrics.request(model, version or "", response.status, time.perf_counter() - start)
        else:  # a streamed answer is complete only after its last chunk, as TorchServe measures it
            response.chunks = self._measured(chunks, model, version or "", response.status, start)
        return response

    async def explain(self, model: str, version: str | None, request: InferenceRequest) -> InferenceResponse:
        request.explain = True
        request.headers["explain"] = "True"
        return await self.predict(model, version, request)

    def check_response_size(self, size: int) -> None:
        """For an answer a frontend encoded itself (v1, v2): ResponseTooLarge when its `size` bytes, as they are sent
        (before any content coding), are over max_response_size. The worker checks the answers sent as it wrote
        them (/predictions); gRPC servers check each message they send."""
        limit = self.settings.max_response_size
        if size > limit:
            raise ResponseTooLarge(f"the response of {size} bytes exceeds max_response_size ({limit} bytes); raise "
                                   "max_response_size in config.properties")  # fmt: skip

    async def _measured(self, chunks: AsyncIterator[bytes], model: str, version: str, status: int,
                        start: float) -> AsyncIterator[bytes]:  # fmt: skip
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            self.metrics.request(model, version, status, time.perf_counter() - start)

    # --- management --------------------------------------------------------------------------------------------

    async def register(self, url: str, *, model_name: str | None = None, handler: str | None = None,
                       runtime: str | None = None, batch_size: int | None = None, max_batch_delay: int | None = None,
                       initial_workers: int | None = None, synchronous: bool = True,
                       response_timeout: int | None = None, startup_timeout: int | None = None) -> str:  # fmt: skip
        self._require_model_api("register a model")
        if not url:
            raise InvalidInput("Parameter url is required.")
        runtime = runtime or None  # `runtime=` is unset, as an empty field is over gRPC
        if runtime is not None and runtime not in RUNTIMES:
            raise InvalidInput(f"Invalid RuntimeType value: {runtime}; use one of {list(RUNTIMES)}")
        _at_least("batch_size", batch_size, 1)
        _at_least("max_batch_delay", max_batch_delay, 0)
        _at_least("initial_workers", initial_workers, 0)
        _at_least("response_timeout", response_timeout, 1)
        _at_least("startup_timeout", startup_timeout, 1)
        return await self.registry.register(
            url, model_name=model_name or None, handler=handler or None, runtime=runtime,
            batch_size=batch_size, max_batch_delay=max_batch_delay, initial_workers=initial_workers,
            synchronous=synchronous, response_timeout=response_timeout, startup_timeout=startup_timeout,
        )  # fmt: skip

    async def unregister(self, name: str, version: str | None = None) -> str:
        self._require_model_api("unregister a model")
        return await self.registry.unregister(name, version)

    async def scale(self, name: str, version: str | None, min_worker: int | None = None,
                    max_worker: int | None = None, synchronous: bool = False,
                    timeout: float | None = None) -> str:  # fmt: skip
        """TorchServe's defaults: min_worker 1, max_worker = min_worker."""
        low = 1 if min_worker is None else min_worker
        high = low if max_worker is None else max_worker
        _at_least("min_worker", low, 0)
        if high < low:
            raise InvalidInput(f"max_worker cannot be less than min_worker. (min_worker={low}, max_worker={high})")
        if timeout is not None and timeout < 0:
            timeout = None
        return await self.registry.scale(name, version, low, high, synchronous=synchronous, timeout=timeout)

    def set_default(self, name: str, version: str) -> str:
        return self.registry.set_default(name, version)

    async def describe(self, name: str, version: str | None = None, *, all_versions: bool = False,
                       customized: bool = False) -> list[dict]:  # fmt: skip
        """`customized` asks the handler (describe_handle); TorchServe ignores it for `all`."""
        if customized and not all_versions:
            return await self.registry.describe_custom(name, version)
        return self.registry.describe(name, version, all_versions)

    def list_models(self, limit: int = MAX_LIST_LIMIT, next_page_token: int = 0) -> dict:
        """A page of models. Unlike TorchServe, which clamps them silently, a `limit` outside 1..100 or a negative
        `next_page_token` is a 400 (InvalidInput); a token past the last model is an empty page."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInput(f"Invalid limit: {limit}; it must be an integer from 1 to {MAX_LIST_LIMIT}")
        _at_least("next_page_token", next_page_token, 0)
        return self.registry.list_models(limit, next_page_token)

    def _require_model_api(self, what: str) -> None:
        if not self.settings.enable_model_api:
            raise ModelApiDisabled(  # TorchServe's REST message, then its gRPC one: clients match on either
                f"{MODEL_API_DISABLED} Model API disabled: cannot {what}. Start the server with "
                "--enable-model-api (or enable_model_api=true in config.properties) to allow it."
            )


def _at_least(name: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise InvalidInput(f"Invalid {name}: {value}; it must be an integer >= {minimum}")
