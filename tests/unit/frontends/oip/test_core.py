"""The v2 core and the REST routes (v2 and KServe v1) in-process, over the fake registry; framing checked against
tritonclient.http's own request builder and response parser."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import tritonclient.http as triton

from serve.batching import InferenceRequest, InferenceResponse
from serve.frontends.oip import core
from tests.unit.frontends.fakes import FakeRegistry, run

CONFIG = {"handler": {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
                      "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]}}  # fmt: skip


class Registry(FakeRegistry):
    """The fake plus the archive's model-config and READY workers for `mnist`."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.config = CONFIG if config is None else config
        self.responder = doubler

    def model_config(self, name: str, version: str | None) -> dict[str, Any]:
        self._check(name, version)
        return self.config

    def describe(self, name: str, version: str | None = None, all_versions: bool = False) -> list[dict]:
        entries = super().describe(name, version, all_versions)
        for entry in entries:
            entry["workers"] = [{"status": "READY"}] if name == "mnist" else [{"status": "STARTING"}]
        return entries


def last_job(registry: FakeRegistry) -> InferenceRequest:
    return [call for call in registry.calls if call[0] == "submit"][-1][3]


async def doubler(request: InferenceRequest) -> InferenceResponse:
    """A v2-aware handler: every input doubled, the first named y, the others <input>_out."""
    body = json.loads(request.inputs["body"])
    outputs = [{"name": "y" if n == 0 else i["name"] + "_out", "datatype": i["datatype"], "shape": i["shape"],
                "data": [2 * v for v in i["data"]]} for n, i in enumerate(body["inputs"])]  # fmt: skip
    return InferenceResponse(body=json.dumps({"outputs": outputs}).encode())


def test_health_and_server_metadata(tmp_path):
    async def check(s):
        assert (await s.inference.get("/v2/health/live")).json() == {"live": True}
        assert (await s.inference.get("/v2/health/ready")).json() == {"ready": True}
        meta = (await s.inference.get("/v2")).json()
        assert meta["name"] == "serve" and "binary_tensor_data" in meta["extensions"]
        s.registry.healthy = False
        r = await s.inference.get("/v2/health/ready")
        assert r.status_code == 503 and "error" in r.json()

    run(check, tmp_path, Registry())


def test_model_metadata_and_ready(tmp_path):
    async def check(s):
        meta = (await s.inference.get("/v2/models/mnist")).json()
        assert meta == {"name": "mnist", "versions": ["1.0"], "platform": "serve_python",
                        "inputs": CONFIG["handler"]["inputs"], "outputs": CONFIG["handler"]["outputs"]}  # fmt: skip
        assert (await s.inference.get("/v2/models/mnist/versions/2.0")).json()["versions"] == ["2.0"]
        assert (await s.inference.get("/v2/models/mnist/ready")).json() == {"name": "mnist", "ready": True}
        r = await s.inference.get("/v2/models/bert/ready")
        assert r.status_code == 503 and "READY" in r.json()["error"]
        r = await s.inference.get("/v2/models/nope")
        assert r.status_code == 404 and r.json() == {"error": "Model not found: nope"}
        r = await s.inference.get("/v2/models/mnist/versions/9.0/ready")
        assert r.status_code == 404
        r = await s.inference.get("/v2/systemsharedmemory/status")  # shared memory stays out (README)
        assert r.status_code == 404 and "no v2 route for GET '/v2/systemsharedmemory/status'" in r.json()["error"]

    run(check, tmp_path, Registry())


def test_default_metadata_without_config(tmp_path):
    async def check(s):
        meta = (await s.inference.get("/v2/models/mnist")).json()
        assert meta["inputs"] == [{"name": "input0", "datatype": "INT64", "shape": [-1]}]
        assert meta["outputs"] == [{"name": "output0", "datatype": "FP32", "shape": [-1]}]

    run(check, tmp_path, Registry({"handler": {"dtype": "int64"}}))


def test_json_infer_and_what_the_handler_gets(tmp_path):
    async def check(s):
        request = {
            "id": "r1",
            "inputs": [{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], [3, 4]]}],
        }
        r = await s.inference.post("/v2/models/mnist/infer", json=request)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        y = {"name": "y", "datatype": "INT64", "shape": [2, 2], "data": [2, 4, 6, 8]}
        assert r.json() == {"model_name": "mnist", "model_version": "1.0", "id": "r1", "outputs": [y]}
        job = last_job(s.registry)
        assert job.decode and job.content_types == {"body": "application/json"}
        assert job.headers["x-serve-protocol"] == "v2"
        assert json.loads(job.inputs["body"]) == {
            "id": "r1", "inputs": [{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]}],
            "outputs": [],
        }  # fmt: skip

    run(check, tmp_path, Registry())


