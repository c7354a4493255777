"""Vision encoders by name, on the generic ``vlrl.registry``, each checked against the plug-in
contract before first use.

A name maps to a factory: a callable ``(**fields) -> VisionEncoder``, or a ``VisionEncoder``
subclass with a nested ``Config`` (built as ``cls.Config(**fields).build()``), or a
``"module:attr"`` path resolved lazily (so are the built-ins and the ``vlrl.encoders`` entry
points). A factory is checked once per registration, when it is first resolved (at ``register``
for a callable): a small instance built from ``check_fields`` must pass ``check_encoder``, so a
broken plug-in fails there with its name and the broken rule instead of deep inside a training
step. The check is the full suite (a few CPU forwards of a small instance), so ``vlrl check
encoder ID`` runs the same rules and prints them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from encoders.protocol import EncoderBatch, EncoderError, VisionEncoder
from vlrl.mm import describe_image
from vlrl.records import MMItemMeta
from vlrl.registry import ENCODERS, ContractError, PluginSpec, Registry

CHECK_SIZES = ((40, 30), (100, 60), (160, 120))
"""``(width, height)`` of the synthetic images the check encodes, strictly growing in area."""

Factory = Callable[..., VisionEncoder]


def check_factory(spec: PluginSpec, factory: Factory) -> None:
    """The registry's check: a small instance from ``spec.check_settings`` (default: the factory's
    ``check_fields``) passes every rule of ``contract``."""
    for _ in contract(_check_instance(spec, factory)):
        pass


def _check_instance(spec: PluginSpec, factory: Factory) -> VisionEncoder:
    fields = spec.check_settings if spec.check_settings is not None else getattr(factory, "check_fields", {})
    try:
        return build(spec.id, factory, fields)
    except TypeError as error:  # an unknown or missing field
        raise ContractError("check_fields", f"the factory refused {dict(fields)}: {error}") from error


BUILTINS = {
    "qwen2vl": "encoders.qwen2vl:Qwen2VLEncoder",
    "qwen2_5vl": "encoders.qwen2_5vl:Qwen25VLEncoder",
    "qwen3vl": "encoders.qwen3vl:Qwen3VLEncoder",
    "siglip": "encoders.siglip:SiglipEncoder",
    "torchvision": "encoders.torchvision_backbone:TorchvisionEncoder",
}
"""The encoders this package ships, registered by path: imported and checked on first use."""

REGISTRY = Registry("encoder", ENCODERS, check_factory, error=EncoderError)
for _builtin, _path in BUILTINS.items():
    REGISTRY.register(_builtin, _path)


def register(
    name: str, factory: Factory | str, *, check_fields: Mapping[str, Any] | None = None, override: bool = False
) -> PluginSpec:
    """Register ``factory`` as ``name``; a callable is checked now, a path when first made.

    ``check_fields`` builds the instance the check runs on (default: the class's
    ``check_fields``, else no fields).
    """
    return REGISTRY.register(name, factory, override=override, check_settings=check_fields)


def registered() -> list[str]:
    """Names registered, built in or installed as entry points."""
    return REGISTRY.registered()


def resolve(name: str) -> Factory:
    """The checked factory of ``name`` (loading and checking a path on first use)."""
    return REGISTRY.resolve(name)


def make(name: str, **fields: Any) -> VisionEncoder:
    """Build the encoder registered as ``name`` with ``fields``."""
    return build(name, resolve(name), fields)


def run_contract(name: str) -> Iterator[str]:
    """``contract`` on the check instance of ``name`` (``vlrl check encoder``), loaded unchecked."""
    spec = REGISTRY.spec(name)
    yield from contract(_check_instance(spec, REGISTRY.load(spec)))


def check_encoder(
    encoder: VisionEncoder, images: Sequence[np.ndarray] | None = None, *, name: str | None = None
) -> None:
    """Raise ``EncoderError`` naming ``name`` (default: the encoder's) and the first rule of
    ``contract`` that ``encoder`` breaks on ``images``."""
    try:
        for _ in contract(encoder, images):
            pass
    except ContractError as error:
        raise EncoderError(name or getattr(encoder, "name", type(encoder).__name__), str(error)) from error


def contract(encoder: VisionEncoder, images: Sequence[np.ndarray] | None = None) -> Iterator[str]:
    """Check the rules in turn on ``images`` (default: ``CHECK_SIZES``), yielding each rule's name
    once it passed; raise ``ContractError`` at the first broken one.

    Rules: each image's forward rows have width ``hidden_size * feature_levels`` ('output shape'), number
    ``num_tokens`` ('num_tokens') and are finite ('finite output'); ``cost`` is finite and positive
    ('cost') and never smaller for a larger image ('cost monotone'); two eval-mode forwards of one
    batch agree ('deterministic'); a batch gives its images' rows in order ('batch order');
    gradients reach the parameters ('gradients').
    """
    if not isinstance(encoder, VisionEncoder):
        raise ContractError("vision encoder", f"is a {type(encoder).__name__}, not a VisionEncoder")
    if images is None:
        rng = np.random.default_rng(0)
        images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for w, h in CHECK_SIZES]
    metas = [describe_image(pixels) for pixels in images]
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            singles = [_check_one(encoder, pixels, meta) for pixels, meta in zip(images, metas)]
        yield from ("output shape", "num_tokens", "finite output")
        _check_costs(encoder, metas)
        yield from ("cost", "cost monotone")
        with torch.no_grad():
            batch = encoder.collate([encoder.preprocess(pixels) for pixels in images])
            joint, again = encoder(batch), encoder(batch)
        if joint.shape != again.shape or not torch.allclose(again, joint, rtol=0, atol=1e-6):
            raise ContractError("deterministic", "two eval-mode forwards of one batch differ")
        yield "deterministic"
        if joint.shape[0] != sum(s.shape[0] for s in singles) or not torch.allclose(
            joint, torch.cat(singles), rtol=1e-4, atol=1e-5
        ):
            raise ContractError("batch order", "a batch's rows differ from its images' rows in order")
        yield "batch order"
        _check_gradients(encoder, batch)
        yield "gradients"
    finally:
        encoder.train(was_training)
        encoder.zero_grad(set_to_none=True)


def _on(meta: MMItemMeta) -> str:
    return f"on image {meta.content_hash[:12]} ({meta.width}x{meta.height})"


def _check_one(encoder: VisionEncoder, pixels: np.ndarray, meta: MMItemMeta) -> torch.Tensor:
    levels = encoder.feature_levels
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ContractError("output shape", f"feature_levels is {levels!r}; expected an int >= 1")
    expected = encoder.num_tokens(meta)
    out = encoder(encoder.collate([encoder.preprocess(pixels)]))
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[1] != encoder.row_width:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ContractError(
            "output shape",
            f"forward gave {shape} {_on(meta)}; expected (n_tokens, {encoder.row_width}):"
            f" hidden_size {encoder.hidden_size} x feature_levels {levels}",
        )
    if out.shape[0] != expected:
        raise ContractError(
            "num_tokens", f"forward gave {out.shape[0]} rows {_on(meta)}; num_tokens said {expected}"
        )
    if not torch.isfinite(out).all():
        raise ContractError("finite output", f"forward gave NaN or inf {_on(meta)}")
    return out


def _check_costs(encoder: VisionEncoder, metas: Sequence[MMItemMeta]) -> None:
    costs = [encoder.cost(meta) for meta in metas]
    for meta, cost in zip(metas, costs):
        if not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost <= 0:
            raise ContractError("cost", f"{cost!r} {_on(meta)}; expected a finite float > 0")
    by_area = sorted(zip(metas, costs), key=lambda mc: mc[0].width * mc[0].height)
    for (small, small_cost), (large, large_cost) in zip(by_area, by_area[1:]):
        if large_cost < small_cost:
            raise ContractError(
                "cost monotone", f"cost {large_cost:g} {_on(large)} < {small_cost:g} of a smaller image"
            )


def _check_gradients(encoder: VisionEncoder, batch: EncoderBatch) -> None:
    encoder.train()
    out = encoder(batch)
    if not out.requires_grad:
        raise ContractError("gradients", "the output is detached from every parameter")
    # A fixed random readout: a plain sum can have zero gradient through a final norm.
    readout = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=out.dtype)
    (out * readout).sum().backward()
    trainable = [(n, p) for n, p in encoder.named_parameters() if p.requires_grad]
    if not trainable:
        raise ContractError("gradients", "the encoder has no trainable parameters")
    missing = [n for n, p in trainable if p.grad is None]
    if missing:
        raise ContractError("gradients", f"no gradient reaches {missing[:3]}")
    if not any(p.grad.abs().sum() > 0 for _, p in trainable):
        raise ContractError("gradients", "every parameter gradient is zero")


def build(name: str, factory: Any, fields: Mapping[str, Any]) -> VisionEncoder:
    """An instance from ``factory`` (resolved already, e.g. on another process), named ``name`` in errors."""
    if isinstance(factory, type) and issubclass(factory, VisionEncoder) and hasattr(factory, "Config"):
        encoder = factory.Config(**fields).build()
    else:
        encoder = factory(**fields)
    if not isinstance(encoder, VisionEncoder):
        raise EncoderError(name, f"factory built a {type(encoder).__name__}, not a VisionEncoder")
    return encoder
