"""Train the digits example with PyTorch on scikit-learn's digits, seeing exactly the tensors serve will see.

    .venv/bin/python examples/digits/train.py        # needs the `examples` extra: torch + scikit-learn

Each 8x8 digit (values 0..16) becomes the bytes a client would send, an 8x8 grayscale PNG with pixel
round(v * 255 / 16) (numpy's round half to even), and then goes through the image_classifier handler's own
pipeline (handlers.transforms.build_image_processing: grayscale, Resize 32 bilinear, ToTensor, Normalize with
the mean/std written into model-config.yaml). Training is seeded, single-threaded, CPU only, under a minute.

Writes beside this file: digits_lenet.pt (state_dict), index_to_name.json, model-config.yaml, heldout.npz
(the held-out 8x8 digits, labels and PyTorch's predictions) and the accuracy block of README.md.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # model.py beside us; handlers/ at the repository root

from model import DigitsNet  # noqa: E402

from handlers.transforms import build_image_processing  # noqa: E402

SEED = 0
IMAGE_SIZE = 32
EPOCHS = 15
BATCH = 32
TOPK = 3


def digit_png(values: np.ndarray) -> bytes:
    """An 8x8 array of 0..16 as the grayscale PNG a client sends."""
    pixels = np.round(values.astype(np.float64) * 255 / 16).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def to_batch(images: np.ndarray, pipeline) -> torch.Tensor:
    arrays = [pipeline(Image.open(io.BytesIO(digit_png(img)))) for img in images]
    return torch.from_numpy(np.stack(arrays))  # (N, 1, 32, 32)


def pixel_stats(images: np.ndarray) -> tuple[float, float]:
    """Mean and std of the training pixels after Resize + ToTensor, rounded as written to the config."""
    plain = build_image_processing(resize=IMAGE_SIZE, crop=IMAGE_SIZE, mean=None, std=None, grayscale=True)
    x = to_batch(images, plain)
    return round(float(x.mean()), 4), round(float(x.std()), 4)


def train(x: torch.Tensor, y: torch.Tensor) -> DigitsNet:
    model = DigitsNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(EPOCHS):
        model.train()
        order = torch.randperm(len(x), generator=gen)
        total = 0.0
        for start in range(0, len(x), BATCH):
            idx = order[start : start + BATCH]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1:2d}: loss {total / len(x):.4f}")
    return model.eval()


def write_config(mean: float, std: float) -> None:
    text = f"""# model-config for the digits example (written by train.py; the handler: values are the training ones)
minWorkers: 1
maxWorkers: 1
batchSize: 8
maxBatchDelay: 20
handler:
  image_size: {IMAGE_SIZE}   # Resize the shorter side to 32, then CenterCrop 32x32
  grayscale: true
  mean: [{mean}]
  std: [{std}]
  topk: {TOPK}
"""
    (HERE / "model-config.yaml").write_text(text)


def record_accuracy(correct: int, total: int) -> None:
    readme = HERE / "README.md"
    line = f"Held-out accuracy (PyTorch, {total} digits): **{correct}/{total} = {100 * correct / total:.2f}%**"
    block = f"<!-- accuracy -->\n{line}\n<!-- /accuracy -->"
    text = readme.read_text() if readme.exists() else ""
    pattern = re.compile(r"<!-- accuracy -->.*?<!-- /accuracy -->", re.S)
    readme.write_text(pattern.sub(block, text) if pattern.search(text) else text + "\n" + block + "\n")
    print(line)


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # one thread: the same float reductions, hence the same weights, on every machine
    torch.use_deterministic_algorithms(True)
    digits = load_digits()
    img_train, img_test, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=0.2, random_state=SEED, stratify=digits.target
    )
    mean, std = pixel_stats(img_train)
    pipeline = build_image_processing(resize=IMAGE_SIZE, crop=IMAGE_SIZE, mean=[mean], std=[std], grayscale=True)
    model = train(to_batch(img_train, pipeline), torch.from_numpy(y_train).long())
    with torch.no_grad():
        predictions = model(to_batch(img_test, pipeline)).argmax(1).numpy()
    torch.save(model.state_dict(), HERE / "digits_lenet.pt")
    (HERE / "index_to_name.json").write_text(json.dumps({str(i): str(i) for i in range(10)}, indent=1) + "\n")
    write_config(mean, std)
    np.savez_compressed(
        HERE / "heldout.npz",
        images=img_test.astype(np.uint8),  # (N, 8, 8), values 0..16
        labels=y_test.astype(np.int64),
        torch_predictions=predictions.astype(np.int64),
    )
    record_accuracy(int((predictions == y_test).sum()), len(y_test))


if __name__ == "__main__":
    main()
