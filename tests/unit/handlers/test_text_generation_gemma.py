"""A Gemma 2 folder served by handlers/text_generation.py in-process (test_text_generation.py's pattern): a seeded
tiny Gemma 2 (sliding and full layers, both softcaps) with a byte-level BPE and a chat template in Gemma's turn
format, made in the test. Chats answer what transformers' greedy `generate` answers on the same folder; Gemma's
template has no system role and refuses one, which comes back as a 400 carrying the template's own message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from handlers.text_generation import TextGenerationHandler
from serve.worker.context import Context
from tests.unit.handlers.test_text_generation import Collector
from tests.unit.zoo.decoders.reference import make_checkpoint, torch, transformers

tokenizers = pytest.importorskip("tokenizers")

# Gemma's turn format (<start_of_turn>user ... <end_of_turn>, the assistant's role written "model"), no system role
TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
QUESTIONS = ["Count to five.", "What colour is the sky?", "Name a fruit."]
NEW_TOKENS = 12


def make_gemma_folder(folder: Path, seed: int = 2) -> Any:
    """The seed: one whose greedy answers differ by prompt and change token mid-answer (tiny random models repeat)."""
    model = make_checkpoint("gemma2", folder, seed)  # vocab 400: the tokenizer below stays within it
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=380, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<pad>", "<bos>", "<eos>", "<unk>", "<start_of_turn>", "<end_of_turn>"],
    )  # fmt: skip
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    corpus = [q * 4 for q in QUESTIONS] + ["one two three four five, the sky is blue, an apple"] * 5
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
              "pad_token": "<pad>", "unk_token": "<unk>", "chat_template": TEMPLATE}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return model


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[TextGenerationHandler, Path, Any]:
    folder = tmp_path_factory.mktemp("gemma2")
    model = make_gemma_folder(folder)
    handler = TextGenerationHandler()
    config = {"handler": {"kv_cache_bytes": "1MiB", "max_num_batched_tokens": 8, "dtype": "float32"}}  # chunks
    handler.initialize(Context("gemma", str(folder), {"model": {}}, 1, None, "0.1.0", model_yaml_config=config))
    return handler, folder, model


def _chat(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"body": {"messages": messages, "sampling": {"temperature": 0, "max_tokens": NEW_TOKENS}}}


def test_chats_answer_what_transformers_greedy_generate_answers(served: tuple[Any, Path, Any]) -> None:
    handler, folder, model = served
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    expected = []
    for question in QUESTIONS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]  # fmt: skip
        assert tokenizer.decode(ids[0]).startswith("<bos><start_of_turn>user\n")
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
        expected.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    collector = Collector()
    for i, question in enumerate(QUESTIONS):  # all in flight at once: one engine batch
        handler.submit(f"g{i}", _chat([{"role": "user", "content": question}]), handler.context,
                       collector.emit_for(f"g{i}"))  # fmt: skip
    assert [collector.text(f"g{i}") for i in range(len(QUESTIONS))] == expected
    assert all(collector.chunks[f"g{i}"][-1]["completion_tokens"] == NEW_TOKENS for i in range(len(QUESTIONS)))


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "System role not supported"),
        ([{"role": "user", "content": "Hi"}, {"role": "user", "content": "Hi"}], "roles must alternate"),
    ],
)
def test_what_gemmas_template_refuses_is_a_400_with_its_message(
    served: tuple[Any, Path, Any], messages: list[dict[str, str]], message: str
) -> None:
    handler = served[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(served[1])
    with pytest.raises(Exception, match=message):  # transformers refuses the same conversation
        tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    collector = Collector()
    handler.submit("refused", _chat(messages), handler.context, collector.emit_for("refused"))
    assert collector.done["refused"].is_set()
    code, text = collector.errors["refused"]
    assert code == 400 and message in text and "chat template" in text, text
