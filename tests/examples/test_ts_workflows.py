"""TorchServe's Workflows/nmt_transformers_pipeline example, its spec and handler files unchanged, on a real server.

Both of its workflows: dual translation (parallel: pre_processing feeds nmt_en_de and nmt_en_fr, whose answers
meet in aggregate_func, which reads them by node name) and re-translation (sequential: nmt_en_de ->
prep_intermediate_input -> nmt_de_en -> post_processing). The .war files are made with serve's workflow-archiver
with the flags of the example's README, served with `--workflow-store`, registered with POST /workflows and run
with `curl -T`-style PUTs to /wfpredict, four at once as the README does (the spec's batch-size 4).

The three translation models (the README's TransformerEn2De/En2Fr/De2En.mar, fairseq downloads) are stand-ins
that answer as the nmt_transformer handler does, `{"input": text, "<lang>_output": translation}`, with a
"translation" that reverses the words. Reference: the example's functions called by hand, in the DAG's order, on
what TorchServe's DagExecutor gives each node (the request's rows for the start node, the predecessor's answer as
`body`, several predecessors by name), the stand-in's translation computed in the test.

Also here: a function node's error fails only its own request (with the node's name and the handler's status)
while requests beside it are answered, unregistering removes the nodes' models, and no node model reaches the
config snapshot.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from serve.cli.workflow_archiver import main as workflow_archiver_main
from tests.examples.ts_files import archive, example_files
from tests.integration.server import ServerProcess

TIMEOUT = 300  # one request on a loaded 2-core machine, not a target

# The stand-in translator: TorchServe's nmt_transformer handler's answer shape, a word-reversing "translation".
TRANSLATOR = """
OUTPUT = {key!r}


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        text = row.get("data") or row.get("body")
        if isinstance(text, (bytes, bytearray)):
            text = text.decode()
        out.append({{"input": text, OUTPUT: " ".join(reversed(text.split()))}})
    return out
"""
MODELS = {
    "TransformerEn2De": "german_output",
    "TransformerEn2Fr": "french_output",
    "TransformerDe2En": "english_output",
}

# A workflow of our own for the error cases: `check` refuses "bad" (a 400: json.JSONDecodeError) and crashes its
# worker on "die"; `shout` is a model node.
CHECK_SPEC = """models:
    retry-attempts: 0
    shout:
      url: TransformerEn2De.mar
dag:
  check: [shout]
"""
CHECK_HANDLER = """
import json
import os


def check(data, context):
    if data is None:
        return None
    text = bytes(data[0].get("body")).decode()
    if text == "bad":
        json.loads("{not json")
    if text == "die":
        os._exit(3)
    return [text]
"""


def translate(text: str) -> str:
    return " ".join(reversed(text.split()))


def stand_in(model: str, text: str) -> bytes:
    """The stand-in model's answer to `text`, as the worker writes it (indented JSON)."""
    return json.dumps({"input": text, MODELS[model]: translate(text)}, indent=2).encode()


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"wf_ref_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def workflow_archiver(*argv: str) -> None:
    """`workflow-archiver` with a user's arguments, in this process (its module entry point as a subprocess is
    tests/unit/archive/test_war.py's: a Python start per archive costs a second or more on a loaded machine)."""
    assert workflow_archiver_main(list(argv)) == 0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_workflows")
    src = example_files(base, "Workflows/nmt_transformers_pipeline")
    store, wf_store = base / "model_store", base / "wf_store"
    store.mkdir()
    wf_store.mkdir()
    for model, key in MODELS.items():
        handler = base / f"{model}.py"
        handler.write_text(TRANSLATOR.format(key=key))
        archive(store, "--model-name", model, "--version", "1.0", "--handler", f"{handler}:handle")
    # the README's commands
    for name, kind in (("nmt_wf_dual", "dual"), ("nmt_wf_re", "re")):
        workflow_archiver("-f", "--workflow-name", name,
                          "--spec-file", str(src / f"nmt_workflow_{kind}translation.yaml"),
                          "--handler", str(src / f"nmt_workflow_handler_{kind}translation.py"),
                          "--export-path", f"{wf_store}/")  # fmt: skip
    (base / "check.yaml").write_text(CHECK_SPEC)
    (base / "check_handler.py").write_text(CHECK_HANDLER)
    workflow_archiver("--workflow-name", "checked", "--spec-file", str(base / "check.yaml"), "--handler",
                      str(base / "check_handler.py"), "--export-path", str(wf_store))  # fmt: skip
    (base / "broken.yaml").write_text(CHECK_SPEC.replace("TransformerEn2De.mar", "missing.mar"))
    workflow_archiver("--workflow-name", "broken", "--spec-file", str(base / "broken.yaml"), "--handler",
                      str(base / "check_handler.py"), "--export-path", str(wf_store))  # fmt: skip
    # snapshots on (no --ncs): the workflows' models must stay out of them
    server = ServerProcess(base / "run", store, "--workflow-store", str(wf_store), "--disable-token-auth",
                           "--enable-model-api", log_location=base / "run" / "logs").start()  # fmt: skip
    try:
        with httpx.Client(timeout=TIMEOUT) as client:
            yield server, client, src
    finally:
        server.stop()


