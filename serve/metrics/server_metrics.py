"""`ServerMetrics`: the server's Prometheus metrics under TorchServe's names and labels, in its own registry.

Each instance owns a `prometheus_client.CollectorRegistry` (tests run several servers in one process). Names and
labels are TorchServe's (spec section 3):

    Requests2XX / Requests4XX / Requests5XX    {Level="Host", Hostname}          one per HTTP response, any port
    ts_inference_requests_total                 {model_name, model_version, hostname}
    ts_inference_latency_microseconds           {model_name, model_version, hostname}   sum of end-to-end time
    ts_queue_latency_microseconds               {model_name, model_version, hostname}   sum of time in queue
    QueueTime (ms, last wait)                   {Level="Host", Hostname}
    WorkerThreadTime (ms, last batch)           {Level="Host", Hostname}  the batch's time in the frontend, less
                                                the worker's time running the handler
    WorkerLoadTime (ms)                         {WorkerName="W-<worker id>-<model>_<version>", Level="Host",
                                                Hostname}  worker process started -> model loaded, per worker
    HandlerTime (ms, last batch)                {ModelName, Level="Model", Hostname}
    PredictionTime (ms, last batch)             {ModelName, Level="Model", Hostname}  the worker's call of the
                                                handler, as TorchServe's ts/service.py measures it
    CPUUtilization, MemoryUsed, ...             {Level="Host", Hostname}  host gauges, once `watch_system` was
                                                called (system_metrics.py: every metric_time_interval)
    any metric a handler records                its dimensions + Hostname (backend_metrics.py)
    GPUUtilization / GPUMemoryUtilization / GPUMemoryUsed   {Level="Host", DeviceId, Hostname}   per GPU, once
                                                `watch_gpus` was called (gpu_metrics.py); absent without GPUs

Ours in addition (TorchServe has none of these; pain point 15 asks for them):

    ts_inference_errors_total                   {model_name, model_version, hostname, code}  answers >= 400
    ts_inference_latency_seconds                histogram of end-to-end time, same labels as the requests
    ts_batch_size                               histogram of the batches sent to workers
    ts_queue_depth                              gauge: requests waiting in the model's queue
    ts_model_workers                            gauge, state="live" | "total"
    ts_worker_restarts_total                    {model_name, model_version, hostname, reason}  workers replaced:
                                                reason="memory" (over its memory limit), "unresponsive" (no
                                                heartbeat), "response_timeout", "died" (exited on its own)
    ts_worker_memory_bytes                      {model_name, model_version, hostname, worker_id}  RSS per worker,
                                                read at scrape time (worker_metrics.py)

Decisions:
- TorchServe's counters whose names lack `_total` (Requests2XX, the two `*_microseconds`) keep their exact sample
  names, so existing dashboards and queries work: prometheus-client would append `_total` to a Counter, so they
  are held as gauges that only grow, and the page (text_format.py, TorchServe's simpleclient 0.9.0 text) types
  them `counter`, with no `_created` series and TorchServe's `{Level="Host",Hostname="h",}` label sets.
- `model_version` is "default" when the request named no version, as in TorchServe.
- `configure` applies a metrics_config (default_metrics.py: TorchServe's default metrics it does not declare are
  left off the page) and, in metrics_mode log or legacy, the metrics log every update is also written to
  (metrics_log.py).
- What every request records is tallied in plain numbers and made into families when the page is collected
  (request_tallies.py); the rest are prometheus-client metrics. One collector yields all of the server's own
  families in the order above, so the page reads as before.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import Collector

from serve.metrics import text_format
from serve.metrics.backend_metrics import BackendMetrics
from serve.metrics.default_metrics import DefaultMetrics
from serve.metrics.gpu_metrics import GpuCollector
from serve.metrics.metrics_log import MetricsLog
from serve.metrics.model_statistics import InferenceStatistics
from serve.metrics.request_tallies import MODEL_LABELS, RequestTallies
from serve.metrics.system_metrics import SystemMetrics
from serve.metrics.worker_metrics import Reader, WorkerMemoryCollector

# metrics_mode=legacy serves only these (TorchServe's three ts_* counters)
LEGACY_NAMES = ("ts_inference_requests_total", "ts_inference_latency_microseconds", "ts_queue_latency_microseconds")
# gauges that only grow: typed `counter` on the page (see Decisions)
COUNTER_GAUGES = frozenset({"Requests2XX", "Requests4XX", "Requests5XX", "ts_inference_latency_microseconds",
                            "ts_queue_latency_microseconds"})  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _help(kind: str, unit: str) -> str:
    return f"Torchserve prometheus {kind} metric with unit: {unit}"


class ServerMetrics:
    """Records the server's metrics; `render()` gives the Prometheus text page."""

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname or socket.gethostname()
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self._tallies = RequestTallies(self.hostname)
        # not registered themselves: _ServerFamilies yields them between the tallied families, in the page's order
        self._errors = Counter("ts_inference_errors", "Inference answers with a status >= 400, by status code",
                               MODEL_LABELS + ("code",), registry=None)  # fmt: skip
        self._handler_time = Gauge("HandlerTime", _help("gauge", "Milliseconds"),
                                   ("ModelName", "Level", "Hostname"), registry=None)  # fmt: skip
        self._prediction_time = Gauge("PredictionTime", _help("gauge", "Milliseconds"),
                                      ("ModelName", "Level", "Hostname"), registry=None)  # fmt: skip
        self._worker_thread_time = Gauge("WorkerThreadTime", _help("gauge", "Milliseconds"), ("Level", "Hostname"),
                                         registry=None)  # fmt: skip
        self._worker_load_time = Gauge("WorkerLoadTime", _help("gauge", "Milliseconds"),
                                       ("WorkerName", "Level", "Hostname"), registry=None)  # fmt: skip
        self._batch = Histogram("ts_batch_size", "Requests per batch sent to a worker", MODEL_LABELS,
                                buckets=BATCH_BUCKETS, registry=None)  # fmt: skip
        self._workers = Gauge("ts_model_workers", "Worker processes of the model: live ones and all of them",
                              MODEL_LABELS + ("state",), registry=None)  # fmt: skip
        self._restarts = Counter("ts_worker_restarts", "Workers replaced, by why: memory, unresponsive, "
                                 "response_timeout, died", MODEL_LABELS + ("reason",), registry=None)  # fmt: skip
        reg.register(_ServerFamilies(self._tallies, [
            "Requests2XX", "Requests4XX", "Requests5XX", "ts_inference_requests", "ts_inference_latency_microseconds",
            "ts_queue_latency_microseconds", self._errors, "ts_inference_latency_seconds", "QueueTime",
            self._worker_thread_time, self._worker_load_time, self._handler_time, self._prediction_time, self._batch,
            "ts_queue_depth", self._workers, self._restarts,
        ]))  # fmt: skip
        self._worker_memory = WorkerMemoryCollector(self.hostname)
        reg.register(self._worker_memory)
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}  # (family, labels) -> child, see _child
        self._backend = BackendMetrics(reg, self.hostname)
        # BaseHandler records HandlerTime itself: its records land in the same family as handler_time()
        self._backend.adopt("HandlerTime", "gauge", ("ModelName", "Level", "Hostname"), self._handler_time)
        self._backend.adopt("PredictionTime", "gauge", ("ModelName", "Level", "Hostname"), self._prediction_time)
        self.defaults = DefaultMetrics()  # which of TorchServe's default metrics are shown (configure)
        self.log: MetricsLog | None = None  # metrics_mode log / legacy: every update is also written here
        self._system: SystemMetrics | None = None
        self._gpus: GpuCollector | None = None
        self.statistics = InferenceStatistics()  # Triton's statistics extension (model_statistics.py), not on /metrics

    def watch_gpus(self, uuids: Sequence[str], collector: GpuCollector | None = None) -> None:
        """Report the GPU gauges of these GPUs (by UUID; DeviceId = position, the workers' gpu id) on every page
        from now on; none for an empty list. `collector` replaces the nvidia-smi one (tests)."""
        if self._gpus is not None:
            self.registry.unregister(self._gpus)
        self._gpus = collector or (GpuCollector(uuids, self.hostname) if uuids else None)
        if self._gpus is not None:
            self.registry.register(self._gpus)

    def configure(self, defaults: DefaultMetrics, log: MetricsLog | None = None) -> None:
        """Show only the default metrics `defaults` keeps; write every update to `log` too (None: no log)."""
        self.defaults, self.log = defaults, log

    def watch_system(self, system: SystemMetrics | None) -> None:
        """Report the host gauges of `system` (system_metrics.py) on every page from now on (None: stop)."""
        if self._system is not None:
            self.registry.unregister(self._system)
        self._system = system
        if system is not None:
            self.registry.register(system)

    def gpu_families(self) -> Iterable[Any]:
        """The GPU gauges now (runs nvidia-smi at most every few seconds); none without watched GPUs."""
        return self._gpus.collect() if self._gpus is not None else ()

    def http_response(self, status: int) -> None:
        """Requests2XX / 4XX / 5XX: one per HTTP response on any listener (1xx and 3xx count as 2XX)."""
        self._tallies.response(status)
        if self.log is not None:
            self.log.response(status)

    def request(self, model: str, version: str, status: int, latency_s: float) -> None:
        """One inference answered (or failed) after `latency_s` seconds end to end."""
        key = (model, version or "default")
        self._tallies.request(key, latency_s)
        if status >= 400:
            self._errors.labels(*key, self.hostname, str(status)).inc()
        if self.log is not None:
            self.log.request(model, version, latency_s)

    def queue_latency(self, model: str, version: str, seconds: float) -> None:
        self._tallies.queue_latency((model, version or "default"), seconds)
        if self.log is not None:
            self.log.queue(model, version, seconds)

    def handler_time(self, model: str, version: str, ms: float) -> None:
        """The worker's time running the handler on a batch: HandlerTime and PredictionTime (TorchServe's carry no
        version label; `version` is accepted for a uniform call)."""
        self._child(self._handler_time, model, "Model", self.hostname).set(ms)
        self._child(self._prediction_time, model, "Model", self.hostname).set(ms)
        if self.log is not None:
            self.log.handler(model, ms)

    def worker_thread_time(self, ms: float) -> None:
        """WorkerThreadTime: a batch's time in the frontend, less the worker's time running the handler."""
        self._child(self._worker_thread_time, "Host", self.hostname).set(ms)
        if self.log is not None:
            self.log.default("WorkerThreadTime", (("Level", "Host"),), ms)

    def worker_load_time(self, worker_name: str, ms: float) -> None:
        """WorkerLoadTime of the worker named `worker_name` (TorchServe's W-<port>-<model>_<version>)."""
        self._child(self._worker_load_time, worker_name, "Host", self.hostname).set(ms)
        if self.log is not None:
            self.log.default("WorkerLoadTime", (("WorkerName", worker_name), ("Level", "Host")), ms)

    def batch(self, model: str, version: str, size: int) -> None:
        self._child(self._batch, model, version or "default", self.hostname).observe(size)

    def queue_depth(self, model: str, version: str, depth: int) -> None:
        self._tallies.queue_depth((model, version or "default"), depth)

    def _child(self, family: Any, *labels: str) -> Any:
        """`family.labels(*labels)`, looked up once: `.labels()` takes a lock and builds its key on every call, and
        these are recorded for every batch. The label values are a registered model's name and version, so the
        cache stays as small as the families."""
        key = (family, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def workers(self, model: str, version: str, live: int, total: int) -> None:
        labels = (model, version or "default", self.hostname)
        self._workers.labels(*labels, "live").set(live)
        self._workers.labels(*labels, "total").set(total)

    def worker_restart(self, model: str, version: str, reason: str) -> None:
        """A worker of the version was replaced: `reason` memory, unresponsive, response_timeout or died."""
        self._restarts.labels(model, version or "default", self.hostname, reason).inc()

    def watch_worker_memory(self, model: str, version: str, worker_id: str, reader: Reader) -> None:
        """Report `reader()` (the worker's RSS in bytes) as ts_worker_memory_bytes on every page from now on."""
        self._worker_memory.watch(model, version or "default", worker_id, reader)

    def forget_worker_memory(self, model: str, version: str, worker_id: str, reader: Reader) -> None:
        """Stop reporting the worker's memory, unless another reader (its successor's) replaced `reader`."""
        self._worker_memory.forget(model, version or "default", worker_id, reader)

    def remove_model(self, model: str, version: str) -> None:
        """Forget a model version's gauges (its queue and workers), so an unregistered model stops showing."""
        labels = (model, version or "default", self.hostname)
        self._tallies.forget_depth((model, version or "default"))
        for state in ("live", "total"):  # prometheus-client ignores label sets it does not hold
            self._workers.remove(*labels, state)
        self._worker_memory.forget(model, version or "default")
        self.statistics.forget(model, version)

    def backend_metrics(self, model: str, version: str, records: Sequence[Mapping[str, Any]]) -> None:
        """Records a worker's handler produced (MetricsCache records as dicts); they carry their own ModelName."""
        self._backend.record(records)
        if self.log is not None:
            self.log.records(records)

    def render(self, names: Iterable[str] | None = None) -> tuple[bytes, str]:
        """The Prometheus text page (format 0.0.4 as TorchServe writes it: text_format.py) and its content type.

        `names` keeps only the families with those names, or with a sample of that name
        (`ts_inference_requests_total`, `ts_batch_size_bucket`), like TorchServe's `?name[]=` filter.
        With GPUs watched this runs nvidia-smi (at most every few seconds): call it off the event loop.
        """
        source: Collector = self.registry if names is None else _Filtered(self.registry, set(names))
        if self.defaults.dropped:
            source = _Filtered(source, self.defaults.family_names(), keep=False)
        counters = COUNTER_GAUGES | self._backend.counters()
        return text_format.render(source.collect(), counters), text_format.CONTENT_TYPE


class _ServerFamilies(Collector):
    """The server's own families in the page's order: a tallied one (named) or a prometheus-client metric."""

    def __init__(self, tallies: RequestTallies, order: list[Any]) -> None:
        self._tallies = tallies
        self._order = order

    def describe(self) -> Iterable[Any]:  # the registry reserves these names: a handler metric cannot take one
        return self.collect()

    def collect(self) -> Iterable[Any]:
        for source in self._order:
            if isinstance(source, str):
                yield self._tallies.family(source)
            else:
                yield from source.collect()


class _Filtered(Collector):
    """The registry's families that match a set of names (`keep=False`: those that do not)."""

    def __init__(self, registry: Collector, names: Set[str], keep: bool = True) -> None:
        self._registry = registry
        self._names = names
        self._keep = keep

    def collect(self) -> Iterable[Any]:
        for family in self._registry.collect():
            if (family.name in self._names or any(s.name in self._names for s in family.samples)) == self._keep:
                yield family
