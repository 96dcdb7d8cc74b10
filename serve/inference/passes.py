"""Passes over a captured trace: which modules fuse into which, and the rewritten copy of the module tree.

- fold: a BatchNorm (eval, running statistics) whose every call took a Conv2d's or Linear's output unchanged, and
  that output went nowhere else, is folded into that layer's weight and bias;
- fuse: an activation the kernels can apply (serve.inference.epilogue) that took the (folded) layer's output the
  same way is fused into the layer's epilogue;
- group: linear layers that always took the same input, and only together (attention's query, key and value),
  run as one product (planned.LinearGroup);
- residual: a convolution whose output always took `out += t` next adds t (and the activation after it) in its
  epilogue (serve.inference.residual);
- addnorm: a linear layer whose output always went next into one add with another tensor (`out + t`, `t + out`,
  `out += t`) adds it in its GEMM's epilogue, and a LayerNorm (over the last dim) runs on the native kernel, in the
  same pass as that GEMM when it reads such a sum (serve.inference.addnorm);
- attention: an nn.MultiheadAttention runs its projections as planned linear layers (serve.inference.attention),
  its output projection taking part in addnorm like any linear layer;
- conv1d: a module that is a linear layer in all but name (transformers' GPT-2 `Conv1D`: an (in, out) weight and
  `addmm`) is planned as a linear layer, and an activation module that is not serve's class (transformers'
  `gelu_new`) fuses when it computes one of the epilogue's activations (serve.inference.lookalikes: the rules).
  Both are recognised by what they are and did, not by name; the other passes then treat them as any linear layer
  and activation.
The original model is never modified: the plan is a copy of the module tree that shares every tensor it does not
change (folded weights are new arrays), with each fused group replaced by one PlannedConv2d/PlannedLinear, the
folded modules by `Skip`s, and max pools by their channels-last form (serve.inference.pooling).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from serve import nn
from serve.inference import lookalikes
from serve.inference.addnorm import PlannedLayerNorm, plannable_norm
from serve.inference.attention import PlannedMultiheadAttention, plannable_attention
from serve.inference.capture import Call, Trace
from serve.inference.choosing import _Fused
from serve.inference.epilogue import activation_name
from serve.inference.planned import LinearGroup, PlannedConv2d, PlannedLinear, Skip
from serve.inference.pooling import PlannedMaxPool2d
from serve.nn import functional as F
from serve.nn.module import Module
from serve.tensor import versions
from serve.tensor.tensor import Tensor

__all__ = ["PASSES", "Rewrite", "plan_rewrites", "rewrite_tree"]

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


@dataclass
class Rewrite:
    """What the passes decided: the fused layers by the producer's name, the modules that became Skips."""

    fused: dict[str, _Fused] = field(default_factory=dict)
    skipped: dict[int, tuple[Module, list[_Fused]]] = field(default_factory=dict)  # id(module) -> (module, producers)
    # conv1d: how many of the "linear" ones are linear layers in all but name (serve.inference.lookalikes)
    counts: dict[str, int] = field(default_factory=lambda: {"bn_folded": 0, "act_fused": 0, "conv": 0, "linear": 0,
                                                            "grouped": 0, "residual_fused": 0, "layer_norm": 0,
                                                            "add_norm": 0, "attention": 0, "conv1d": 0})  # fmt: skip
    passes: tuple[str, ...] = ()
    identities: set[int] = field(default_factory=set)  # id(layer) of transformer layers whose activation fused
    norms: dict[int, PlannedLayerNorm] = field(default_factory=dict)  # id(LayerNorm) -> its planned form
    attentions: dict[int, PlannedMultiheadAttention] = field(default_factory=dict)  # id(MultiheadAttention) -> ...


def _only_follower(trace: Trace, call: Call) -> Call | None:
    """The single leaf call that consumed `call`'s output unchanged, when nothing else (leaf) consumed it."""
    consumers = trace.consumers_of(call)
    if len(consumers) != 1 or trace.producer_of(consumers[0]) is not call or consumers[0].extra_inputs:
        return None
    return consumers[0]


def _common_follower(trace: Trace, calls: list[Call]) -> Module | None:
    """The module that followed every one of `calls` (each call's only consumer), or None."""
    followers = [_only_follower(trace, c) for c in calls]
    if not followers or any(f is None for f in followers):
        return None
    modules = {id(f.module): f.module for f in followers if f is not None}
    return next(iter(modules.values())) if len(modules) == 1 else None


