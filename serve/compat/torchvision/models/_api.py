"""torchvision's model API on serve.zoo: weights enums, model builders and the registry.

A builder is `name(*, weights=None, progress=True, **kwargs)` around the serve.zoo constructor of the same name.
`weights` is None (random init), a member of the model's `*_Weights` enum, or its name ("IMAGENET1K_V1",
"ResNet50_Weights.IMAGENET1K_V1"); the legacy `pretrained=True` means what it means in torchvision's
`handle_legacy_interface`: the IMAGENET1K_V1 member (not DEFAULT: `resnet50(pretrained=True)` reads
`resnet50-0676ba61.pth`, the V1 file, where DEFAULT is V2's `resnet50-11ad3fa6.pth`), and a ValueError for the models
torchvision publishes no V1 weights for (vit_h_14, regnet_y_128gf). Named weights are read only from the local torch
hub cache, through `serve.compat.torch.hub.load_state_dict_from_url`, whose error names the file and the directory
to put it in: a serving worker never downloads. A missing file is that error for `pretrained=True` too (TorchServe's
Faster R-CNN example builds its backbone so): random weights in its place would be a silent wrong answer wherever the
archive's checkpoint does not cover them. The enum facts (URLs, transform settings, categories, accuracy) are
torchvision's published ones (`_weights_table.py`).
"""

from __future__ import annotations

import fnmatch
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any

from serve.compat.torchvision.models._categories import IMAGENET_CATEGORIES
from serve.compat.torchvision.models._presets import ImageClassification
from serve.compat.torchvision.models._weights_table import WEIGHTS

Builder = Callable[..., Any]
_BUILDERS: dict[str, Builder] = {}
_ENUMS: dict[str, type[WeightsEnum]] = {}


@dataclass(eq=False)
class Weights:
    """One set of published weights: where torch caches it, its eval transform, and its metadata."""

    url: str
    transforms: Callable[..., Any]
    meta: dict[str, Any]


class WeightsEnum(Enum):
    """Base of every `*_Weights` enum: members are `Weights`; `DEFAULT` is an alias of the recommended one."""

    @classmethod
    def verify(cls, obj: Any) -> Any:
        """None, a member, or a member's name (with or without the enum's name before a dot) -> member or None."""
        if obj is None or isinstance(obj, cls):
            return obj
        if isinstance(obj, str):
            name = obj.replace(cls.__name__ + ".", "")
            if name in cls.__members__:
                return cls.__members__[name]
        raise TypeError(
            f"Invalid Weight class provided; expected {cls.__name__} (one of {', '.join(cls.__members__)}) "
            f"but received {obj!r}."
        )

    def get_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The checkpoint from the local torch hub cache (never downloaded)."""
        from serve.compat.torch.hub import load_state_dict_from_url

        kwargs.pop("check_hash", None)  # the cache holds torch's own download; serve does not re-hash it
        return load_state_dict_from_url(self.url, *args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self._name_}"

    def __reduce_ex__(self, protocol: Any) -> Any:
        return getattr, (type(self), self._name_)  # by name: members' values are not comparable after a copy

    @property
    def url(self) -> str:
        return str(self.value.url)

    @property
    def transforms(self) -> Callable[..., Any]:
        return self.value.transforms  # type: ignore[no-any-return]

    @property
    def meta(self) -> dict[str, Any]:
        return self.value.meta  # type: ignore[no-any-return]


def weights_enum(model: str, module: str | None = None) -> type[WeightsEnum]:
    """The `*_Weights` enum of `model`, built once from the published table (its `__module__`: `module`, the
    compat module exposing it, so it pickles by name)."""
    if model not in _ENUMS:
        enum_name, default, rows = WEIGHTS[model]
        members: list[tuple[str, Weights]] = []
        for member, url, tf, num_params, min_size, acc1, acc5, has_categories in rows:
            meta: dict[str, Any] = {"num_params": num_params, "min_size": tuple(min_size),
                                    "_metrics": {"ImageNet-1K": {"acc@1": acc1, "acc@5": acc5}}}  # fmt: skip
            meta["categories"] = list(IMAGENET_CATEGORIES) if has_categories else None
            members.append((member, Weights(url, partial(ImageClassification, **tf), meta)))
        members.append(("DEFAULT", dict(members)[default]))  # same object: an alias, as torchvision's
        make: Any = WeightsEnum
        enum = make(enum_name, members, module=module or __name__)
        _ENUMS[model] = enum
    return _ENUMS[model]


def _resolve_weights(model: str, weights: Any, kwargs: dict[str, Any]) -> Any:
    enum = weights_enum(model)
    if "pretrained" in kwargs:  # torchvision's legacy interface
        pretrained = kwargs.pop("pretrained")
        warnings.warn(
            f"{model}: 'pretrained' is deprecated, use 'weights' instead ({enum.__name__}.IMAGENET1K_V1)", UserWarning,
            stacklevel=3,
        )  # fmt: skip
        if pretrained and weights is None:
            weights = legacy_weights(model, enum)
    return enum.verify(weights)


def legacy_weights(model: str, enum: Any) -> Any:
    """The member torchvision's `pretrained=True` stands for: IMAGENET1K_V1; its error for a model without one."""
    if "IMAGENET1K_V1" not in enum.__members__:
        raise ValueError(f"No weights available for model {model}: pass weights= one of {list(enum.__members__)}")
    return enum["IMAGENET1K_V1"]


