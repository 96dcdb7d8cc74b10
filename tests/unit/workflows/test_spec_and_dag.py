"""The workflow spec and DAG against TorchServe's rules: the example of docs/workflows.md read with the defaults and
overrides of WorkFlow.java, TorchServe's examples' specs, and each refused spec or DAG naming what is wrong."""

from __future__ import annotations

import pytest

from serve.errors import InvalidInput
from serve.workflows.dag import Dag, handler_functions
from serve.workflows.spec import NodeSettings, parse_spec
from tests.examples.ts_files import TORCHSERVE

# docs/workflows.md's example, spacing and comments as there
DOCS_SPEC = """models:
    #global model params
    min-workers: 1
    max-workers: 4
    batch-size: 3
    max-batch-delay : 5000
    retry-attempts : 3
    timeout-ms : 5000
    m1:
       url : model1.mar #local or public URI
       min-workers: 1   #override the global params
       max-workers: 2
       batch-size: 4

    m2:
       url : model2.mar

    m3:
       url : model3.mar
       batch-size: 3

    m4:
      url : model4.mar

dag:
  pre_processing : [m1]
  m1 : [m2]
  m2 : [m3]
  m3 : [m4]
  m4 : [postprocessing]
"""


def test_docs_example_settings_and_overrides() -> None:
    spec = parse_spec(DOCS_SPEC)
    assert spec.defaults == NodeSettings(1, 4, 3, 5000, 3, 5000)
    assert spec.models["m1"].url == "model1.mar"
    assert spec.models["m1"].settings == NodeSettings(1, 2, 4, 5000, 3, 5000)
    assert spec.models["m2"].settings == spec.defaults
    assert spec.function_settings() == NodeSettings(1, 1, 1, 0, 3, 5000)  # TorchServe's function node
    assert spec.dag_text() == "{pre_processing=[m1], m1=[m2], m2=[m3], m3=[m4], m4=[postprocessing]}"
    dag = Dag.build(spec, {"pre_processing", "postprocessing"})
    assert dag.order == ["pre_processing", "m1", "m2", "m3", "m4", "postprocessing"]
    assert dag.functions == {"pre_processing", "postprocessing"} and dag.leaves == ["postprocessing"]


def test_torchserve_defaults() -> None:
    spec = parse_spec("models:\n  m:\n    url: m.mar\ndag:\n  m: []\n")
    assert spec.models["m"].settings == NodeSettings(1, 1, 1, 50, 1, 10000)  # WorkFlow.java's field defaults
    assert Dag.build(spec, set()).order == ["m"]


@pytest.mark.parametrize(
    "folder,spec_file,handler,order,joins",
    [
        ("nmt_transformers_pipeline", "nmt_workflow_dualtranslation.yaml", "nmt_workflow_handler_dualtranslation.py",
         ["pre_processing", "nmt_en_de", "nmt_en_fr", "aggregate_func"],
         {"aggregate_func": ["nmt_en_de", "nmt_en_fr"]}),
        ("nmt_transformers_pipeline", "nmt_workflow_retranslation.yaml", "nmt_workflow_handler_retranslation.py",
         ["nmt_en_de", "prep_intermediate_input", "nmt_de_en", "post_processing"], {}),
    ],
)  # fmt: skip
def test_torchserve_example_specs(folder, spec_file, handler, order, joins) -> None:
    src = TORCHSERVE / "Workflows" / folder
    spec = parse_spec((src / spec_file).read_text(), spec_file)
    assert spec.defaults == NodeSettings(1, 1, 4, 100, 5, 300000)
    dag = Dag.build(spec, handler_functions((src / handler).read_text()))
    assert dag.order == order
    assert {n: p for n, p in dag.predecessors.items() if len(p) > 1} == joins


def test_handler_functions_are_read_not_run() -> None:
    source = "import sys\nsys.exit(3)\n\ndef f(data, context):\n    pass\n\nasync def g(d, c): ...\nclass C: pass\n"
    assert handler_functions(source) == {"f", "g"}
    with pytest.raises(InvalidInput, match="line 1"):
        handler_functions("def (", "h.py")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("dag:\n  a: []\n", "'models:'"),
        ("models:\n  m:\n    url: m.mar\n", "'dag:'"),
        ("models:\n  m:\n    min-workers: 1\ndag:\n  m: []\n", "models: m: 'url'"),
        ("models:\n  m: m.mar\ndag:\n  m: []\n", "models: m: a model is a mapping"),
        ("models:\n  batch-size: 0\ndag:\n  a: []\n", "batch-size must be an integer >= 1, got 0"),
        ("models:\n  timeout-ms: fast\ndag:\n  a: []\n", "timeout-ms must be an integer"),
        ("models:\n  m:\n    url: m.mar\n    batchsize: 2\ndag:\n  m: []\n", "unknown key(s) ['batchsize']"),
        ("models:\n  min-workers: 3\n  max-workers: 2\ndag:\n  a: []\n", "max-workers (2) is less than min-workers"),
        ("models: {}\ndag:\n  a: b\n", "dag: a must list its successor nodes"),
        ("models: {}\ndag: [\n", "Invalid workflow specification"),
    ],
)
def test_refused_specs_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_spec(text, "wf.yaml")
    assert needle in str(raised.value)


@pytest.mark.parametrize(
    "dag,functions,needle",
    [
        ("a: [a]", {"a"}, "node a lists itself"),
        ("a: [m]\nb: [m]", {"a", "b"}, "exactly one start node"),
        ("s: [a]\na: [b]\nb: [a]", {"s", "a", "b"}, "cycle through ['a', 'b']"),
        ("s: [nowhere]", {"s"}, "node nowhere is neither a model of 'models:' nor a function of h.py"),
    ],
)
def test_refused_dags_say_what_is_wrong(dag: str, functions: set[str], needle: str) -> None:
    text = "models:\n  m:\n    url: m.mar\ndag:\n" + "".join(f"  {line}\n" for line in dag.splitlines())
    with pytest.raises(InvalidInput) as raised:
        Dag.build(parse_spec(text), functions, "h.py")
    assert needle in str(raised.value)
