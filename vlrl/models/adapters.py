"""LoRA adapters as a weight push carries them, and how a serving copy of the model applies them.

A LoRA-adapted linear layer computes ``y = W x + s * B (A x)`` with the frozen base ``W``
``(out, in)``, the trained ``A`` ``(r, in)`` and ``B`` ``(out, r)``, and the scale ``s = alpha / r``.
A push names, for each adapted module ``M`` (its checkpoint name, such as
``model.language_model.layers.0.self_attn.q_proj``):

- ``M.lora_A.weight``: ``A``;
- ``M.lora_B.weight``: ``s * B`` (the scale folded in, so an engine needs no LoRA settings);
- ``M.weight`` (optional): the base ``W`` the adapters sit on.

A trainer's first push also carries every other weight of its base model under its checkpoint
name (embeddings, norms, biases, the frozen tower): an engine built from the job's model then
serves the trainer's weights when the trainer was built on another checkpoint (a full-weight warm
start, a resumed run's), not its own frozen ones under the trainer's adapters.

The serving copy holds merged weights, ``W + (s B) A``, and remembers each module's base so that
the next push replaces the adapters' share instead of adding to it. The trainer's own forward
keeps the two terms apart (PEFT), so logprobs agree to float rounding, not bit for bit.

This lives below the trainer and the engines because both speak it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

LORA_A = ".lora_A.weight"
LORA_B = ".lora_B.weight"


def adapted_modules(names: object) -> list[str]:
    """The modules whose ``A`` appears in ``names`` (a push's keys), sorted."""
    return sorted(name.removesuffix(LORA_A) for name in names if name.endswith(LORA_A))


def split_push(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """``state`` -> (plain weights, ``{module: (A, s B)}``); ValueError for an ``A`` without its ``B``
    or the other way round."""
    modules = adapted_modules(state)
    lone_b = sorted(n for n in state if n.endswith(LORA_B) and n.removesuffix(LORA_B) not in modules)
    missing = [m for m in modules if m + LORA_B not in state]
    if lone_b or missing:
        raise ValueError(
            f"update_weights: LoRA pairs incomplete: {missing[:3]} have lora_A and no lora_B,"
            f" {lone_b[:3]} lora_B and no lora_A; a push carries both of every adapted module"
        )
    pairs = {m: (torch.as_tensor(state[m + LORA_A]), torch.as_tensor(state[m + LORA_B])) for m in modules}
    plain = {n: v for n, v in state.items() if not (n.endswith(LORA_A) or n.endswith(LORA_B))}
    return plain, pairs


class MergedAdapters:
    """The base weights under the adapters a serving model has merged in (per module)."""

    def __init__(self) -> None:
        self.bases: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def apply(
        self, weights: Mapping[str, torch.Tensor], pairs: Mapping[str, tuple[torch.Tensor, torch.Tensor]], rebased: set[str]
    ) -> None:
        """Set ``weights[M + '.weight'] = base + (s B) A`` for every pair. ``rebased``: the modules
        whose base the push carried (already copied into ``weights``); any other module keeps the
        base it had, or, the first time, takes its current weight as the base."""
        for module, (a, scaled_b) in pairs.items():
            weight = weights.get(module + ".weight")
            if weight is None:
                raise ValueError(f"update_weights: LoRA adapters for {module!r}, which has no weight in the model")
            if tuple(scaled_b.shape[:1]) + tuple(a.shape[1:]) != tuple(weight.shape) or a.shape[0] != scaled_b.shape[1]:
                raise ValueError(
                    f"update_weights: LoRA pair of {module!r} has A {tuple(a.shape)} and B {tuple(scaled_b.shape)};"
                    f" expected A (r, {weight.shape[1]}) and B ({weight.shape[0]}, r)"
                )
            if module in rebased or module not in self.bases:
                self.bases[module] = weight.detach().clone()
            base = self.bases[module]
            delta = scaled_b.to(torch.float64) @ a.to(torch.float64)  # (out, in), summed in float64
            weight.copy_((base.to(torch.float64) + delta.to(base.device)).to(weight.dtype))