def register(server: ServerProcess, client: httpx.Client, war: str) -> None:
    r = client.post(f"{server.management}/workflows", params={"url": war})
    assert r.status_code == 200, r.text
    assert r.json() == {"status": f"Workflow {war.removesuffix('.war')} has been registered and scaled successfully."}


def predict_four(server: ServerProcess, client: httpx.Client, name: str, bodies: list[bytes]) -> list[httpx.Response]:
    """The README's four concurrent `curl -T` requests."""
    url = f"{server.inference}/wfpredict/{name}"
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: client.put(url, content=body), bodies))


def samples(src: Path) -> list[bytes]:
    return [(src / "model_input" / f"sample{i}.txt").read_bytes() for i in range(1, 5)]


def test_dual_translation_parallel_pipeline(served) -> None:
    server, client, src = served
    register(server, client, "nmt_wf_dual.war")
    ref = load(src / "nmt_workflow_handler_dualtranslation.py")
    bodies = [(src / "model_input" / "sample.txt").read_bytes(), *samples(src)]
    answers = predict_four(server, client, "nmt_wf_dual", bodies)
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        # by hand: the start node gets the request's rows, each model the start node's answer as `body`, the
        # aggregate node both answers by node name
        (text,) = ref.pre_processing([{"body": bytearray(body)}], None)
        en_de, en_fr = stand_in("TransformerEn2De", text.decode()), stand_in("TransformerEn2Fr", text.decode())
        (expected,) = ref.aggregate_func([{"nmt_en_de": bytearray(en_de), "nmt_en_fr": bytearray(en_fr)}], None)
        assert answer.json() == expected
        assert expected["german_translation"] == translate(body.decode())  # the reference did translate


def test_retranslation_sequential_pipeline(served) -> None:
    server, client, src = served
    register(server, client, "nmt_wf_re.war")
    ref = load(src / "nmt_workflow_handler_retranslation.py")
    bodies = samples(src)
    for body, answer in zip(bodies, predict_four(server, client, "nmt_wf_re", bodies), strict=True):
        assert answer.status_code == 200, answer.text
        (german,) = ref.prep_intermediate_input(
            [{"body": bytearray(stand_in("TransformerEn2De", body.decode()))}], None
        )
        (expected,) = ref.post_processing([{"body": bytearray(stand_in("TransformerDe2En", german))}], None)
        assert answer.json() == expected
        assert expected["english_re_translation"] == " ".join(body.decode().split())


