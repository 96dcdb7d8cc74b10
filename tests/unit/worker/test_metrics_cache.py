"""MetricsCache: TorchServe's add_* methods, units under TorchServe's long names, records in order."""

from __future__ import annotations

import sys
import threading

import pytest

from serve.worker import MetricsCache


def test_records_keep_order_units_and_dimensions():
    cache = MetricsCache("mnist", {0: "r0", 1: "r1"})
    cache.add_time("HandlerTime", 3.25, None, "ms")
    cache.add_counter("CacheHit", 1, idx=1, dimensions={"Cache": "lru"})
    cache.add_size("Payload", 2, unit="kB")
    cache.add_percent("GPUUtil", 50.0)
    cache.add_metric("Tokens", 17, "count", idx="req-9", metric_type="histogram")
    names = [(r.name, r.unit, r.metric_type) for r in cache.records()]
    assert names == [
        ("HandlerTime", "Milliseconds", "gauge"),
        ("CacheHit", "Count", "counter"),
        ("Payload", "Kilobytes", "gauge"),
        ("GPUUtil", "Percent", "gauge"),
        ("Tokens", "Count", "histogram"),
    ]
    first, hit = cache.records()[:2]
    assert first.request_id == "r0,r1"  # a batch-level metric belongs to the whole batch, as in TorchServe
    assert hit.request_id == "r1" and dict(hit.dimensions) == {"ModelName": "mnist", "Level": "Model", "Cache": "lru"}
    assert cache.records()[-1].request_id == "req-9"


def test_log_line_is_torchserves_format():
    cache = MetricsCache("mnist")
    cache.add_time("HandlerTime", 3.25)
    assert str(cache.records()[0]) == "HandlerTime.Milliseconds:3.25|#ModelName:mnist,Level:Model"


def test_clear_empties_and_records_is_a_copy():
    cache = MetricsCache("m")
    cache.add_counter("A", 1)
    cache.records().clear()
    assert len(cache.records()) == 1
    cache.clear()
    assert cache.records() == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.add_time("T", 1.0, unit="minutes"), r"unit of a time metric must be one of \['ms', 's', 'us'\]"),
        (lambda c: c.add_size("S", 1.0, unit="TB"), "unit of a size metric must be one of"),
        (lambda c: c.add_metric("M", "3", "count"), "value must be an int or float, got str '3'"),
        (lambda c: c.add_metric("M", 3, "count", metric_type="summary"), "metric_type 'summary' is not one of"),
    ],
)
def test_bad_metrics_say_what_is_wrong(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(MetricsCache("m"))


def test_drain_under_concurrent_records_loses_and_repeats_nothing():
    """Handler threads record (both the add_* path and a cached metric's) while another drains, as the engine's thread
    and the worker's writer do in continuous mode: every record comes out of exactly one drain."""
    cache = MetricsCache("m")
    tokens = cache.add_metric_to_cache("Tokens", "count", ["model_name"], "histogram")
    threads, per_thread = 4, 3000

    def record(t: int) -> None:
        for i in range(per_thread):
            value = t * per_thread + i
            if i % 2:
                tokens.add_or_update(value, ["m"])
            else:
                cache.add_counter("Seen", value)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, inside the append and the drain too
    try:
        workers = [threading.Thread(target=record, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        drained: list[float] = []
        for _ in range(100_000):  # bounded; the recorders finish long before
            drained += [r.value for r in cache.drain()]
            if not any(w.is_alive() for w in workers):
                break
        for w in workers:
            w.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    drained += [r.value for r in cache.drain()]
    assert sorted(drained) == list(range(threads * per_thread))
    assert cache.drain() == [] and cache.records() == []


def test_record_to_dict_is_what_the_worker_sends():
    cache = MetricsCache("m")
    cache.add_metric("Tokens", 17, "count", idx="r1", metric_type="histogram")
    (record,) = cache.drain()
    assert record.to_dict() == {"name": "Tokens", "value": 17, "unit": "Count", "metric_type": "histogram",
                                "dimensions": [["ModelName", "m"], ["Level", "Model"]], "request_id": "r1"}  # fmt: skip
