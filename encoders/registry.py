"""Vision encoders by name, each checked against the plug-in contract before first use.

A name maps to a factory: a callable ``(**fields) -> VisionEncoder``, or a ``VisionEncoder``
subclass with a nested ``Config`` (built as ``cls.Config(**fields).build()``), or a
``"module:attr"`` path resolved lazily (so are the ``vlrl.encoders`` entry points). A factory
is checked once, when it is first resolved (at ``register`` for a callable): a small instance
built from ``check_fields`` must pass ``check_encoder``, so a broken plug-in fails there with the
broken rule's name instead of deep inside a training step.
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

import numpy as np
import torch

from encoders.protocol import EncoderBatch, EncoderError, VisionEncoder
from vlrl.mm import MMItemMeta, describe_image

ENTRY_POINT_GROUP = "vlrl.encoders"

CHECK_SIZES = ((40, 30), (100, 60), (160, 120))
"""``(width, height)`` of the synthetic images the check encodes, strictly growing in area."""

BUILTINS = {
    "qwen2vl": "encoders.qwen2vl:Qwen2VLEncoder",
    "siglip": "encoders.siglip:SiglipEncoder",
    "torchvision": "encoders.torchvision_backbone:TorchvisionEncoder",
}

Factory = Callable[..., VisionEncoder]

_lock = threading.Lock()
_targets: dict[str, Factory | str] = dict(BUILTINS)
_check_fields: dict[str, Mapping[str, Any]] = {}


def register(name: str, factory: Factory | str, *, check_fields: Mapping[str, Any] | None = None) -> None:
    """Register ``factory`` as ``name``; a callable is checked now, a path when first made.

    ``check_fields`` builds the instance the check runs on (default: the class's
    ``check_fields``, else no fields).
    """
    if not isinstance(name, str) or not name:
        raise EncoderError(str(name), "name must be a non-empty string")
    if isinstance(factory, str) and ":" not in factory:
        raise EncoderError(name, f"factory {factory!r}; expected 'module:attribute'")
    if check_fields is not None:
        _check_fields[name] = dict(check_fields)
    if not isinstance(factory, str):
        _verify(name, factory)
    with _lock:
        _targets[name] = factory


def registered() -> list[str]:
    """Names registered, built in or installed as entry points."""
    with _lock:
        known = set(_targets)
    return sorted(known | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def resolve(name: str) -> Factory:
    """The checked factory of ``name`` (loading and checking a path on first use)."""
    with _lock:
        target = _targets.get(name)
    if target is None:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            raise EncoderError(name, f"not registered; known: {registered()}")
        target = found[0].value
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as error:
            raise EncoderError(name, f"cannot load {module_name}:{attr}: {error}") from error
        _verify(name, target)
        with _lock:
            _targets[name] = target
    return target


def make(name: str, **fields: Any) -> VisionEncoder:
    """Build the encoder registered as ``name`` with ``fields``."""
    return build(name, resolve(name), fields)


def check_encoder(encoder: VisionEncoder, images: Sequence[np.ndarray] | None = None) -> None:
    """Raise ``EncoderError`` naming the first contract rule ``encoder`` breaks on ``images``.

    Rules: ``num_tokens`` equals each image's rows and the rows have width ``hidden_size``;
    ``cost`` is finite, positive and never smaller for a larger image; a batch gives the images'
    rows in order (checked after eval-mode forward is deterministic); gradients reach the
    parameters.
    """
    name = getattr(encoder, "name", type(encoder).__name__)
    if not isinstance(encoder, VisionEncoder):
        raise EncoderError(name, f"is a {type(encoder).__name__}, not a VisionEncoder")
    if images is None:
        rng = np.random.default_rng(0)
        images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for w, h in CHECK_SIZES]
    metas = [describe_image(pixels) for pixels in images]
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            singles = [_check_one(encoder, name, pixels, meta) for pixels, meta in zip(images, metas)]
            _check_costs(encoder, name, metas)
            batch = encoder.collate([encoder.preprocess(pixels) for pixels in images])
            joint = encoder(batch)
            if joint.shape != encoder(batch).shape or not torch.allclose(encoder(batch), joint, rtol=0, atol=1e-6):
                raise EncoderError(name, "rule 'deterministic': two eval-mode forwards of one batch differ")
            if joint.shape[0] != sum(s.shape[0] for s in singles) or not torch.allclose(
                joint, torch.cat(singles), rtol=1e-4, atol=1e-5
            ):
                raise EncoderError(name, "rule 'batch order': a batch's rows differ from its images' rows in order")
        _check_gradients(encoder, name, batch)
    finally:
        encoder.train(was_training)
        encoder.zero_grad(set_to_none=True)


def _check_one(encoder: VisionEncoder, name: str, pixels: np.ndarray, meta: MMItemMeta) -> torch.Tensor:
    expected = encoder.num_tokens(meta)
    out = encoder(encoder.collate([encoder.preprocess(pixels)]))
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[1] != encoder.hidden_size:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise EncoderError(
            name, f"rule 'output shape': forward gave {shape}; expected (n_tokens, {encoder.hidden_size})", item=meta
        )
    if out.shape[0] != expected:
        raise EncoderError(
            name, f"rule 'num_tokens': forward gave {out.shape[0]} rows; num_tokens said {expected}", item=meta
        )
    if not torch.isfinite(out).all():
        raise EncoderError(name, "rule 'finite output': forward gave NaN or inf", item=meta)
    return out


def _check_costs(encoder: VisionEncoder, name: str, metas: Sequence[MMItemMeta]) -> None:
    costs = [encoder.cost(meta) for meta in metas]
    for meta, cost in zip(metas, costs):
        if not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost <= 0:
            raise EncoderError(name, f"rule 'cost': {cost!r}; expected a finite float > 0", item=meta)
    by_area = sorted(zip(metas, costs), key=lambda mc: mc[0].width * mc[0].height)
    for (small, small_cost), (large, large_cost) in zip(by_area, by_area[1:]):
        if large_cost < small_cost:
            raise EncoderError(
                name, f"rule 'cost monotone': costs {large_cost:g} < {small_cost:g} of a smaller image", item=large
            )


def _check_gradients(encoder: VisionEncoder, name: str, batch: EncoderBatch) -> None:
    encoder.train()
    out = encoder(batch)
    if not out.requires_grad:
        raise EncoderError(name, "rule 'gradients': the output is detached from every parameter")
    # A fixed random readout: a plain sum can have zero gradient through a final norm.
    readout = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=out.dtype)
    (out * readout).sum().backward()
    trainable = [(n, p) for n, p in encoder.named_parameters() if p.requires_grad]
    if not trainable:
        raise EncoderError(name, "rule 'gradients': the encoder has no trainable parameters")
    missing = [n for n, p in trainable if p.grad is None]
    if missing:
        raise EncoderError(name, f"rule 'gradients': no gradient reaches {missing[:3]}")
    if not any(p.grad.abs().sum() > 0 for _, p in trainable):
        raise EncoderError(name, "rule 'gradients': every parameter gradient is zero")


def _verify(name: str, factory: Any) -> None:
    if not callable(factory):
        raise EncoderError(name, f"factory {factory!r} is not callable")
    fields = _check_fields.get(name, getattr(factory, "check_fields", {}))
    check_encoder(build(name, factory, fields))


def build(name: str, factory: Any, fields: Mapping[str, Any]) -> VisionEncoder:
    """An instance from ``factory`` (resolved already, e.g. on another process), named ``name`` in errors."""
    if isinstance(factory, type) and issubclass(factory, VisionEncoder) and hasattr(factory, "Config"):
        encoder = factory.Config(**fields).build()
    else:
        encoder = factory(**fields)
    if not isinstance(encoder, VisionEncoder):
        raise EncoderError(name, f"factory built a {type(encoder).__name__}, not a VisionEncoder")
    return encoder
