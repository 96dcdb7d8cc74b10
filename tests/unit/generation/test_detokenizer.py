"""The incremental detokenizer against a real byte-level BPE (the `tokenizers` library, trained in the test): the
deltas joined are the full decode, no delta shows half a character, and stop strings spanning deltas are cut
before and never emitted."""

from __future__ import annotations

import pytest

from serve.generation.detokenizer import IncrementalDetokenizer

TEXT = "the café 日本 🙂 fox jumps STOP here, naïve wörld"


@pytest.fixture(scope="module")
def bpe():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"], initial_alphabet=alphabet)
    corpus = ["héllo wörld, the quick brown fox jumps over the lazy dog. 日本語のテキスト 🙂🙂 naïve café"] * 20
    tok.train_from_iterator(corpus, trainer)
    return Adapter(tok)


class Adapter:
    """The engine's tokenizer protocol over a `tokenizers.Tokenizer` (what serve/zoo/decoders' Tokenizer offers)."""

    def __init__(self, tok) -> None:
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


def _stream(bpe: Adapter, prompt: str, text: str, stop: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    detok = IncrementalDetokenizer(bpe, bpe.encode(prompt), stop)
    ids = bpe.encode(text)
    deltas = []
    for i, t in enumerate(ids):
        before = len(detok.text)
        detok.add(t)
        stopped = detok.check_stop(len(detok.text) - before)
        deltas.append(detok.take(final=stopped or i == len(ids) - 1))
        if stopped:
            return deltas, True
    return deltas, False


def test_deltas_joined_are_the_full_decode_and_never_split_a_character(bpe: Adapter) -> None:
    ids = bpe.encode(TEXT)
    assert any("\ufffd" in bpe.decode([t]) for t in ids)  # the test is meaningful: characters span tokens
    deltas, stopped = _stream(bpe, "héllo", TEXT)
    assert "".join(deltas) == bpe.decode(ids) == TEXT and not stopped
    assert not any("\ufffd" in d for d in deltas)
    assert deltas.count("") >= 2  # the held-back steps of the split characters


def test_an_incomplete_character_at_the_end_is_emitted_as_decode_gives_it(bpe: Adapter) -> None:
    full = bpe.encode(TEXT)
    cut = next(i for i in range(1, len(full)) if bpe.decode(full[:i]).endswith("\ufffd"))
    ids = full[:cut]  # a character's last bytes missing
    detok = IncrementalDetokenizer(bpe, bpe.encode("the"))
    out = []
    for t in ids:
        detok.add(t)
        out.append(detok.take(final=False))
    out.append(detok.take(final=True))
    assert "".join(out) == bpe.decode(ids) and out[-1].endswith("\ufffd")


@pytest.mark.parametrize("stop", ["STOP", "OP he", "jumps S", "🙂 f"])
def test_a_stop_string_spanning_deltas_ends_the_text_before_it(bpe: Adapter, stop: str) -> None:
    deltas, stopped = _stream(bpe, "the", TEXT, stop=(stop, "never there"))
    assert stopped
    expected = TEXT[: TEXT.index(stop)]
    assert "".join(deltas) == expected
    shown = ""
    for d in deltas:  # at no point did the stream show text past the cut
        shown += d
        assert expected.startswith(shown)


def test_the_first_of_several_stop_strings_wins_and_a_partial_match_is_released(bpe: Adapter) -> None:
    deltas, stopped = _stream(bpe, "the", TEXT, stop=("here", "fox"))
    assert stopped and "".join(deltas) == TEXT[: TEXT.index("fox")]
    deltas, stopped = _stream(bpe, "the", TEXT, stop=("jumpz",))  # "jump" held back, then released
    assert not stopped and "".join(deltas) == TEXT