def overwrite_named_param(kwargs: dict[str, Any], param: str, new_value: Any) -> None:
    """Set kwargs[param], refusing a different value the caller gave (the weights fix it)."""
    if param in kwargs and kwargs[param] != new_value:
        raise ValueError(f"The parameter '{param}' expected value {new_value} but got {kwargs[param]} instead.")
    kwargs[param] = new_value


def model_builder(
    name: str,
    build: Builder,
    module: str,
    prepare: Callable[[Any, dict[str, Any]], None] | None = None,
    finish: Callable[[Any, dict[str, Any]], None] | None = None,
    remap: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Builder:
    """torchvision's public builder `name(*, weights=None, progress=True, **kwargs)`, registered for get_model,
    exposed by the compat module `module`.

    `prepare(weights, kwargs)` fixes constructor arguments the weights need (num_classes from the categories by
    default), `remap` renames checkpoint keys (DenseNet's legacy names), `finish(model, kwargs)` adjusts the
    model after loading (dropping the auxiliary heads of GoogLeNet and Inception)."""

    def builder(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> Any:
        resolved = _resolve_weights(name, weights, kwargs)
        requested = dict(kwargs)
        if resolved is not None:
            if resolved.meta["categories"] is not None:
                overwrite_named_param(kwargs, "num_classes", len(resolved.meta["categories"]))
            if prepare is not None:
                prepare(resolved, kwargs)
        model = build(**kwargs)
        if resolved is not None:
            state_dict = resolved.get_state_dict(progress=progress)
            model.load_state_dict(remap(state_dict) if remap else state_dict)
            if finish is not None:
                finish(model, requested)
        return model

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = f"torchvision's `{name}(weights=None, progress=True, **kwargs)` on serve ({build.__doc__})"
    builder.__module__ = module  # the compat module exposing it (list_models(module=...))
    _BUILDERS[name] = builder
    return builder


def list_models(module: Any = None, include: str | Iterable[str] | None = None,
                exclude: str | Iterable[str] | None = None) -> list[str]:  # fmt: skip
    """Sorted names of the registered models (of `module` when given), filtered by fnmatch patterns."""
    names = {n for n, b in _BUILDERS.items() if module is None or _in_module(b, module)}
    if include is not None:
        pats = [include] if isinstance(include, str) else list(include)
        names = {n for n in names if any(fnmatch.fnmatch(n, p) for p in pats)}
    if exclude is not None:
        pats = [exclude] if isinstance(exclude, str) else list(exclude)
        names = {n for n in names if not any(fnmatch.fnmatch(n, p) for p in pats)}
    return sorted(names)


def _in_module(builder: Builder, module: Any) -> bool:
    """torchvision's rule: the builder's module sits directly in the package `module` (a compat module object or
    its torchvision/serve name). So `module=models` lists the classification models only (those of
    `models.resnet`, `models.vgg`, ...), `module=models.detection` the detection ones, and a file module such as
    `models.resnet` none."""
    name = getattr(module, "__name__", str(module))
    if not name.startswith("serve."):
        name = "serve.compat." + name
    return bool(builder.__module__.rsplit(".", 1)[0] == name)


def get_model_builder(name: str) -> Builder:
    name = name.lower()
    if name not in _BUILDERS:
        raise ValueError(f"Unknown model {name}: one of {', '.join(sorted(_BUILDERS))}")
    return _BUILDERS[name]


def get_model(name: str, **config: Any) -> Any:
    """Build model `name` with `config` (weights=, num_classes=, ...)."""
    return get_model_builder(name)(**config)


def get_model_weights(name: str | Builder) -> type[WeightsEnum]:
    """The weights enum of a model, by name or builder (also of builders other packages registered, such as
    `models.segmentation`'s: found beside the builder by torchvision's naming, fcn_resnet50 -> FCN_ResNet50_Weights)."""
    key = name if isinstance(name, str) else getattr(name, "__name__", "")
    key = key.lower()
    if key in WEIGHTS:
        return weights_enum(key)
    want = key.replace("_", "")
    for enum in _enums_beside(_BUILDERS.get(key)):
        if enum.__name__.lower().removesuffix("_weights").replace("_", "") == want:
            return enum
    raise ValueError(f"Unknown model {name!r}: no published weights for it")


def _enums_beside(builder: Builder | None) -> list[type[WeightsEnum]]:
    """The WeightsEnum classes in the module that defines `builder`."""
    module = sys.modules.get(getattr(builder, "__module__", "") or "")
    found = vars(module).values() if module is not None else ()
    return [v for v in found if isinstance(v, type) and issubclass(v, WeightsEnum) and v is not WeightsEnum]


def get_weight(name: str) -> Any:
    """A weights member by its full name, "ResNet50_Weights.IMAGENET1K_V2"."""
    enum_name, _, member = name.partition(".")
    for model, (cls_name, _default, _rows) in WEIGHTS.items():
        if cls_name == enum_name:
            return weights_enum(model).verify(member)
    for builder in list(_BUILDERS.values()):
        for enum in _enums_beside(builder):
            if enum.__name__ == enum_name:
                return enum.verify(member)
    raise ValueError(f"Unknown weights enum {enum_name!r} in {name!r}: expected e.g. 'ResNet50_Weights.IMAGENET1K_V2'")
