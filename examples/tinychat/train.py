"""Train tinychat, the generative example `make run` serves: a Llama-architecture model of ~0.9M parameters that
has learned a small synthetic chat world (greetings, colours of things, counting, opposites), with its own
byte-level BPE tokenizer and a ChatML chat template. The output is a Hugging Face folder (config.json,
model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json), committed beside this script, so
nothing is downloaded and nothing is trained at `make run`.

    .venv/bin/pip install -e ".[examples]"   # torch and transformers, for re-training only
    .venv/bin/python examples/tinychat/train.py [--steps 1500] [--out examples/tinychat/model]

Why synthetic: the example must be small enough to commit (a few MB), answer sensibly, and be reproducible from
this file alone. Seeded: the same command gives the same corpus and the same tokenizer; torch's training is
deterministic on one thread.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYSTEM = "You are tinychat, a very small model served by serve."
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

COLOURS = {"sky": "blue", "grass": "green", "sun": "yellow", "snow": "white", "night": "black", "blood": "red",
           "an orange": "orange", "a banana": "yellow", "the sea": "blue", "a leaf": "green", "coal": "black",
           "milk": "white", "a cherry": "red", "a plum": "purple", "chocolate": "brown"}  # fmt: skip
OPPOSITES = {"hot": "cold", "big": "small", "up": "down", "fast": "slow", "day": "night", "old": "new",
             "happy": "sad", "open": "closed", "light": "dark", "early": "late", "left": "right",
             "high": "low"}  # fmt: skip
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def conversations(rng: random.Random) -> list[list[dict[str, str]]]:
    """Every question of the world, in several phrasings, with its one answer."""
    pairs: list[tuple[str, str]] = []
    for greeting in ("Hello", "Hi", "Hey", "Good morning", "Hello there"):
        pairs.append((greeting + "!", "Hello! I am tinychat. Ask me about colours, opposites or counting."))
    pairs += [("Who are you?", "I am tinychat, a very small model served by serve."),
              ("What can you do?", "I know colours, opposites and how to count to ten."),
              ("Thank you!", "You are welcome!"), ("Bye!", "Goodbye!")]  # fmt: skip
    for thing, colour in COLOURS.items():
        for q in (f"What colour is {thing}?", f"What color is {thing}?", f"Tell me the colour of {thing}."):
            pairs.append((q, f"{thing[0].upper() + thing[1:]} is {colour}."))
    for word, opposite in OPPOSITES.items():
        for a, b in ((word, opposite), (opposite, word)):
            for q in (f"What is the opposite of {a}?", f"Opposite of {a}?"):
                pairs.append((q, f"The opposite of {a} is {b}."))
    for n in range(1, 11):
        for q in (f"Count to {n}.", f"Count to {NUMBERS[n - 1]}.", f"Please count to {n}."):
            pairs.append((q, ", ".join(NUMBERS[:n]).capitalize() + "."))
    out = []
    for question, answer in pairs:
        for with_system in (False, True):
            messages = [{"role": "system", "content": SYSTEM}] if with_system else []
            out.append(messages + [{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
    rng.shuffle(out)
    return out


def render(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def make_tokenizer(texts: list[str], vocab_size: int):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--out", type=Path, default=HERE / "model")
    args = parser.parse_args()

    import torch

    # transformers imports torchvision when it is installed; the test extras' torchvision is a CUDA build that
    # fails to import beside a CPU torch, and none of it is needed here
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = random.Random(0)
    chats = conversations(rng)
    texts = [render(c) for c in chats]
    tokenizer = make_tokenizer(texts, vocab_size=512)
    eos, im_end = tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|im_end|>")
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128, intermediate_size=384,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=im_end, pad_token_id=eos)  # fmt: skip
    model = LlamaForCausalLM(config)
    # each conversation one row, padded; the loss only on the assistant's answers (and their <|im_end|>)
    rows, masks = [], []
    for chat in chats:
        prompt = tokenizer.encode(render(chat[:-1]) + "<|im_start|>assistant\n").ids
        answer = tokenizer.encode(chat[-1]["content"] + "<|im_end|>").ids
        rows.append(prompt + answer)
        masks.append([0] * len(prompt) + [1] * len(answer))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), eos)
    labels = torch.full((len(rows), width), -100)
    for i, (row, mask) in enumerate(zip(rows, masks, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.tensor([t if m else -100 for t, m in zip(row, mask, strict=True)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=args.steps, pct_start=0.1)
    model.train()
    for step in range(args.steps):
        batch = torch.randint(0, len(rows), (32,))
        loss = model(input_ids=ids[batch], labels=labels[batch]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    model.generation_config.to_json_file(args.out / "generation_config.json")
    tokenizer.save(str(args.out / "tokenizer.json"))
    (args.out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE, "model_max_length": 512,
        "clean_up_tokenization_spaces": False}, indent=2) + "\n")  # fmt: skip
    print(f"wrote {args.out}: {sum(p.numel() for p in model.parameters()):,} parameters")


if __name__ == "__main__":
    main()
