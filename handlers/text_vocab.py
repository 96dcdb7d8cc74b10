"""TorchServe's text classification input: cleaned text -> basic_english tokens -> n-grams -> vocabulary ids.

The steps of TorchServe's `text_classifier` (its TextHandler helpers), written here without torchtext:
    remove_html_tags -> lower -> expand_contractions -> remove_accented_characters -> remove_punctuation
    -> basic_english (torchtext's tokenizer: lower case, punctuation split off, whitespace split)
    -> ngrams_iterator(tokens, ngrams): the tokens, then every 2-gram, ... every n-gram joined by a space
    -> ids from the source vocabulary (a token it lacks gets the id of "<unk>", else 0)

The source vocabulary is `source_vocab.pt` in the model directory (or the manifest's `model.sourceVocab`).
Decision: it must be a {token: index} dict saved with `torch.save` (a torchtext vocab's `get_stoi()`), read with
serve.load, which never runs pickled code. A pickled torchtext Vocab object (TorchServe's example saves one) is
torchtext code, so it is refused with a message saying to save `vocab.get_stoi()` instead.
The contraction table is ours, of the common English contractions (TorchServe's is larger); the apostrophe is
removed afterwards either way, so an unlisted contraction becomes one token ("mustn't" -> "mustnt").
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import serve
from serve.errors import CheckpointError

HTML = re.compile(r"<.*?>|&([a-z0-9]+|#[0-9]{1,6}|#x[0-9a-f]{1,6});")
CONTRACTIONS = {
    "ain't": "is not", "aren't": "are not", "can't": "cannot", "couldn't": "could not", "didn't": "did not",
    "doesn't": "does not", "don't": "do not", "hadn't": "had not", "hasn't": "has not", "haven't": "have not",
    "he'd": "he would", "he'll": "he will", "he's": "he is", "i'd": "i would", "i'll": "i will", "i'm": "i am",
    "i've": "i have", "isn't": "is not", "it'd": "it would", "it'll": "it will", "it's": "it is",
    "let's": "let us", "she'd": "she would", "she'll": "she will", "she's": "she is", "shouldn't": "should not",
    "that's": "that is", "there's": "there is", "they'd": "they would", "they'll": "they will",
    "they're": "they are", "they've": "they have", "wasn't": "was not", "we'd": "we would", "we'll": "we will",
    "we're": "we are", "we've": "we have", "weren't": "were not", "what's": "what is", "won't": "will not",
    "wouldn't": "would not", "you'd": "you would", "you'll": "you will", "you're": "you are",
    "you've": "you have",
}  # fmt: skip
CONTRACTION = re.compile("|".join(re.escape(c) for c in sorted(CONTRACTIONS, key=len, reverse=True)), re.IGNORECASE)
# torchtext's basic_english: each pattern replaced in order, then split on whitespace
BASIC_ENGLISH = [(re.compile(p), r) for p, r in [
    (r"\'", " '  "), (r"\"", ""), (r"\.", " . "), (r"<br \/>", " "), (r",", " , "), (r"\(", " ( "), (r"\)", " ) "),
    (r"\!", " ! "), (r"\?", " ? "), (r"\;", " "), (r"\:", " "), (r"\s+", " "),
]]  # fmt: skip


def remove_html_tags(text: str) -> str:
    return HTML.sub("", text)


def expand_contractions(text: str) -> str:
    """Known contractions spelled out (the first letter's case kept), then every apostrophe removed."""

    def expand(match: re.Match[str]) -> str:
        found = match.group(0)
        return found[0] + CONTRACTIONS[found.lower()][1:]

    return CONTRACTION.sub(expand, text).replace("'", "")


def remove_accented_characters(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("utf-8", "ignore")


def remove_punctuation(text: str) -> str:
    return text.translate(str.maketrans("", "", string.punctuation))


def basic_english(text: str) -> list[str]:
    text = text.lower()
    for pattern, replacement in BASIC_ENGLISH:
        text = pattern.sub(replacement, text)
    return text.split()


def ngrams_iterator(tokens: list[str], ngrams: int) -> Iterator[str]:
    """The tokens, then for n = 2..ngrams every run of n consecutive tokens joined by a space (torchtext's order)."""
    yield from tokens
    for n in range(2, ngrams + 1):
        for start in range(len(tokens) - n + 1):
            yield " ".join(tokens[start : start + n])


def clean_text(text: str) -> list[str]:
    """TorchServe's text_classifier cleaning and tokenization of one text."""
    text = remove_html_tags(text).lower()
    return basic_english(remove_punctuation(remove_accented_characters(expand_contractions(text))))


def load_source_vocab(path: str | Path) -> dict[str, int]:
    """source_vocab.pt as {token: index} (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no source vocabulary at {path}: add source_vocab.pt ({{token: index}} saved with torch.save) to the "
            "archive with model-archiver --extra-files source_vocab.pt"
        )
    try:
        vocab = serve.load(path, map_location="cpu")
    except CheckpointError as e:
        raise ValueError(
            f"{path.name} is not a plain {{token: index}} dict ({e}): a pickled torchtext Vocab is torchtext code; "
            "save torch.save(vocab.get_stoi(), 'source_vocab.pt') instead"
        ) from e
    if not isinstance(vocab, Mapping) or not all(isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()):
        raise ValueError(f"{path.name} must hold a {{token: index}} dict of str to int, got {type(vocab).__name__}")
    return dict(vocab)


def token_ids(vocab: Mapping[str, int], text: str, ngrams: int) -> list[int]:
    """The vocabulary ids of a text's tokens and n-grams; unknown ones get "<unk>"'s id (0 without one)."""
    unk = vocab.get("<unk>", 0)
    return [vocab.get(token, unk) for token in ngrams_iterator(clean_text(text), ngrams)]


def offsets_batch(ids: list[list[int]], device: Any = None) -> tuple[serve.Tensor, serve.Tensor]:
    """EmbeddingBag's input for a batch: every text's ids concatenated (int64) and each text's start offset."""
    flat = [i for row in ids for i in row]
    starts, total = [], 0
    for row in ids:
        starts.append(total)
        total += len(row)
    text = serve.tensor(flat, dtype=serve.int64)
    offsets = serve.tensor(starts, dtype=serve.int64)
    return (text.to(device), offsets.to(device)) if device is not None else (text, offsets)
