"""The model-config YAML subset against hand-written expectations for TorchServe's documented configs, against
PyYAML's safe_load where it is installed (the reader TorchServe's backend uses), and its errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from serve.archive import load_model_config, parse_model_config
from serve.errors import ArchiveError

try:
    import yaml
except ImportError:  # PyYAML is only an indirect test dependency; the hand-written expectations always run
    yaml = None

needs_pyyaml = pytest.mark.skipif(yaml is None, reason="PyYAML is not installed")

# docs/configuration.md, "config model": frontend keys, torchrun, pippy and handler sections
TORCHSERVE_DOC = """\
# TS frontend parameters settings
minWorkers: 1 # default: #CPU or #GPU
maxWorkers: 1 # default: #CPU or #GPU
batchSize: 1 # default: 1
maxBatchDelay: 100 # default: 100 msec
responseTimeout: 120 # default: 120 sec
deviceType: cpu # cpu, gpu, neuron
deviceIds: [0,1,2,3] # gpu device ids allocated to this model.
parallelType: pp # pp: pipeline parallel; pptp: tensor+pipeline parallel. Default: empty

# See torchrun parameters: https://pytorch.org/docs/stable/elastic/run.html
torchrun:
  nproc-per-node: 2

# TS backend parameters settings
pippy:
  input_names: ['input_ids'] # input arg names to the model; this is required for FX tracing
  model_type: "HF" # set the model type to HF if you are using Huggingface model
  rpc_timeout: 1800
  num_worker_threads: 512 #set number of threads for rpc worker init.

handler:
  max_length: 80 # max length of tokens for tokenizer in the handler
"""
TORCHSERVE_DOC_EXPECTED = {
    "minWorkers": 1,
    "maxWorkers": 1,
    "batchSize": 1,
    "maxBatchDelay": 100,
    "responseTimeout": 120,
    "deviceType": "cpu",
    "deviceIds": [0, 1, 2, 3],
    "parallelType": "pp",
    "torchrun": {"nproc-per-node": 2},
    "pippy": {"input_names": ["input_ids"], "model_type": "HF", "rpc_timeout": 1800, "num_worker_threads": 512},
    "handler": {"max_length": 80},
}

# examples/pt2 and examples/large_models/vllm: nested maps, True, lists of quoted strings at a deeper indent
PT2_VLLM = """\
minWorkers: 1
maxWorkers: 1
pt2:
  compile:
    enable: True
    backend: inductor
    mode: max-autotune
handler:
    model_path: "/home/ubuntu/models--meta-llama--Meta-Llama-3-8B-Instruct/snapshots/e1945c40"
    vllm_engine_config:
        max_num_seqs: 16
        max_model_len: 250
        served_model_name:
            - "meta-llama/Meta-Llama-3-8B-Instruct"
            - "llama3"
"""
PT2_VLLM_EXPECTED = {
    "minWorkers": 1,
    "maxWorkers": 1,
    "pt2": {"compile": {"enable": True, "backend": "inductor", "mode": "max-autotune"}},
    "handler": {
        "model_path": "/home/ubuntu/models--meta-llama--Meta-Llama-3-8B-Instruct/snapshots/e1945c40",
        "vllm_engine_config": {
            "max_num_seqs": 16,
            "max_model_len": 250,
            "served_model_name": ["meta-llama/Meta-Llama-3-8B-Instruct", "llama3"],
        },
    },
}

MIXED = """\
---
handler:
  image_size: 32
  mean: [0.485, 0.456,
         0.406]   # a flow list continued on the next line
  labels:
  - cat            # a list at the key's own indentation
  - 'dog # not a comment'
  - "tab\\there \\u00e9"
  crops:
    - name: center
      size: {h: 224, w: 224}
    - name: corner
      size: ~
  it's: don't quote
  url: http://host:8080/path#frag
  empty:
  nested_lists:
    - - 1
      - 2
    - []
