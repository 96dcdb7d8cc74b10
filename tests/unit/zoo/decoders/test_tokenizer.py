"""Tokenizer and chat templates against transformers' AutoTokenizer on the same folder: a byte-level BPE trained
in the test, tokenizer_config.json with special tokens, add_bos_token and a chat template (ChatML, and one that
uses namespace, loop controls, tojson, strftime_now and raise_exception)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serve.errors import CheckpointError
from serve.zoo.decoders.generation_config import GenerationDefaults
from serve.zoo.decoders.tokenizer import Tokenizer
from tests.unit.zoo.decoders.reference import transformers

tokenizers = pytest.importorskip("tokenizers")

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
STRICT = """{{ bos_token }}{% set ns = namespace(system='', turns=0) %}
{% for message in messages %}
    {% if message['role'] == 'system' %}
        {% set ns.system = message['content'] %}
        {% continue %}
    {% endif %}
    {% if (message['role'] == 'user') != (ns.turns % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% set ns.turns = ns.turns + 1 %}
    [{{ message['role'] }}{% if message.name is defined %} {{ message.name }}{% endif %}]
    {{ message['content'] | tojson }}
    {% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}
{% endfor %}
{% if ns.system %}(system: {{ ns.system | tojson(indent=2) }}, year {{ strftime_now('%Y') }}){% endif %}
{% if add_generation_prompt %}[assistant]{% endif %}"""

TEXTS = ["Hello world, it's a test!", "  leading spaces and trailing  ", "naïve café <b>bold</b> 東京",
         "<|im_start|>user\nhi<|im_end|>", "<s>a</s> b"]  # fmt: skip
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be \"brief\" <é>"}, {"role": "user", "content": "a"},
     {"role": "assistant", "content": "b", "name": None}, {"role": "user", "content": "c", "name": "ann"}],
]  # fmt: skip


def make_folder(folder: Path, template: str | None, bos: bool = True, in_jinja_file: bool = False) -> Path:
    """tokenizer_config.json always says add_bos_token: transformers 5 ignores it beside a tokenizer.json, whose
    post-processor adds "<s>" when `bos`."""
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"], show_progress=False
    )
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    corpus = [t * 3 for t in TEXTS] + ["the quick brown fox jumps over the lazy dog"] * 5
    tok.train_from_iterator(corpus, trainer=trainer)
    if bos:
        tok.post_processor = tokenizers.processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
        )
    folder.mkdir(exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    eos = {"__type": "AddedToken", "content": "</s>", "special": True}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "unk_token": "<unk>",
              "eos_token": eos, "add_bos_token": True}  # fmt: skip
    if template is not None and in_jinja_file:
        (folder / "chat_template.jinja").write_text(template)
    elif template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("bos", [True, False])
def test_encode_and_decode_match_transformers(tmp_path: Path, bos: bool) -> None:
    folder = make_folder(tmp_path, CHATML, bos)
    ours, ref = Tokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:
        for special in (True, False):
            ids = ours.encode(text, add_special_tokens=special)
            assert ids == ref.encode(text, add_special_tokens=special)
            for skip in (True, False):
                assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
    assert (ours.encode("x")[0] == 1) is bos
    assert [ours.id_to_token(i) for i in ids] == ref.convert_ids_to_tokens(ids)
    assert (ours.bos_token, ours.eos_token) == (ref.bos_token, ref.eos_token)


@pytest.mark.parametrize("template", [CHATML, STRICT], ids=["chatml", "strict"])
@pytest.mark.parametrize("in_jinja_file", [False, True])
def test_chat_templates_render_as_transformers_does(tmp_path: Path, template: str, in_jinja_file: bool) -> None:
    folder = make_folder(tmp_path, template, in_jinja_file=in_jinja_file)
    ours, ref = Tokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(folder)
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            expected = ref.apply_chat_template(messages, add_generation_prompt=prompt, tokenize=False)
            assert ours.apply_chat_template(messages, add_generation_prompt=prompt) == expected


def test_raise_exception_is_a_value_error_with_the_templates_message(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, STRICT)
    messages = [{"role": "assistant", "content": "first"}]
    with pytest.raises(Exception, match="must alternate"):
        transformers.AutoTokenizer.from_pretrained(folder).apply_chat_template(messages, tokenize=False)
    with pytest.raises(ValueError, match="refused the messages: Conversation roles must alternate"):
        Tokenizer.from_folder(folder).apply_chat_template(messages)


def test_no_template_and_a_sandbox_escape_are_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no chat template"):
        Tokenizer.from_folder(make_folder(tmp_path / "a", None)).apply_chat_template([{"role": "user", "content": "x"}])
    escape = "{{ messages.__class__.__mro__ }}{% set ns = namespace() %}{% set ns._x = 1 %}"
    with pytest.raises(Exception, match=r"unsafe|cannot set"):
        Tokenizer.from_folder(make_folder(tmp_path / "b", escape)).apply_chat_template([])


def test_eos_ids_join_the_tokenizers_and_generation_configs(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, None)
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [4, 2], "temperature": 0.6, "top_p": 0.9, "max_new_tokens": 64, "do_sample": True})
    )
    tok = Tokenizer.from_folder(folder)
    assert tok.eos_token_ids == frozenset({2, 4})  # "</s>" is 2
    defaults = GenerationDefaults.from_folder(folder)
    assert defaults.sampling_defaults() == {"temperature": 0.6, "top_p": 0.9, "max_tokens": 64}
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 3, "top_k": "many"}))
    with pytest.raises(CheckpointError, match=r"generation_config\.json: 'top_k' must be an integer"):
        GenerationDefaults.from_folder(folder)
    assert GenerationDefaults.from_folder(tmp_path / "nowhere") == GenerationDefaults()