def _foldable_bn(module: Module | None, producer: Module) -> bool:
    if not isinstance(module, _BATCH_NORMS) or module.training or module.running_mean is None:
        return False
    channels = producer.out_channels if isinstance(producer, nn.Conv2d) else producer.out_features
    return module.running_mean.numel() == channels


def _plannable(module: Module) -> bool:
    if type(module) is nn.Conv2d:
        return module.padding_mode == "zeros" and module.weight._dtype.name == "float32"
    return type(module) is nn.Linear and module.weight._dtype.name == "float32"


# all on by default; a subset measures what each one buys
PASSES = ("fold", "fuse", "group", "pool", "addnorm", "attention", "conv1d")


def plan_rewrites(trace: Trace, model: Module, passes: tuple[str, ...] = PASSES) -> Rewrite:
    unknown = set(passes) - set(PASSES)
    if unknown:
        raise ValueError(f"unknown passes {sorted(unknown)}: choose among {list(PASSES)}")
    rw = Rewrite(passes=tuple(passes))
    names = {id(m): n for n, m in model.named_modules()}
    for name, module in model.named_modules():
        addmm = not _plannable(module) and "conv1d" in passes and lookalikes.addmm_linear(module, trace)
        if not (addmm or _plannable(module)):
            continue
        calls = trace.calls_of(module)
        if not calls:
            continue  # never ran on the example: left as it is
        tail_calls, bn, act, act_name = calls, None, None, None
        follower = _common_follower(trace, calls)
        if follower is not None and "fold" in passes and not addmm and _foldable_bn(follower, module):
            bn, tail_calls = follower, trace.calls_of(follower)
            follower = _common_follower(trace, tail_calls) if len(tail_calls) == len(calls) else None
        if follower is not None and "fuse" in passes:
            act_name = activation_name(follower)
            if act_name is None and "conv1d" in passes:
                act_name = lookalikes.activation(follower, trace)
            act = None if act_name is None else follower
        planned: _Fused
        if isinstance(module, nn.Conv2d):
            planned = PlannedConv2d(module, bn, act)
        elif addmm:
            planned = lookalikes.planned_addmm_linear(module, act)
            rw.counts["conv1d"] += 1
        else:
            assert isinstance(module, nn.Linear)  # _plannable admits only these two
            planned = PlannedLinear(module, bn, act)
        if act is not None:
            planned.act = act_name  # the epilogue's name for an activation lookalikes recognised, too
        rw.fused[name] = planned
        rw.counts["conv" if isinstance(module, nn.Conv2d) else "linear"] += 1
        for folded, key in ((bn, "bn_folded"), (act, "act_fused")):
            if folded is not None:
                rw.skipped.setdefault(id(folded), (folded, []))[1].append(planned)
                planned.skipped = True
                rw.counts[key] += 1
    order = [rw.fused[names[id(c.module)]] for c in trace.calls if names.get(id(c.module)) in rw.fused]
    if order:  # mixed precision keeps the first and the last product in float32
        order[0].keep_float32 = order[-1].keep_float32 = True
    if "fuse" in passes:
        _fuse_transformer_activations(model, rw)
        _defer_residual_adds(trace, model, rw)
    if "group" in passes:
        _group_shared_inputs(trace, model, rw)
    if "attention" in passes:
        _plan_attentions(trace, model, rw)
        _first_product_in_attention(trace, names, order, rw)
    if "addnorm" in passes:
        _plan_add_norms(trace, model, rw, _defer_linear_adds(trace, model, rw))
    return rw


def _plan_attentions(trace: Trace, model: Module, rw: Rewrite) -> None:
    """Each multi-head attention that ran and that the plan can run becomes a PlannedMultiheadAttention, its two
    projections planned linear layers (named `<attention>.in_proj` and `<attention>.out_proj` among the fused)."""
    for name, module in model.named_modules():
        if not isinstance(module, nn.MultiheadAttention) or not plannable_attention(module):
            continue
        if not trace.calls_of(module):
            continue
        prefix = f"{name}." if name else ""
        planned = rw.attentions[id(module)] = PlannedMultiheadAttention(module, prefix + "attention")
        rw.fused[prefix + "in_proj"], rw.fused[prefix + "out_proj"] = planned.in_proj, planned.out_proj
        rw.counts["attention"] += 1
        rw.counts["linear"] += 2