pt2: {backend: inductor, mode: "reduce-overhead", opts: {a: [1, {b: c}]}}
"""
MIXED_EXPECTED = {
    "handler": {
        "image_size": 32,
        "mean": [0.485, 0.456, 0.406],
        "labels": ["cat", "dog # not a comment", "tab\there \u00e9"],
        "crops": [{"name": "center", "size": {"h": 224, "w": 224}}, {"name": "corner", "size": None}],
        "it's": "don't quote",
        "url": "http://host:8080/path#frag",
        "empty": None,
        "nested_lists": [[1, 2], []],
    },
    "pt2": {"backend": "inductor", "mode": "reduce-overhead", "opts": {"a": [1, {"b": "c"}]}},
}

DOCUMENTS = [(TORCHSERVE_DOC, TORCHSERVE_DOC_EXPECTED), (PT2_VLLM, PT2_VLLM_EXPECTED), (MIXED, MIXED_EXPECTED)]


@pytest.mark.parametrize("text, expected", DOCUMENTS, ids=["torchserve-doc", "pt2-vllm", "mixed"])
def test_documents(text: str, expected: dict) -> None:
    assert parse_model_config(text) == expected


@needs_pyyaml
@pytest.mark.parametrize("text, expected", DOCUMENTS, ids=["torchserve-doc", "pt2-vllm", "mixed"])
def test_documents_match_pyyaml(text: str, expected: dict) -> None:
    assert parse_model_config(text) == yaml.safe_load(text)


SCALARS = {
    "1": 1, "-7": -7, "+3": 3, "1_000": 1000, "0x1F": 31, "0b101": 5, "010": 8, "0": 0, "1:20": 80,
    "1.5": 1.5, ".5": 0.5, "1.": 1.0, "1:30.5": 90.5, "1.0e+3": 1000.0, "-.inf": -math.inf, ".inf": math.inf,
    "true": True, "True": True, "TRUE": True, "yes": True, "on": True, "no": False, "Off": False, "false": False,
    "~": None, "null": None, "Null": None, "": None,
    "09": "09", "0o10": "0o10", "cpu": "cpu", "1.2.3": "1.2.3", "'007'": "007", '"yes"': "yes", "'a''b'": "a'b",
    '"\\x41\\t"': "A\t", "v1": "v1", "a b  c": "a b  c", "-x": "-x",
}  # fmt: skip


@pytest.mark.parametrize("text, value", SCALARS.items(), ids=list(SCALARS))
def test_scalars(text: str, value: object) -> None:
    assert parse_model_config(f"k: {text}\n") == {"k": value}
    if yaml is not None:
        assert yaml.safe_load(f"k: {text}\n") == {"k": value}  # the expectation is PyYAML's


def test_nan_and_keys_resolve_like_values() -> None:
    assert math.isnan(parse_model_config("k: .nan")["k"])
    assert parse_model_config("0: cat\n2: dog\ntrue: x\n'3': y\n") == {0: "cat", 2: "dog", True: "x", "3": "y"}


def test_deliberate_differences_from_pyyaml() -> None:
    # PyYAML leaves these strings (YAML 1.1 floats need a dot and a signed exponent); we read them as floats
    assert parse_model_config("lr: 1e-5\nb: 1.0e5\nc: -.5\n") == {"lr": 1e-5, "b": 1e5, "c": -0.5}
    # PyYAML makes a datetime.date; a model-config value stays JSON-serialisable here
    assert parse_model_config("d: 2024-01-31") == {"d": "2024-01-31"}
    with pytest.raises(ArchiveError, match="duplicate key 'a'"):  # PyYAML keeps the last one silently
        parse_model_config("a: 1\nb: 2\na: 3\n")


def test_empty_documents() -> None:
    assert parse_model_config("") == {}
    assert parse_model_config("# nothing\n\n   \n") == {}
    assert parse_model_config("---\n...\nignored: after the end marker") == {}


ERRORS = {
    "a: &x 1\nb: *x\n": "line 1: anchors",
    "a: *x\n": "line 1: aliases",
    "a: !!int 3\n": "line 1: tags",
    "a: |\n  text\n": "line 1: block scalars",
    "a: >\n  text\n": "line 1: block scalars",
    "a: 1\n---\nb: 2\n": "line 2: several YAML documents",
    "a:\n\tb: 1\n": "line 2: a tab in the indentation",
    "a: 1\n  b: 2\n": "line 2: unexpected indentation after the value on line 1",
    "a: first line\n  continued\n": "multi-line plain values are not supported",
    "a: 'open\n": "line 1: unterminated 'quoted' string",
    'a: "bad \\q"\n': "unknown escape",
    "a: [1, 2\nb: 3\n": "line 1: expected ',' or ']'",
    "a: [1, 2\n": "line 1: unterminated flow collection",
    "a: {x: 1] }\n": "expected ',' or '}'",
    "a: b: c\n": "mapping values are not allowed here",
    "a: - x\n": "a list item cannot follow",
    "- a\n- b\n": "must be a mapping of keys to values, not list",
    "just a string\n": "must be a mapping of keys to values, not str",
    "? complex\n: key\n": "complex mapping keys",
    "a:\n  - x\n  y: 1\n": "line 3: unexpected 'y: 1' \\(check its indentation\\)",
    "a: 1\nb\n": "line 2: expected 'key: value' here, found 'b'",
    "k: -\n": "a list item cannot follow",
    "a: [1, 2] trailing\n": "unexpected 'trailing' after a value",
    "{a: 1}: 2\n": "unexpected ': 2' after a value",
    "%YAML 1.2\n---\na: 1\n": "line 1: directives",
}


@pytest.mark.parametrize("text, message", ERRORS.items(), ids=list(range(len(ERRORS))))
def test_errors(text: str, message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        parse_model_config(text)


def test_load_model_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\xef\xbb\xbfbatchSize: 8\n")  # a UTF-8 BOM is tolerated
    assert load_model_config(path) == {"batchSize": 8}
    path.write_text("a: [1,\n")
    with pytest.raises(ArchiveError, match=r"model-config 'config\.yaml' line 1: unterminated"):
        load_model_config(path)
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(ArchiveError, match="is not UTF-8"):
        load_model_config(path)
    with pytest.raises(ArchiveError, match="cannot read model-config"):
        load_model_config(tmp_path / "absent.yaml")
