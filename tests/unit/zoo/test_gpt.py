"""serve.zoo.gpt.GPT against its torch twin (nanoGPT's module names): same keys, the twin's weights load strictly,
the last position's logits agree, eagerly and through the inference plan."""

import numpy as np

import serve
from serve.inference import optimize
from serve.zoo.gpt import GPT, GPTConfig
from tests.unit.zoo import twins_text

torch = twins_text.torch


def _pair(n_layer=2):
    torch.manual_seed(0)
    twin = twins_text.GPTTwin(n_layer=n_layer, vocab_size=512, block_size=64).eval()
    model = GPT(GPTConfig(block_size=64, vocab_size=512, n_layer=n_layer, n_head=6, n_embd=384)).eval()
    sd = twin.state_dict()
    assert list(model.state_dict()) == list(sd)
    model.load_state_dict({k: serve.from_numpy(v.numpy()) for k, v in sd.items()}, strict=True)
    return twin, model


def test_logits_match_torch_eager_and_planned():
    twin, model = _pair()
    idx = np.random.default_rng(0).integers(0, 512, (3, 40))
    with torch.inference_mode():
        ref = twin(torch.from_numpy(idx)).numpy()
    x = serve.from_numpy(idx)
    with serve.no_grad():
        eager = model(x).numpy()
        planned = optimize(model, (x,))(x).numpy()
    assert eager.shape == ref.shape == (3, 1, 512)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(eager, ref, atol=2e-5 * scale, rtol=0)
    np.testing.assert_allclose(planned, ref, atol=1e-4 * scale, rtol=0)


def test_lm_head_is_tied_and_long_input_refused():
    _, model = _pair(n_layer=1)
    assert model.lm_head.weight is model.transformer.wte.weight
    try:
        model(serve.from_numpy(np.zeros((1, 65), np.int64)))
    except ValueError as e:
        assert "block_size" in str(e)
    else:
        raise AssertionError("a sequence past block_size must be refused")
