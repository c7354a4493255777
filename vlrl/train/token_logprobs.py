"""Each sampled token's logprob and the policy's entropy under the distribution the engine sampled
from (temperature, top-p nucleus), computed in row chunks so that a long window's ``(W, V)``
logits never get a float32 copy: the part of the loss that reads the vocabulary, apart from the
loss formulas in ``train.loss``."""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs_and_entropy(
    logits: Tensor,
    targets: Tensor,
    temperature: float | Tensor = 1.0,
    nucleus: Tensor | None = None,
    *,
    chunk_size: int = 1024,
) -> tuple[Tensor, Tensor]:
    """``(logprobs, entropy)``, each ``(W,)`` float32 (float64 for float64 logits), with grads.

    ``logits`` is ``(W, V)``; row ``i`` is the model's output at position ``i``, which predicts
    the token at ``i + 1``. The caller shifts: for logprobs aligned with token-indexed arrays
    (``old_logprobs[t]`` is token ``t``'s), pass ``logits[:-1]`` with ``targets = token_ids[1:]``
    and place the result at positions ``1..`` (under CP the last row needs the next chunk's
    first token).

    Both are of the distribution the engine sampled from (``rollout.engine.sampling``):
    ``softmax(logits / T)`` with ``temperature`` ``T`` (a float, or one per row ``(W,)``),
    restricted and renormalised to the top-p nucleus when ``nucleus`` ``(W,)`` gives a row its
    engine's kept count ``k`` (0: the whole vocabulary). The nucleus is taken from these logits,
    ``{v : z_v >= min(z_(k), z_y)}``: the same *number* of tokens as the engine's, rather than the
    set top-p would pick from these logits, because the trainer's logits differ from the
    engine's by kernel noise, and a token near the mass boundary would flip in or out (a jump in
    the logprob) where a count only swaps near-equal logits (a change within the noise). The
    sampled token is always kept, so its logprob is finite. Gradients flow through the
    restricted distribution: tokens outside the nucleus get none.

    Memory: rows are processed ``chunk_size`` at a time in float32, forward and backward (which
    recomputes the softmax from ``logits``), so beyond the ``(W, V)`` logits and their gradient
    only ``O(chunk_size * V)`` temporaries and ``O(W)`` saved values exist, whatever ``W``. A
    chunk with nucleus rows also takes one top-k per such row.
    """
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)}; expected (W, V) and (W,)")
    rows, vocab = tuple(targets.shape), logits.shape[1]
    if isinstance(temperature, Tensor):
        if temperature.shape != targets.shape or not bool((temperature > 0).all()):
            raise ValueError(f"temperature {tuple(temperature.shape)}; expected one value > 0 per row of {rows}")
    elif not temperature > 0:
        raise ValueError(f"temperature={temperature}; expected > 0")
    if nucleus is not None and (nucleus.shape != targets.shape or not bool(((nucleus >= 0) & (nucleus <= vocab)).all())):
        raise ValueError(f"nucleus {tuple(nucleus.shape)}; expected one count in [0, {vocab}] per row of {rows}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size}; expected >= 1")
    if isinstance(temperature, float | int):
        temperature = float(temperature)
    return _LogprobEntropy.apply(logits, targets, temperature, nucleus, chunk_size)


