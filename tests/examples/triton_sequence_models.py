"""Stand-ins for the two models Triton's sequence and decoupled examples call, as serve archives (function handlers
that answer v2 outputs):

    build_sequence_store(store, src)      # simple_sequence and repeat_int32, in `store`

- `simple_sequence` (sequenceBatching: true, two workers): Triton's qa "sequence" model, INPUT INT32 [-1, 1] ->
  OUTPUT INT32 [-1, 1]. What its examples check: the first request of a sequence (START) answers its input + 1,
  every later one its input. The handler keeps each sequence in its worker's memory (opened at the start header,
  dropped at the end header) and refuses a request of a sequence it did not open, so a request routed to another
  worker than its sequence's fails the example.
- `repeat_int32` (decoupled): IN INT32 [n], DELAY UINT32 [n] (ms), WAIT UINT32 [1] -> one response per element
  of IN, OUT INT32 [1], each after its DELAY (times the model-config's `handler.delay_scale`, 0.01 in the tests so
  the example's ten 1 s delays take 0.1 s), the handler yielding one chunk per response.
"""

from __future__ import annotations

from pathlib import Path

from serve.archive import package

SEQUENCE = """
OPEN = {}  # sequence id -> requests answered, in this worker


def handle(data, context):
    if data is None:
        return None
    out = []
    for idx, row in enumerate(data):
        sequence_id = context.get_sequence_id(idx)
        start = context.get_request_header(idx, context.header_key_sequence_start) == "true"
        end = context.get_request_header(idx, context.header_key_sequence_end) == "true"
        if start:
            OPEN[sequence_id] = 0
        elif sequence_id not in OPEN:
            raise ValueError(f"sequence {sequence_id} was not started in this worker")
        OPEN[sequence_id] += 1
        spec = row["body"]["inputs"][0]
        values = [int(v) + (1 if start else 0) for v in spec["data"]]
        if end:
            del OPEN[sequence_id]
        out.append({"outputs": [{"name": "OUTPUT", "datatype": "INT32", "shape": spec["shape"], "data": values}]})
    return out
"""

REPEAT = """
import time


def handle(data, context):
    if data is None:
        return None
    if len(data) != 1:
        raise ValueError("repeat_int32 answers one request at a time (batchSize: 1)")
    return repeat(data[0]["body"], float(context.model_yaml_config["handler"].get("delay_scale", 1.0)))


def repeat(body, scale):
    spec = {i["name"]: i for i in body["inputs"]}
    for value, delay in zip(spec["IN"]["data"], spec["DELAY"]["data"]):
        time.sleep(delay / 1000 * scale)
        yield [{"outputs": [{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [value]}]}]
    time.sleep(spec["WAIT"]["data"][0] / 1000 * scale)
"""

SEQUENCE_CONFIG = """minWorkers: 2
maxWorkers: 2
batchSize: 4
maxBatchDelay: 5
sequenceBatching: true
maxNumSequence: 8
maxSequenceJobQueueSize: 4
handler:
  inputs: [{name: INPUT, datatype: INT32, shape: [-1, 1]}]
  outputs: [{name: OUTPUT, datatype: INT32, shape: [-1, 1]}]
"""

REPEAT_CONFIG = """minWorkers: 1
maxWorkers: 1
batchSize: 1
handler:
  delay_scale: 0.01
  inputs: [{name: IN, datatype: INT32, shape: [-1]}, {name: DELAY, datatype: UINT32, shape: [-1]},
           {name: WAIT, datatype: UINT32, shape: [1]}]
  outputs: [{name: OUT, datatype: INT32, shape: [1]}]
"""


def build_sequence_store(store: Path, src: Path) -> None:
    for name, code, config in (("simple_sequence", SEQUENCE, SEQUENCE_CONFIG), ("repeat_int32", REPEAT, REPEAT_CONFIG)):
        folder = src / name
        folder.mkdir(parents=True)
        (folder / f"{name}.py").write_text(code)
        (folder / "model-config.yaml").write_text(config)
        package(name, "1", f"{folder / name}.py:handle", config_file=folder / "model-config.yaml", export_path=store,
                progress=False)  # fmt: skip