def test_binary_infer_framed_as_tritonclient_does(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    flags = np.array([True, False, True])

    async def check(s):
        inputs = [triton.InferInput("x", [2, 3], "FP32"), triton.InferInput("b", [3], "BOOL")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(flags)
        body, json_size = triton.InferenceServerClient.generate_request_body(inputs, request_id="7")
        r = await s.inference.post("/v2/models/mnist/versions/2.0/infer", content=body,
                                   headers={"Inference-Header-Content-Length": str(json_size)})  # fmt: skip
        assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
        result = triton.InferenceServerClient.parse_response_body(
            r.content, header_length=int(r.headers["inference-header-content-length"])
        )
        assert result.get_response()["model_version"] == "2.0" and result.get_response()["id"] == "7"
        outs = result.get_response()["outputs"]
        assert [o["parameters"]["binary_data_size"] for o in outs] == [24, 3]
        np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
        np.testing.assert_array_equal(result.as_numpy("b_out"), flags)

        # one output asked for in JSON although binary is the request default
        wanted = [triton.InferRequestedOutput("y", binary_data=False)]
        body, json_size = triton.InferenceServerClient.generate_request_body(inputs[:1], outputs=wanted)
        r = await s.inference.post("/v2/models/mnist/infer", content=body,
                                   headers={"Inference-Header-Content-Length": str(json_size)})  # fmt: skip
        assert "inference-header-content-length" not in r.headers
        assert r.json()["outputs"][0]["data"] == (x * 2).reshape(-1).tolist()

    run(check, tmp_path, Registry())


def test_infer_errors_are_v2_bodies(tmp_path):
    async def failing(request):
        return InferenceResponse(status=507, body=b'{"code": 507, "type": "MemoryError", "message": "out of memory"}')

    async def check(s):
        ok = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]}
        cases = [
            ("/v2/models/nope/infer", ok, 404, "Model not found"),
            ("/v2/models/mnist/infer", {"inputs": "x"}, 400, '"inputs"'),
            ("/v2/models/mnist/infer", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}]},
             400, "1 elements in data for shape [2]"),
            ("/v2/models/mnist/infer", {**ok, "outputs": [{"name": "z"}]}, 400, "requested output(s) ['z']"),
        ]  # fmt: skip
        for path, body, status, message in cases:
            r = await s.inference.post(path, json=body)
            assert r.status_code == status and message in r.json()["error"], (path, r.text)
        r = await s.inference.post("/v2/models/mnist/infer", content=b"not json")
        assert r.status_code == 400 and "not JSON" in r.json()["error"]
        r = await s.inference.post(
            "/v2/models/mnist/infer", content=b"{}xx", headers={"Inference-Header-Content-Length": "2"}
        )
        assert r.status_code == 400
        s.registry.responder = failing
        r = await s.inference.post("/v2/models/mnist/infer", json=ok)
        assert r.status_code == 507 and r.json() == {"error": "out of memory"}

    run(check, tmp_path, Registry())


def test_an_answer_that_is_not_v2_is_answered_as_torchserves_kservev2_envelope(tmp_path):
    """Named after the request's input, flattened, shape its length (pytorch/serve's kservev2.py _to_json; its
    test_mnist.sh: input-0 in, {"name": "input-0", "shape": [1], "data": [1]} out); a named output keeps its name."""
    answers = {"[[0.5, 1.5]]": ("FP32", [0.5, 1.5]), "1": ("INT64", [1]), '{"cat": 0.5}': ("BYTES", ['{"cat": 0.5}'])}

    async def check(s):
        for answer, (datatype, data) in answers.items():
            s.registry.responder = lambda request, answer=answer: _answer(answer)
            x = {"name": "input-0", "datatype": "FP32", "shape": [1], "data": [1]}
            r = await s.inference.post("/v2/models/mnist/infer", json={"inputs": [x]})
            assert r.json()["outputs"] == [{"name": "input-0", "datatype": datatype, "shape": [len(data)],
                                            "data": data}], answer  # fmt: skip
        r = await s.inference.post("/v2/models/mnist/infer", json={"inputs": [x], "outputs": [{"name": "output0"}]})
        assert [o["name"] for o in r.json()["outputs"]] == ["output0"]

    run(check, tmp_path, Registry())