def test_management_routes(served) -> None:
    server, client, _ = served
    if "nmt_wf_re" not in names(server, client):  # run alone, not after the re-translation test
        register(server, client, "nmt_wf_re.war")
    described = client.get(f"{server.management}/workflows/nmt_wf_re").json()
    assert described == [{"workflowName": "nmt_wf_re", "workflowUrl": "nmt_wf_re.war", "minWorkers": 1,
                          "maxWorkers": 1, "batchSize": 4, "maxBatchDelay": 100,
                          "workflowDag": "{nmt_en_de=[prep_intermediate_input], prep_intermediate_input=[nmt_de_en], "
                                         "nmt_de_en=[post_processing]}"}]  # fmt: skip
    model = client.get(f"{server.management}/models/nmt_wf_re__nmt_en_de").json()[0]
    assert (model["batchSize"], model["maxBatchDelay"], model["minWorkers"]) == (4, 100, 1)  # the spec's settings
    assert client.get(f"{server.management}/models/nmt_wf_re__post_processing").json()[0]["batchSize"] == 1
    listed = [m["modelName"] for m in client.get(f"{server.management}/models").json()["models"]]
    assert "nmt_wf_re__nmt_en_de" in listed and "nmt_wf_re__post_processing" not in listed  # functions: no url
    again = client.post(f"{server.management}/workflows", params={"url": "nmt_wf_re.war"})
    assert again.status_code == 409 and again.json()["type"] == "ConflictStatusException"
    snapshots = sorted((server.workdir / "logs" / "config").glob("*-snapshot.cfg"))
    assert snapshots and "nmt_wf_re__" not in snapshots[-1].read_text()  # a restart brings back no half workflow

    gone = client.delete(f"{server.management}/workflows/nmt_wf_re")
    assert gone.status_code == 200 and gone.json() == {"status": 'Workflow "nmt_wf_re" unregistered'}
    assert client.get(f"{server.management}/models/nmt_wf_re__nmt_en_de").status_code == 404
    missing = client.put(f"{server.inference}/wfpredict/nmt_wf_re", content=b"Hello")
    assert missing.status_code == 404 and missing.json()["type"] == "WorkflowNotFoundException"
    assert "nmt_wf_re" not in names(server, client)


def names(server: ServerProcess, client: httpx.Client) -> list[str]:
    return [w["workflowName"] for w in client.get(f"{server.management}/workflows").json()["workflows"]]


def test_a_node_that_cannot_register_removes_the_others(served) -> None:
    server, client, _ = served
    r = client.post(f"{server.management}/workflows", params={"url": "broken.war"})
    assert r.status_code == 404, r.text
    message = r.json()["message"]
    assert message.startswith("Workflow broken has failed to register. Failures: ")
    assert "Workflow Node broken__shout failed to register" in message and "missing.mar" in message
    assert client.get(f"{server.management}/models/broken__check").status_code == 404  # registered, then removed
    assert "broken" not in names(server, client)
    bad = client.post(f"{server.management}/workflows", params={"url": "nmt_wf_dual.war", "workflow_name": "a/b"})
    assert bad.status_code == 400


def test_a_node_error_fails_only_its_request(served) -> None:
    server, client, _ = served
    register(server, client, "checked.war")
    answers = predict_four(server, client, "checked", [b"good one", b"bad", b"another good"])
    assert [a.status_code for a in answers] == [200, 400, 200]
    assert answers[0].json() == {"input": "good one", "german_output": "one good"}
    assert "Workflow node check failed" in answers[1].json()["message"]
    assert "JSONDecodeError" in answers[1].json()["message"]
    died = client.put(f"{server.inference}/wfpredict/checked", content=b"die")
    assert died.status_code >= 500 and "Workflow node check failed" in died.json()["message"]
    # the worker is restarted; the next request is answered
    deadline = time.monotonic() + TIMEOUT
    for _ in range(3000):  # bounded: the restart waits a backoff, a second or so on an idle machine
        after = client.put(f"{server.inference}/wfpredict/checked", content=b"fine")
        if after.status_code == 200 or time.monotonic() > deadline:
            break
        assert after.status_code == 503, after.text
        time.sleep(0.1)
    assert after.json() == {"input": "fine", "german_output": "fine"}
