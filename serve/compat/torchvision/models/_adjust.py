"""Constructor adjustments torchvision makes when a model is built with published weights.

GoogLeNet and Inception v3 were trained with auxiliary heads and on (x - 0.5) / 0.5 inputs: with weights, the
model is built with its heads (so the checkpoint loads strictly) and `transform_input=True` unless the caller
says otherwise, and the heads are dropped afterwards unless `aux_logits=True` was asked for. ViT weights fix the
image size (224, or the SWAG weights' 384/518).
"""

from __future__ import annotations

from typing import Any

from serve.compat.torchvision.models._api import overwrite_named_param


def needs_aux(weights: Any, kwargs: dict[str, Any]) -> None:
    kwargs.setdefault("transform_input", True)
    kwargs["aux_logits"] = True
    kwargs["init_weights"] = False


def drop_aux(model: Any, requested: dict[str, Any]) -> None:
    if requested.get("aux_logits", False):
        return
    model.aux_logits = False
    for head in ("aux1", "aux2", "AuxLogits"):
        if hasattr(model, head):
            setattr(model, head, None)


def image_size_of(weights: Any, kwargs: dict[str, Any]) -> None:
    overwrite_named_param(kwargs, "image_size", weights.meta["min_size"][0])
