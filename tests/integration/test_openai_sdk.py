"""The official `openai` SDK against a real server: models.list, completions, chat with and without stream=True,
and errors as the SDK's own exception classes, with the inference key as `api_key`.

The model is a small streaming handler written here (its `handle` yields chunks of the generative wire,
gen_contract.md), so this needs neither the engine nor the text_generation handler: it checks the frontend, the
dataplane, the worker's streaming and the SDK's parsing end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serve.archive import package
from tests.integration.server import ServerProcess

openai = pytest.importorskip("openai")

# Echoes the prompt's words (or the last message's) as tokens, one chunk per word; max_tokens cuts it ("length").
WORDS = """
def handle(data, context):
    if data is None:
        return None
    body = data[0]["body"]
    text = body["prompt"] if body.get("prompt") is not None else body["messages"][-1]["content"]
    words = text.split()
    limit = body["sampling"].get("max_tokens", len(words))

    def stream():
        out = words[:limit]
        for i, word in enumerate(out):
            last = i == len(out) - 1
            finish = ("length" if limit < len(words) else "stop") if last else None
            yield [{"index": 0, "text": word + ("" if last else " "), "token_ids": [i], "finish_reason": finish,
                    "logprobs": None, "prompt_tokens": len(words), "completion_tokens": i + 1}]

    return stream()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base: Path = tmp_path_factory.mktemp("openai")
    store = base / "store"
    store.mkdir()
    (base / "words.py").write_text(WORDS)
    package("words", "1.0", f"{base / 'words.py'}:handle", export_path=store, progress=False)
    proc = ServerProcess(base / "run", store, "--ncs", "--models", "words=words.mar").start()
    try:
        yield proc
    finally:
        proc.stop()


def _client(server: ServerProcess, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.inference + "/v1", api_key=key or server.key("inference"), timeout=60,
                         max_retries=0)  # fmt: skip


def test_models_and_completions(server: ServerProcess) -> None:
    client = _client(server)
    assert [m.id for m in client.models.list()] == ["words"]
    done = client.completions.create(model="words", prompt="one two three", max_tokens=2)
    assert done.choices[0].text == "one two" and done.choices[0].finish_reason == "length"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (3, 2, 5)
    parts = list(client.completions.create(model="words", prompt="a b c", stream=True))
    assert "".join(p.choices[0].text for p in parts) == "a b c" and parts[-1].choices[0].finish_reason == "stop"


def test_chat_with_and_without_stream(server: ServerProcess) -> None:
    client = _client(server)
    answer = client.chat.completions.create(model="words", messages=[{"role": "user", "content": "hi there"}])
    assert answer.choices[0].message.role == "assistant" and answer.choices[0].message.content == "hi there"
    stream = client.chat.completions.create(model="words", messages=[{"role": "user", "content": "x y"}], stream=True,
                                            stream_options={"include_usage": True})  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "x y"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2


def test_errors_are_the_sdks_exception_classes(server: ServerProcess) -> None:
    with pytest.raises(openai.NotFoundError, match="nope"):
        _client(server).completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="temperature"):
        _client(server).completions.create(model="words", prompt="x", temperature=5)
    with pytest.raises(openai.AuthenticationError):
        _client(server, key="wrong").models.list()
