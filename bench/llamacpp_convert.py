"""A bench model folder to GGUF with llama.cpp's own converter (the copy the llama-cpp-python sdist vendors).

    .venv/bin/python bench/llamacpp_convert.py LLAMA_CPP_DIR FOLDER OUT.gguf --outtype bf16

Decisions:
- The vendored `convert_hf_to_gguf.py` runs unchanged in this process (the project's venv python, with the vendored
  gguf-py first on sys.path: nothing is installed), on the very folder serve and transformers load.
- One patch: the converter names a BPE tokenizer's pre-tokenizer by hashing how it splits a fixed text, and refuses
  a tokenizer it does not know. The bench's tokenizer (bench/generation_models.py) is trained here, so its hash is
  in no list; its pre-tokenizer is byte-level with GPT-2's split regex, which is what llama.cpp's "gpt-2" means, so
  an unrecognised hash is named "gpt-2". Prompts go to the server as token ids, so the tokenizer only decodes.
- And one for transformers 5: its GPT2Config no longer writes `n_ctx` (the original GPT-2 config.json carries it,
  equal to n_positions) and the converter reads it, so a GPT-2 config without it gets n_ctx = n_positions.
- And one for a venv without sentencepiece: the Llama converter tries a SentencePiece vocab first and takes its
  FileNotFoundError (no tokenizer.model) as "not SentencePiece", but imports sentencepiece before it looks; with no
  tokenizer.model in the folder that FileNotFoundError is raised here without the import.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def main() -> None:
    llama, folder, outfile, *rest = sys.argv[1:]
    sys.path[:0] = [str(Path(llama) / "gguf-py"), llama]
    # the venv's torchvision does not match its torch (operator torchvision::nms does not exist); transformers
    # imports it while resolving LlamaConfig: skip its meta registrations, as bench/generation_models.py does
    sys.modules.setdefault("torchvision._meta_registrations", type(sys)("torchvision._meta_registrations"))
    from conversion import base

    recognised = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self: base.TextModel, tokenizer: object) -> str:
        try:
            return recognised(self, tokenizer)
        except NotImplementedError:
            logging.getLogger(__name__).warning("pre-tokenizer not in llama.cpp's list: named 'gpt-2' (byte-level)")
            return "gpt-2"

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre  # type: ignore[method-assign]
    load_hparams = base.ModelBase.load_hparams

    def load_hparams_n_ctx(dir_model: Path, is_mistral_format: bool) -> dict:
        config = load_hparams(dir_model, is_mistral_format)
        if config.get("model_type") == "gpt2" and "n_ctx" not in config:
            config["n_ctx"] = config["n_positions"]
        return config

    base.ModelBase.load_hparams = staticmethod(load_hparams_n_ctx)  # type: ignore[method-assign, assignment]
    sentencepiece = base.TextModel._set_vocab_sentencepiece

    def set_vocab_sentencepiece(self: base.TextModel, *args: object, **kwargs: object) -> None:
        if not (Path(self.dir_model) / "tokenizer.model").is_file():
            raise FileNotFoundError(f"no tokenizer.model in {self.dir_model}")
        sentencepiece(self, *args, **kwargs)

    base.TextModel._set_vocab_sentencepiece = set_vocab_sentencepiece  # type: ignore[method-assign]
    import convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py", folder, "--outfile", outfile, *rest]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
