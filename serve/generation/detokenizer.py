"""Generated token ids -> text deltas, and the stop strings that end a sequence.

    detok = IncrementalDetokenizer(tokenizer, prompt_token_ids, stop=("\\n\\n",))
    detok.add(token_id); stopped = detok.check_stop(); delta = detok.take(final=finished)

Decisions (TGI's and vLLM's incremental decoding is the model), and why:
- A token is not a piece of text: byte-level BPE splits one UTF-8 character over tokens, and SentencePiece decodes
  a word's leading space only with the token before it. So each step decodes a short window of tokens twice,
  `tokens[prefix:read]` and `tokens[prefix:]`, and emits the difference; when the window ends in an incomplete
  character (decoded as U+FFFD) nothing is emitted and the window grows until it is complete. The window starts
  on the prompt's last tokens, so the first generated token decodes with the context it was generated in.
  Cost: two decodes of a few tokens per step, not the whole text.
- Stop strings are found in the text generated so far, from where the new text could complete one; the text ends
  before the stop string, which is never emitted. Text that could still become a stop string (a suffix that is a
  stop string's prefix) is held back until the next token decides it, so a stream never shows a partial stop.
- On the last step everything left is emitted (an incomplete character as U+FFFD, as `decode` gives it), so the
  deltas joined are the full decode of the output.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["IncrementalDetokenizer", "TokenDecoder"]

CONTEXT_TOKENS = 5  # prompt tokens decoded before the first generated one (vLLM's choice)


class TokenDecoder(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


class IncrementalDetokenizer:
    def __init__(self, tokenizer: TokenDecoder, prompt_token_ids: list[int], stop: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt_token_ids[-CONTEXT_TOKENS:])
        self._prefix_offset, self._read_offset = 0, len(self._ids)
        self._stop = stop
        self.text = ""  # the output's text so far, cut before a stop string once one is found
        self._emitted = 0
        self.stopped = False

    def add(self, token_id: int) -> None:
        """Decode one more generated token into `text` (possibly nothing yet)."""
        self._ids.append(token_id)
        self.text += self._delta(final=False)

    def check_stop(self, new_chars: int | None = None) -> bool:
        """True when `text` now contains a stop string; `text` is then cut before it. `new_chars`: how many
        characters at the end are new since the last check (None: search everything)."""
        if not self._stop:
            return False
        longest = max(map(len, self._stop))
        start = 0 if new_chars is None else max(0, len(self.text) - new_chars - longest + 1)
        found = [i for i in (self.text.find(s, start) for s in self._stop) if i >= 0]
        if not found:
            return False
        self.text = self.text[: min(found)]
        self.stopped = True
        return True

    def take(self, final: bool) -> str:
        """The text not yet emitted: all of it when `final`, else without a suffix that may begin a stop string."""
        if final:
            if not self.stopped:
                self.text += self._delta(final=True)
            end = len(self.text)
        else:
            end = len(self.text) - self._held_back()
        delta, self._emitted = self.text[self._emitted : end], max(self._emitted, end)
        return delta

    def _held_back(self) -> int:
        pending = self.text[self._emitted :]
        hold = 0
        for s in self._stop:
            for k in range(min(len(s) - 1, len(pending)), hold, -1):
                if pending.endswith(s[:k]):
                    hold = k
                    break
        return hold

    def _delta(self, final: bool) -> str:
        decode = self._tokenizer.decode
        prefix_text = decode(self._ids[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        new_text = decode(self._ids[self._prefix_offset :], skip_special_tokens=True)
        if len(new_text) <= len(prefix_text) or (new_text.endswith("\ufffd") and not final):
            return ""  # an incomplete character, or a token with no text yet: wait for the next token
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return new_text[len(prefix_text) :]