class _LogprobEntropy(torch.autograd.Function):
    """Chunked ``log_softmax`` gather and entropy. With ``z = logits / T``, ``p = softmax(z)`` over
    the row's nucleus ``N`` (``p_v = 0`` outside it, the whole vocabulary without one):

    ``d logp_y / d z_v = [v = y] - p_v`` and ``d H / d z_v = -p_v (log p_v + H)``,

    both 0 outside ``N`` (its membership is piecewise constant in ``z``). Without a nucleus and
    at a float temperature the operations are exactly those of the whole-vocabulary softmax.
    """

    @staticmethod
    def forward(
        ctx, logits: Tensor, targets: Tensor, temperature: float | Tensor, nucleus: Tensor | None, chunk_size: int
    ):
        dtype = torch.promote_types(logits.dtype, torch.float32)
        width = logits.shape[0]
        logprobs = logits.new_empty(width, dtype=dtype)
        entropy = logits.new_empty(width, dtype=dtype)
        lse = logits.new_empty(width, dtype=dtype)
        floor = None if nucleus is None else logits.new_full((width,), float("-inf"), dtype=dtype)  # (W,)
        for start in range(0, width, chunk_size):
            rows = slice(start, start + chunk_size)
            z = logits[rows].to(dtype) / _per_row(temperature, rows, dtype)  # (C, V)
            if floor is not None:
                floor[rows] = _nucleus_floor(z, targets[rows], nucleus[rows])
                z = _outside_to_inf(z, floor[rows])
            lse[rows] = z.logsumexp(-1)
            logp = z.sub_(lse[rows, None])  # (C, V) log p, in place of z
            logprobs[rows] = logp.gather(-1, targets[rows, None]).squeeze(-1)
            p_logp = logp.exp() * logp
            entropy[rows] = -(p_logp if floor is None else p_logp.nan_to_num_(nan=0.0)).sum(-1)  # 0 * -inf outside N
        saved = (logits, targets, lse, entropy) + (() if floor is None else (floor,))
        saved += (temperature,) if isinstance(temperature, Tensor) else ()
        ctx.save_for_backward(*saved)
        ctx.has_floor, ctx.per_row = floor is not None, isinstance(temperature, Tensor)
        ctx.temperature, ctx.chunk_size = (None if ctx.per_row else temperature), chunk_size
        return logprobs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logprobs: Tensor, grad_entropy: Tensor):
        logits, targets, lse, entropy, *rest = ctx.saved_tensors
        floor = rest.pop(0) if ctx.has_floor else None
        temperature = rest.pop(0) if ctx.per_row else ctx.temperature
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            t = _per_row(temperature, rows, lse.dtype)
            z = logits[rows].to(lse.dtype) / t
            if floor is not None:
                z = _outside_to_inf(z, floor[rows])
            logp = z.sub_(lse[rows, None])  # (C, V)
            g_lp, g_h = grad_logprobs[rows, None], grad_entropy[rows, None]  # (C, 1)
            grad_z = -logp.exp() * (g_lp + g_h * (logp + entropy[rows, None]))
            if floor is not None:
                grad_z.nan_to_num_(nan=0.0)  # 0 * -inf outside N
            grad_z.scatter_add_(-1, targets[rows, None], g_lp)
            grad[rows] = grad_z / t
        return grad, None, None, None, None


def _per_row(temperature: float | Tensor, rows: slice, dtype: torch.dtype) -> float | Tensor:
    """The divisor of a chunk's logits: the float, or the rows' temperatures as a ``(C, 1)`` column."""
    return temperature if isinstance(temperature, float) else temperature[rows, None].to(dtype)


def _nucleus_floor(z: Tensor, targets: Tensor, kept: Tensor) -> Tensor:
    """``(C,)`` lowest logit in each row's nucleus, ``min(z_(k), z_y)``; -inf where ``k`` is 0."""
    rows = kept.nonzero()[:, 0]
    floor = z.new_full((len(z),), float("-inf"))
    if len(rows):
        top = z[rows].topk(int(kept[rows].max()), dim=-1).values  # (R, max k), descending
        kth = top.gather(-1, (kept[rows] - 1)[:, None]).squeeze(-1)
        floor[rows] = torch.minimum(kth, z[rows].gather(-1, targets[rows, None]).squeeze(-1))
    return floor


def _outside_to_inf(z: Tensor, floor: Tensor) -> Tensor:
    """``z`` (C, V) with every logit below its row's ``floor`` (C,) set to -inf."""
    return z.masked_fill(z < floor[:, None], float("-inf"))
