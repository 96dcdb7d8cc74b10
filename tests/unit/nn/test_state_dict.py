"""state_dict / load_state_dict: PyTorch's keys, one aggregated error per failure kind, strict=False, prefixes."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import serve
from serve import nn
from serve.nn.utils import consume_prefix_in_state_dict_if_present
from tests.helpers import needs_torch, torch


class Net(nn.Module):
    def __init__(self, n_in: int = 4, n_out: int = 3):
        super().__init__()
        self.fc1 = nn.Module()
        self.fc1.weight = nn.Parameter(serve.randn(n_out, n_in))
        self.fc1.bias = nn.Parameter(serve.randn(n_out))
        self.register_buffer("steps", serve.tensor(0))
        self.register_buffer("cache", serve.zeros(2), persistent=False)


def _random_sd(n_in: int = 4, n_out: int = 3) -> OrderedDict:
    return OrderedDict(
        [("fc1.weight", serve.randn(n_out, n_in)), ("fc1.bias", serve.randn(n_out)), ("steps", serve.tensor(7))]
    )


def test_round_trip_copies_values_into_the_same_parameters():
    net, sd = Net(), _random_sd()
    w = net.fc1.weight
    result = net.load_state_dict(sd)
    assert repr(result) == "<All keys matched successfully>"
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert net.fc1.weight is w and w.requires_grad
    np.testing.assert_array_equal(w.detach().numpy(), sd["fc1.weight"].numpy())
    assert int(net.steps) == 7
    # a copy, not an alias: changing the checkpoint afterwards leaves the model alone
    sd["fc1.weight"].add_(1)
    assert not np.array_equal(w.detach().numpy(), sd["fc1.weight"].numpy())


def test_state_dict_detaches_and_keep_vars_does_not():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["steps", "fc1.weight", "fc1.bias"]  # own state first, then children, as PyTorch
    assert not sd["fc1.weight"].requires_grad and not isinstance(sd["fc1.weight"], nn.Parameter)
    assert net.state_dict(keep_vars=True)["fc1.weight"] is net.fc1.weight
    assert list(net.state_dict(prefix="model.")) == ["model.steps", "model.fc1.weight", "model.fc1.bias"]


def test_missing_keys_listed_together():
    sd = _random_sd()
    del sd["fc1.bias"], sd["steps"]
    with pytest.raises(RuntimeError) as e:
        Net().load_state_dict(sd)
    msg = str(e.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "steps", "fc1.bias".' in msg


def test_unexpected_keys_listed_together():
    sd = _random_sd()
    sd["fc2.weight"] = serve.zeros(1)
    sd["other"] = serve.zeros(1)
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "fc2.weight", "other".'):
        Net().load_state_dict(sd)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"size mismatch for fc1.weight: checkpoint \(3, 5\) vs model \(3, 4\)"):
        Net().load_state_dict(_random_sd(n_in=5))


def test_non_tensor_value_is_named():
    sd = _random_sd()
    sd["fc1.bias"] = [1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match=r'parameter named "fc1.bias", expected a Tensor.*received list'):
        Net().load_state_dict(sd)


def test_all_problems_in_one_error():
    sd = _random_sd(n_in=5)
    del sd["steps"]
    sd["junk"] = serve.zeros(1)
    with pytest.raises(RuntimeError) as e:
        Net().load_state_dict(sd)
    lines = str(e.value).split("\n\t")
    assert lines[1].startswith("Missing key(s)") and lines[2].startswith("Unexpected key(s)")
    assert lines[3].startswith("size mismatch for fc1.weight")


def test_not_a_mapping_says_what_to_do():
    with pytest.raises(TypeError, match="find_state_dict"):
        Net().load_state_dict([1, 2])


def test_strict_false_returns_keys_but_still_refuses_shapes():
    sd = _random_sd()
    del sd["steps"]
    sd["junk"] = serve.zeros(1)
    missing, unexpected = Net().load_state_dict(sd, strict=False)
    assert missing == ["steps"] and unexpected == ["junk"]
    with pytest.raises(RuntimeError, match="size mismatch"):
        Net().load_state_dict(_random_sd(n_in=5), strict=False)


def test_dtype_is_cast_to_the_model_and_assign_replaces():
    sd = _random_sd()
    sd["fc1.weight"] = sd["fc1.weight"].double()
    net = Net()
    net.load_state_dict(sd)
    assert net.fc1.weight.dtype == serve.float32
    net.load_state_dict(sd, assign=True)
    assert net.fc1.weight.dtype == serve.float64 and isinstance(net.fc1.weight, nn.Parameter)


def test_consume_prefix_strips_module_and_metadata():
    sd = Net().state_dict(prefix="module.")
    sd._metadata = OrderedDict([("module", {"version": 1}), ("module.fc1", {"version": 1})])
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert list(sd) == ["steps", "fc1.weight", "fc1.bias"]
    assert list(sd._metadata) == ["", "fc1"]
    Net().load_state_dict(sd)


def test_load_hooks_and_version_metadata_reach_the_module():
    seen = {}

    class Versioned(nn.Module):
        _version = 2

        def __init__(self):
            super().__init__()
            self.register_buffer("count", serve.tensor(0))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, *rest):
            seen["version"] = local_metadata.get("version")
            if local_metadata.get("version", 1) < 2 and prefix + "count" not in state_dict:
                state_dict[prefix + "count"] = serve.tensor(5)  # an upgrade path, like BatchNorm's
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, *rest)

    outer = nn.Sequential(Versioned())
    old = OrderedDict()
    old._metadata = OrderedDict([("0", {"version": 1})])
    outer.load_state_dict(old)
    assert seen["version"] == 1 and int(outer[0].count) == 5
    assert outer.state_dict()._metadata["0"] == {"version": 2}


@needs_torch
def test_torch_state_dict_loads_key_for_key():
    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Module()
            self.fc1.weight = torch.nn.Parameter(torch.randn(3, 4))
            self.fc1.bias = torch.nn.Parameter(torch.randn(3))
            self.register_buffer("steps", torch.tensor(2))

    ref = TorchNet()
    sd = OrderedDict((k, serve.from_numpy(v.numpy().copy())) for k, v in ref.state_dict().items())
    net = Net()
    net.load_state_dict(sd)
    np.testing.assert_array_equal(net.fc1.weight.detach().numpy(), ref.fc1.weight.detach().numpy())
    assert list(net.state_dict()) == list(ref.state_dict())
