"""The generative path end to end (issue 25): the tinychat example archived as `make run` archives it (a Hugging Face
folder, handler text_generation, continuous mode), served by a real server, driven by the official `openai` SDK;
the answers against transformers + torch's greedy generate on the same folder.

Also: the same folder as a `no-archive` directory with sharded weights answers the same; many streams at once all
complete (continuous batching in one worker), a client that leaves mid-stream frees
its sequence (the next requests still run), the TorchServe route takes the generative wire, and bad requests are
400s in OpenAI's shape.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from examples.build_model_store import build, tinychat
from serve.archive import package
from tests.integration.server import ServerProcess
from tests.transformers_reference import needs_transformers, reference_transformers

openai = pytest.importorskip("openai")

QUESTIONS = ["Count to 9.", "What colour is a cherry?", "What is the opposite of early?", "Who are you?"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base: Path = tmp_path_factory.mktemp("text_generation")
    store = base / "store"
    store.mkdir()
    build(tinychat(), store, force=True)
    sharded = _sharded_copy(tinychat().extra_files[0].parent, base / "sharded")
    package("shards", "1.0", "text_generation", extra_files=sorted(sharded.iterdir()), export_path=store,
            config_file=tinychat().config_file, archive_format="no-archive", progress=False)  # fmt: skip
    proc = ServerProcess(base / "run", store, "--ncs", "--models", "tinychat=tinychat.mar", "shards=shards").start()
    try:
        yield proc
    finally:
        proc.stop()


def _sharded_copy(folder: Path, out: Path) -> Path:
    """The folder with its weights split in two safetensors shards and their index, as large checkpoints come."""
    from safetensors.numpy import load_file, save_file

    out.mkdir()
    for f in folder.iterdir():
        if f.name != "model.safetensors":
            (out / f.name).write_bytes(f.read_bytes())
    tensors = load_file(folder / "model.safetensors")
    names = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        shard = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, out / shard)
        weight_map |= dict.fromkeys(part, shard)
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def _client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.inference + "/v1", api_key=server.key("inference"), timeout=120,
                         max_retries=0)  # fmt: skip


def _messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@needs_transformers
def test_chat_answers_what_transformers_answers_with_and_without_stream(server: ServerProcess) -> None:
    reference_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tinychat().extra_files[0].parent
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    client = _client(server)
    for question in QUESTIONS:
        ids = tokenizer.apply_chat_template(_messages(question), add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"]  # fmt: skip
        out = model.generate(ids, max_new_tokens=48, do_sample=False)
        expected = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        whole = client.chat.completions.create(model="tinychat", messages=_messages(question), temperature=0,
                                               max_tokens=48)  # fmt: skip
        assert whole.choices[0].message.content == expected and whole.choices[0].finish_reason == "stop"
        assert whole.usage.prompt_tokens == ids.shape[1]
        assert whole.usage.completion_tokens == out.shape[1] - ids.shape[1]
        stream = client.chat.completions.create(model="tinychat", messages=_messages(question), temperature=0,
                                                max_tokens=48, stream=True)  # fmt: skip
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == expected


def test_a_no_archive_directory_with_sharded_weights_answers_the_same(server: ServerProcess) -> None:
    client = _client(server)
    answers = [client.chat.completions.create(model=name, messages=_messages("Count to 4."), temperature=0)
               for name in ("tinychat", "shards")]  # fmt: skip
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content == "One, two, three, four."


def test_many_streams_at_once_all_complete(server: ServerProcess) -> None:
    client = _client(server)

    def count(n: int) -> str:
        stream = client.chat.completions.create(model="tinychat", messages=_messages(f"Count to {n}."),
                                                temperature=0, stream=True)  # fmt: skip
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    numbers = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(count, [1 + i % 10 for i in range(16)]))
    for i, answer in enumerate(answers):
        assert answer == ", ".join(numbers[: 1 + i % 10]).capitalize() + "."


def test_a_client_that_leaves_mid_stream_does_not_hold_the_model(server: ServerProcess) -> None:
    body = {"model": "tinychat", "prompt": "Count", "max_tokens": 400, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=120) as http:
        for _ in range(3):  # each leaves after its first chunk; were they kept, the model would still answer
            with http.stream("POST", server.inference + "/v1/completions", json=body,
                             headers={"Authorization": f"Bearer {server.key('inference')}"}) as response:  # fmt: skip
                assert response.status_code == 200
                next(response.iter_lines())
    answer = _client(server).completions.create(model="tinychat", prompt="Count", max_tokens=2, temperature=0,
                                                extra_body={"ignore_eos": True})  # fmt: skip
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 2


def test_the_torchserve_route_takes_the_wire_and_streams_json_chunks(server: ServerProcess) -> None:
    wire = {"messages": _messages("Count to 3."), "sampling": {"temperature": 0}}
    with httpx.Client(timeout=120) as http:
        response = http.post(server.inference + "/predictions/tinychat", json=wire,
                             headers={"Authorization": f"Bearer {server.key('inference')}"})  # fmt: skip
    assert response.status_code == 200, response.text
    chunks = [json.loads(line) for line in response.text.replace("}{", "}\n{").splitlines() if line.strip()]
    assert "".join(c["text"] for c in chunks) == "One, two, three." and chunks[-1]["finish_reason"] == "stop"


def test_bad_requests_are_400s_in_openai_shape(server: ServerProcess) -> None:
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model="tinychat", prompt="Count", max_tokens=100000)
    assert "512" in str(error.value)  # the context length to stay within
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="tinychat", messages=_messages("hi"), temperature=7)