def _first_product_in_attention(trace: Trace, names: dict[int, str], order: list[_Fused], rw: Rewrite) -> None:
    """An attention called before the first planned layer holds the model's first product (its input projection,
    which the capture does not see as a call of its own): that projection, not the layer after it, stays float32."""
    first = next((c for c in trace.calls if names.get(id(c.module)) in rw.fused
                  or id(c.module) in rw.attentions), None)  # fmt: skip
    if first is None or id(first.module) not in rw.attentions or not order:
        return
    if order[0] is not order[-1]:
        order[0].keep_float32 = False
    rw.attentions[id(first.module)].in_proj.keep_float32 = True


def _residual_sum(trace: Trace, call: Call) -> tuple[Tensor | None] | None:
    """How `call`'s output (or the same tensor passed on unchanged by leaves such as an eval Dropout) went into
    exactly one add with another tensor and nothing else the capture saw: (the out-of-place sum,) or (None,) for
    `out += t`; None otherwise."""
    t, v = call.output, call.output_version
    if t is None or any(c.output is not t or c.extra_inputs for c in trace.consumers_of(call)):
        return None
    adds, iadd = trace.adds_of(t, v), trace.added_to(t, v)
    if len(adds) + iadd != 1:
        return None
    return (adds[0][1],) if adds else (None,)


def _defer_linear_adds(trace: Trace, model: Module, rw: Rewrite) -> dict[int, tuple[Tensor, int]]:
    """Planned linear layers (no fold, no activation, no group) whose output took one add next at every call return
    it pending (serve.inference.addnorm); the out-of-place sums they made, by id: (sum, its version)."""
    modules = dict(model.named_modules())
    for attention in rw.attentions.values():  # the output projection's calls are the attention's own
        modules[next(n for n, p in rw.fused.items() if p is attention.out_proj)] = attention.original
    sums: dict[int, tuple[Tensor, int]] = {}
    for name, planned in rw.fused.items():
        if not isinstance(planned, PlannedLinear) or planned.act is not None or planned.folded or planned.group:
            continue
        if name not in modules:  # an attention's input projection: no module of its own
            continue
        calls = trace.calls_of(modules[name])
        found = [_residual_sum(trace, c) for c in calls]
        if not calls or any(f is None for f in found):
            continue
        planned.residual_add = True
        rw.counts["residual_fused"] += 1
        for f in found:
            if f is not None and f[0] is not None:
                sums[id(f[0])] = (f[0], versions.version(f[0]._data))
    return sums


def _plan_add_norms(trace: Trace, model: Module, rw: Rewrite, sums: dict[int, tuple[Tensor, int]]) -> None:
    """Every LayerNorm the native kernel runs becomes a PlannedLayerNorm; one that always read such a sum (the GEMM
    and the norm then run in one pass) writes over it when nothing else the capture saw read that sum."""
    for module in model.modules():
        calls = trace.calls_of(module)
        if not calls or not plannable_norm(module):
            continue
        norm = rw.norms[id(module)] = PlannedLayerNorm(module)
        rw.counts["layer_norm"] += 1
        inputs = [sums.get(id(c.input)) for c in calls]
        if any(s is None or s[0] is not c.input or s[1] != c.input_version for s, c in zip(inputs, calls)):
            continue
        rw.counts["add_norm"] += 1
        norm.in_place = all(trace.consumers_of_tensor(c.input, c.input_version) == [c]
                            and not trace.adds_of(c.input, c.input_version)
                            and not trace.added_to(c.input, c.input_version) for c in calls)  # fmt: skip


def _group_shared_inputs(trace: Trace, model: Module, rw: Rewrite) -> None:
    """Planned linear layers (no fold, no activation) that took the same input at every call they made, and
    only together, become one LinearGroup: query, key and value from one product."""
    names = {id(m): n for n, m in model.named_modules()}
    together: dict[tuple[int, int], list[Module]] = {}
    for c in trace.calls:
        layer = rw.fused.get(names.get(id(c.module), ""))
        if isinstance(layer, PlannedLinear) and layer.act is None and not layer.folded and c.input is not None:
            members = together.setdefault((id(c.input), c.input_version), [])
            if c.module not in members:
                members.append(c.module)
    seen: dict[int, set[tuple[int, ...]]] = {}
    for members in together.values():
        key = tuple(id(m) for m in members)
        for m in members:
            seen.setdefault(id(m), set()).add(key)
    groups = {next(iter(keys)) for keys in seen.values() if len(keys) == 1 and len(next(iter(keys))) > 1}
    for key in groups:
        planned = [rw.fused[names[i]] for i in key]
        if len({p.in_features for p in planned}) != 1 or not all(isinstance(p, PlannedLinear) for p in planned):
            continue
        group = LinearGroup([p for p in planned if isinstance(p, PlannedLinear)])
        for p in group.members:
            p.group = group
        rw.counts["grouped"] += 1