def test_auth_guards_all_but_health(tmp_path):
    async def check(s):
        assert (await s.inference.get("/v2/health/live")).status_code == 200
        assert (await s.inference.get("/v2/health/ready")).status_code == 200
        for path in ("/v2", "/v2/models/mnist", "/v2/models/mnist/ready", "/v1/models/mnist"):
            r = await s.inference.get(path)
            assert r.status_code == 401 and "inference key" in r.json()["error"], path
        key = {"Authorization": f"Bearer {s.auth.key('inference')}"}
        assert (await s.inference.get("/v2", headers=key)).status_code == 200

    run(check, tmp_path, Registry(), disable_token_authorization=False)


def test_kserve_v1(tmp_path):
    async def echo_rows(request):
        return InferenceResponse(body=json.dumps({"got": json.loads(request.inputs["body"])}).encode())

    async def check(s):
        s.registry.responder = echo_rows
        # the OpenAI model list shares these paths: KServe's fields are there beside OpenAI's
        assert (await s.inference.get("/v1/models")).json()["models"] == ["bert", "mnist"]
        assert (await s.inference.get("/v1/models/mnist")).json().items() >= {"name": "mnist", "ready": True}.items()
        assert (await s.inference.get("/v1/models/bert")).json().items() >= {"name": "bert", "ready": False}.items()
        r = await s.inference.post("/v1/models/mnist:predict", json={"instances": [[1, 2], [3]]})
        assert r.json() == {"predictions": [{"got": [1, 2]}, {"got": [3]}]}
        job = last_job(s.registry)
        assert job.headers["explain"] == "False" and job.content_types == {"body": "application/json"}
        r = await s.inference.post("/v1/models/mnist:explain", json={"inputs": [7]})
        assert r.json() == {"explanations": [{"got": 7}]} and last_job(s.registry).explain
        r = await s.inference.post("/v1/models/mnist:predict", json={"rows": []})
        assert r.status_code == 400 and "instances" in r.json()["error"]
        r = await s.inference.post("/v1/models/nope:predict", json={"instances": [1]})
        assert r.status_code == 404 and "error" in r.json()
        for body in ({"instances": []}, {"inputs": []}):  # no instance reaches the model: still the model's 404
            r = await s.inference.post("/v1/models/nope:predict", json=body)
            assert r.status_code == 404 and r.json() == {"error": "Model not found: nope"}
            r = await s.inference.post("/v1/models/nope:explain", json=body)
            assert r.status_code == 404
        r = await s.inference.post("/v1/models/mnist:predict", json={"instances": []})
        assert r.status_code == 200 and r.json() == {"predictions": []}

    run(check, tmp_path, Registry())


def test_unknown_v2_path_is_echoed_bounded_and_escaped(tmp_path):
    async def check(s):
        long = "a" * 5000
        short = (await s.inference.get("/v2/x")).json()["error"]
        r = await s.inference.get(f"/v2/{long}")
        error = r.json()["error"]
        assert r.status_code == 404 and error.startswith("no v2 route for GET '/v2/aaa")
        assert long not in error and "... (5004 characters)" in error and len(error) < len(short) + 100
        r = await s.inference.get("/v2/models/mnist/trace%1b%07")  # control characters come back escaped
        error = r.json()["error"]
        assert r.status_code == 404 and "'/v2/models/mnist/trace\\x1b\\x07'" in error and "\x1b" not in error
        r = await s.inference.put(f"/v2/models/{long}/infer", content=b"{}")  # a v2 route, another method: 405
        assert r.status_code == 405 and long not in r.json()["error"] and "characters)" in r.json()["error"]

    run(check, tmp_path, Registry())


async def _answer(body: str) -> InferenceResponse:
    return InferenceResponse(body=body.encode())


def test_core_infer_selects_requested_outputs():
    extensions = core.server_metadata()["extensions"]
    assert extensions[:2] == ["binary_tensor_data", "model_configuration"] and "sequence" in extensions
    a = {"name": "a", "datatype": "INT32", "shape": [1], "data": [1]}
    b = {"name": "b", "datatype": "BYTES", "shape": [1], "data": ["z"]}
    outputs = core.parse_handler_answer(json.dumps({"outputs": [a, b]}).encode())
    picked = core._select(outputs, [core.RequestedOutput("b")])
    assert [o.name for o in picked] == ["b"] and picked[0].data[0] == b"z"
