"""MicroBatching really runs: micro-batches through three thread pools, results in order, errors raised, and the
`timed` decorator recording TorchServe's ts_handler_* metrics."""

from __future__ import annotations

import threading
import time

import pytest

from serve.compat.ts.handler_utils import MicroBatching
from serve.compat.ts.handler_utils.timer import timed
from serve.worker.context import Context


class Recorder:
    """A handler whose stages record which thread ran them and on which micro-batch."""

    def __init__(self, fail_on=None):
        self.calls, self.fail_on, self.explain = [], fail_on, False
        self.lock = threading.Lock()

    def _note(self, stage, data):
        with self.lock:
            self.calls.append((stage, threading.current_thread().name, list(data)))

    def preprocess(self, data):
        self._note("preprocess", data)
        time.sleep(0.01)
        return [row["body"] for row in data]

    def inference(self, data):
        self._note("inference", data)
        if self.fail_on in data:
            raise ValueError(f"bad value {self.fail_on}")
        return [x * 10 for x in data]

    def postprocess(self, data):
        self._note("postprocess", data)
        return [x + 1 for x in data]

    def _is_describe(self):
        return False

    def _is_explain(self):
        return self.explain


@pytest.fixture
def context(tmp_path):
    ctx = Context("mb", str(tmp_path), None, 8, None, "0.1", model_yaml_config={"handler": {"profile": True}})
    ctx.begin_batch({i: f"r{i}" for i in range(7)})
    return ctx


def test_micro_batches_flow_through_thread_pools_and_come_back_in_order(context):
    handler = Recorder()
    mb = MicroBatching(handler, micro_batch_size=2, parallelism={"preprocess": 3, "postprocess": 2})
    try:
        out = mb([{"body": i} for i in range(7)], context)
        assert out == [i * 10 + 1 for i in range(7)]
        assert sorted(len(c[2]) for c in handler.calls if c[0] == "preprocess") == [1, 2, 2, 2]
        threads = {c[1] for c in handler.calls}
        assert all(name.startswith("micro-batching-") for name in threads)  # never the caller's thread
        assert [len(mb.thread_groups[s]) for s in ("preprocess", "inference", "postprocess")] == [3, 1, 2]
        assert [r.name for r in context.metrics.records()] == ["HandlerTime"]
        mb.parallelism = {"preprocess": 1}
        assert len(mb.thread_groups["preprocess"]) == 1
    finally:
        mb.shutdown()
    assert all(not w.thread.is_alive() for group in mb.thread_groups.values() for w in group)


def test_an_error_in_a_stage_fails_the_batch_instead_of_hanging(context):
    mb = MicroBatching(Recorder(fail_on=3), micro_batch_size=1)
    try:
        with pytest.raises(ValueError, match="bad value 3"):
            mb([{"body": i} for i in range(5)], context)
        assert mb([{"body": 1}], context) == [11]  # the pipeline still works afterwards
    finally:
        mb.shutdown()


def test_bad_parallelism_is_refused():
    mb = MicroBatching(Recorder())
    try:
        with pytest.raises(ValueError, match="'predict' is not one of the stages"):
            mb.parallelism = {"predict": 2}
        with pytest.raises(ValueError, match="positive integer"):
            mb.parallelism = {"inference": 0}
    finally:
        mb.shutdown()


class Timed:
    def __init__(self, context):
        self.context = context

    @timed
    def preprocess(self, data):
        return data


def test_timed_records_ts_handler_metrics_only_when_profiling(context):
    assert Timed(context).preprocess([1]) == [1]
    record = context.metrics.records()[0]
    assert record.name == "ts_handler_preprocess" and record.unit == "Milliseconds" and record.value >= 0
    context.model_yaml_config = {"handler": {"profile": False}}
    context.metrics.clear()
    Timed(context).preprocess([1])
    assert context.metrics.records() == []