def _defer_residual_adds(trace: Trace, model: Module, rw: Rewrite) -> None:
    """A convolution (with no activation of its own) whose folded output took `out += t` before anything read it,
    at every call, returns that output pending, so the add runs in its epilogue (serve.inference.residual); the
    activation that then consumed the sum, at every call, runs there too."""
    names = {id(m): n for n, m in model.named_modules()}
    for conv_name, planned in rw.fused.items():
        if not isinstance(planned, PlannedConv2d) or planned.act is not None or planned.groups != 1:
            continue
        conv = next(m for m in model.modules() if names.get(id(m)) == conv_name)
        ends = trace.calls_of(conv)
        follower = _common_follower(trace, ends) if planned.folded else None
        if follower is not None:  # the folded batch norm's calls end the chain
            ends = trace.calls_of(follower)
        if not ends or not all(trace.added_to(c.output, c.output_version) and not trace.consumers_of(c)
                               for c in ends):  # fmt: skip
            continue
        planned.residual_add = True
        rw.counts["residual_fused"] += 1
        after = [(e, e.output_version + 1) for e in ends]  # each sum: the output one write later
        sums = [[c for c in trace.calls[e.index + 1 :] if c.input is e.output and c.input_version == v]
                for e, v in after]  # fmt: skip
        acts = {id(s[0].module): s[0].module for s in sums if len(s) == 1}
        if len(acts) == 1 and all(len(s) == 1 for s in sums):
            act = next(iter(acts.values()))
            if activation_name(act) is not None:
                planned.act_after_add = activation_name(act)
                rw.skipped.setdefault(id(act), (act, []))[1].append(planned)
                planned.skipped = True


def _fuse_transformer_activations(model: Module, rw: Rewrite) -> None:
    """serve's own transformer layers call their activation as a function between linear1 and a dropout (code
    capture cannot see, but whose only use of linear1's output is known): fuse it into linear1's epilogue."""
    for name, layer in model.named_modules():
        if type(layer) not in (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer):
            continue
        planned = rw.fused.get(f"{name}.linear1" if name else "linear1")
        act = layer.activation
        module: Module | None = None
        if act is F.relu or type(act) is nn.ReLU:
            module = nn.ReLU()
        elif act is F.gelu or (type(act) is nn.GELU and act.approximate == "none"):
            module = nn.GELU()
        if planned is None or module is None or planned.act_module is not None:
            continue
        planned.act_module, planned.act = module, activation_name(module)
        rw.identities.add(id(layer))
        rw.counts["act_fused"] += 1


def rewrite_tree(model: Module, rw: Rewrite) -> Module:
    """A copy of the module tree with the rewrites applied; tensors are shared, not copied."""
    by_id = {id(m): name for name, m in model.named_modules()}
    memo: dict[int, Module] = {}

    def clone(module: Module) -> Module:
        if id(module) in memo:
            return memo[id(module)]
        name = by_id.get(id(module))
        if name in rw.fused:
            new: Module = rw.fused[name]
        elif id(module) in rw.norms:
            new = rw.norms[id(module)]
        elif id(module) in rw.attentions:
            new = rw.attentions[id(module)]
        elif type(module) is nn.MaxPool2d and "pool" in rw.passes:
            new = PlannedMaxPool2d(module)
        elif id(module) in rw.skipped:
            original, producers = rw.skipped[id(module)]
            new = Skip(original, producers)
        else:
            new = copy.copy(module)
            d = new.__dict__
            for registry in ("_parameters", "_buffers"):
                d[registry] = dict(d[registry])
            d["_modules"] = {}
            memo[id(module)] = new
            for child_name, child in module._modules.items():
                d["_modules"][child_name] = None if child is None else clone(child)
            if id(module) in rw.identities:  # its activation now runs in linear1's epilogue
                if "activation" in d["_modules"]:
                    d["_modules"]["activation"] = nn.Identity()
                else:
                    d["activation"] = nn.Identity()
        memo[id(module)] = new
        return new

    return clone(model)
