"""The policy loss: clipped surrogate, TIS, KL to a reference, on-policy distillation, entropy.

Per token ``t`` of a window (all arrays ``(W,)``), with ``m_t`` the loss mask, ``A_t`` the
advantage, ``logp_t`` the current policy's logprob of the sampled token (with grad), ``old_t`` the
rollout engine's logprob of it (the window's ``old_logprobs``) and ``sg`` stop-gradient:

**Ratio and truncated importance sampling (TIS).** The ratio's anchor ``a_t`` is ``old_t``, or the
*proximal* logprob ``prox_t`` when the trainer recomputed the sampled tokens' logprobs under the
pre-step weights (engine and trainer kernels differ, so ``prox_t != old_t`` even at equal weights)::

    r_t = exp(logp_t - a_t)
    w_t = min(exp(prox_t - old_t), tis_cap)   with proximal logprobs and tis_cap set; else 1

The tokens were sampled from the engine's distribution, so ``w_t`` re-weights them towards the
trainer's; truncating at ``tis_cap`` bounds the variance that rare mismatched tokens would add.

**Clipped surrogate** (PPO; GRPO is the same on group-relative advantages), to minimise::

    pg_t = max(-A_t r_t, -A_t clip(r_t, 1 - clip_low, 1 + clip_high))
    pg_t = min(pg_t, -c A_t)                  where A_t < 0, under dual clip c > 1

``clip_high > clip_low`` ("clip-higher", DAPO) leaves more room to raise unlikely tokens. For
``A_t < 0`` the first line grows with ``r_t`` without bound; dual clip caps it at ``c |A_t|``.

**KL to a reference**, ``d_t = logp_t - ref_t``, one of Schulman's estimators on the sampled token::

    k1 = d_t            k2 = d_t^2 / 2            k3 = exp(-d_t) - 1 + d_t

As a loss on on-policy samples, their pathwise gradients differ: ``E[grad k1] = 0`` (k1 is a metric, no penalty),
``E[grad k2] = grad KL(pi || ref)`` and ``E[grad k3] = grad KL(ref || pi)`` (GRPO's choice).

**On-policy distillation (OPD)**: the reverse KL to a teacher, ``KL(pi || T) = E_pi[logp - logT]``,
has gradient ``E_pi[(logp - logT) grad logp]``. From engine samples that is the importance-weighted
score-function term (the pathwise ``grad(logp - logT) = grad logp`` has zero mean: noise only)::

    opd_t = w_t r_t sg(logp_t - teacher_t)

so minimising it lowers the logprob of a token the teacher rates below the student and raises one
it rates above. It adds the teacher's signal to reward advantages; ``GroupHook``'s ``opd`` mode
instead makes ``teacher - old`` *the* advantage (clipped like any other): use one, not both.

**Per-token loss**, with ``H_t`` the policy's entropy at the token (a bonus, hence minus)::

    l_t = w_t pg_t + kl_coef k_t + opd_coef opd_t - entropy_coef H_t

Only the score-function terms (surrogate, OPD) carry ``w_t``: they estimate expectations under the
trainer's policy from the engine's samples. The KL and entropy terms are the usual unweighted
penalties at the sampled tokens.

**Aggregation** over a whole optimizer step (every micro-batch of every rank), with ``N`` the
step's loss tokens, ``S`` its sequences with a loss token and ``n_t`` the loss tokens of ``t``'s
sequence::

    token_mean:           L = sum_t m_t l_t / N
    seq_mean_token_sum:   L = sum_t m_t l_t / S
    seq_mean_token_mean:  L = sum_t m_t l_t / (S n_t)        (GRPO: 1/G sum_i 1/|o_i| sum_t)

Every mode is a sum of per-token terms over fixed *global* denominators (``Normaliser``, computed
before the step), so the losses of any split into micro-batches, DP ranks and CP/TP shards add up
to the loss of the whole step, gradients included: each call returns its share, ``loss`` times
``Normaliser.grad_mean_ranks`` so that a backend that *averages* gradients over that many ranks
(DDP, FSDP) ends with the gradient of the step's ``L``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import Tensor

from vlrl.config import Ge, Gt, Lt, validate

Aggregation = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"]

DEFAULT_AGGREGATION: dict[str, Aggregation] = {"ppo": "token_mean", "grpo": "seq_mean_token_mean", "sft": "token_mean"}
"""Each kind's aggregation when the config leaves it None."""


class NonFiniteLossError(FloatingPointError):
    """A micro-batch's loss is NaN or infinite; ``where`` names the micro-batch and rank."""

    def __init__(self, value: float, where: str) -> None:
        super().__init__(f"non-finite loss {value} at {where}")
        self.value = value
        self.where = where


def check_finite(loss: Tensor, where: str) -> None:
    """Raise ``NonFiniteLossError`` if ``loss`` is not finite (a host sync: call it once per micro-batch)."""
    if not torch.isfinite(loss).all():
        raise NonFiniteLossError(loss.item() if loss.numel() == 1 else float("nan"), where)


@dataclass(frozen=True, slots=True, kw_only=True)
class Normaliser:
    """Denominators of one optimizer step, the same on every rank and for every micro-batch."""

    tokens: int
    """``N``: loss tokens in the step, over all micro-batches and DP ranks."""
    sequences: int
    """``S``: sequences of the step with at least one loss token."""
    grad_mean_ranks: int = 1
    """Ranks the backend averages gradients over (DDP/FSDP: the data-parallel group, CP ranks
    included when they are folded into it); the loss is multiplied by it. 1 under SUM reduction."""

    def __post_init__(self) -> None:
        if not 0 <= self.sequences <= self.tokens:
            raise ValueError(f"Normaliser: sequences={self.sequences}, tokens={self.tokens}; expected 0 <= S <= N")
        if (self.sequences == 0) != (self.tokens == 0):
            raise ValueError(f"Normaliser: sequences={self.sequences} and tokens={self.tokens} must be 0 together")
        if self.grad_mean_ranks < 1:
            raise ValueError(f"Normaliser.grad_mean_ranks={self.grad_mean_ranks}; expected >= 1")

    @classmethod
    def from_counts(cls, seq_loss_tokens: Iterable[int], *, grad_mean_ranks: int = 1) -> Normaliser:
        """From the loss-token count of every sequence of the step, known before it starts."""
        counts = [int(n) for n in seq_loss_tokens]
        if any(n < 0 for n in counts):
            raise ValueError(f"Normaliser.from_counts: negative loss-token count in {counts}")
        return cls(tokens=sum(counts), sequences=sum(n > 0 for n in counts), grad_mean_ranks=grad_mean_ranks)


def broadcast_seq_loss_tokens(segment_ids: Tensor, counts: Tensor) -> Tensor:
    """``n_t`` per token, ``(W,)``: ``counts[segment_ids[t]]``, 0 on padding (segment id -1).

    ``counts`` is ``(num_segments,)``: each sequence of the micro-batch's loss tokens over all its
    CP/TP shards, which is why it comes from the whole micro-batch and not from the window.
    """
    real = segment_ids >= 0
    return torch.where(real, counts[segment_ids.clamp(min=0)], 0)


@dataclass(frozen=True, slots=True)
class LossOutput:
    """``loss`` to call backward on, and detached float64 metrics to all-reduce.

    Every metric is a sum (or count) over this window's loss tokens, reduced with SUM, except
    names ending in ``_max``, reduced with MAX; divide by ``tokens`` (or ``sequences``) after the
    reduction for exact means. Keys depend only on the config and the optional inputs given.
    """

    loss: Tensor
    metrics: dict[str, Tensor]


class PolicyLoss:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Policy-gradient loss of the trainer (formulas in ``vlrl.train.loss``)."""

        kind: Literal["ppo", "grpo", "sft"] = "ppo"
        """``ppo`` and ``grpo`` are the clipped surrogate on precomputed advantages (GRPO's are
        group-relative, ``control.advantages``) and differ only in the default aggregation.
        ``sft`` is supervised warm start on demonstrations: ``pg_t = -logp_t`` (advantages and
        rollout logprobs are ignored; KL, OPD and entropy terms still apply)."""

        clip_low: Annotated[float, Gt(0), Lt(1)] = 0.2
        """The ratio's lower clip bound is ``1 - clip_low``."""

        clip_high: Annotated[float, Gt(0)] = 0.28
        """The ratio's upper clip bound is ``1 + clip_high`` (above ``clip_low``: clip-higher)."""

        dual_clip: Annotated[float, Gt(1)] | None = None
        """``c``: caps a negative-advantage token's loss at ``c |A|``; None for no cap."""

        tis_cap: Annotated[float, Gt(0)] | None = None
        """Truncation of the importance weight ``exp(proximal - rollout)``; needs proximal
        logprobs. None: no weight (the ratio alone, against the proximal or rollout logprobs)."""

        kl_coef: Annotated[float, Ge(0)] = 0.0
        """Weight of the KL-to-reference penalty; needs reference logprobs when above 0."""

        kl_estimator: Literal["k1", "k2", "k3"] = "k3"
        """Estimator of the KL to the reference on the sampled token: ``k3`` (GRPO's) or ``k2``;
        ``k1``'s gradient has zero mean, so as a penalty it only adds noise."""

        opd_coef: Annotated[float, Ge(0)] = 0.0
        """Weight of the on-policy distillation term (reverse KL to the teacher); needs teacher
        logprobs when above 0."""

        aggregation: Aggregation | None = None
        """How token losses become the step's loss; None: ``token_mean`` for ``ppo``,
        ``seq_mean_token_mean`` for ``grpo``."""

        entropy_coef: Annotated[float, Ge(0)] = 0.0
        """Weight of the entropy bonus; needs the per-token entropy when above 0."""

        def build(self) -> PolicyLoss:
            return PolicyLoss(validate(self))

    def __init__(self, config: PolicyLoss.Config) -> None:
        self.config = config
        self.aggregation: Aggregation = config.aggregation or DEFAULT_AGGREGATION[config.kind]

    def __call__(
        self,
        logprobs: Tensor,
        *,
        old_logprobs: Tensor,
        advantages: Tensor,
        loss_mask: Tensor,
        seq_loss_tokens: Tensor,
        normaliser: Normaliser,
        proximal_logprobs: Tensor | None = None,
        ref_logprobs: Tensor | None = None,
        teacher_logprobs: Tensor | None = None,
        entropy: Tensor | None = None,
    ) -> LossOutput:
        """This window's share of the step's loss; every array is ``(W,)``.

        ``logprobs`` (with grad) and ``entropy`` come from ``token_logprobs_and_entropy``;
        ``old_logprobs`` are the rollout engine's; ``seq_loss_tokens`` is ``n_t`` from
        ``broadcast_seq_loss_tokens``. Padding and prompt tokens (``loss_mask`` False) add nothing
        and get zero gradient, whatever their values.
        """
        cfg = self._check_inputs(
            logprobs,
            old_logprobs=old_logprobs,
            advantages=advantages,
            loss_mask=loss_mask,
            seq_loss_tokens=seq_loss_tokens,
            proximal_logprobs=proximal_logprobs,
            ref_logprobs=ref_logprobs,
            teacher_logprobs=teacher_logprobs,
            entropy=entropy,
        )
        dtype = torch.promote_types(logprobs.dtype, torch.float32)
        mask = loss_mask
        logp = logprobs.to(dtype)

        def gap(a: Tensor, b: Tensor) -> Tensor:
            """``a - b`` on loss tokens, 0 elsewhere: padding's values never reach exp or the grads."""
            return torch.where(mask, a.to(dtype) - b.to(dtype), 0.0)

        adv = torch.where(mask, advantages.to(dtype), 0.0)
        anchor = old_logprobs if proximal_logprobs is None else proximal_logprobs
        log_ratio = gap(logp, anchor)
        ratio = log_ratio.exp()  # (W,) r_t, 1 off the mask
        weight = torch.ones_like(ratio)  # (W,) w_t
        if cfg.tis_cap is not None:
            importance = gap(proximal_logprobs, old_logprobs).exp()  # (W,) pi_prox / pi_rollout
            weight = importance.clamp(max=cfg.tis_cap)

        clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
        pg = torch.maximum(-adv * ratio, -adv * clipped)  # (W,)
        if cfg.dual_clip is not None:
            pg = torch.where(adv < 0, torch.minimum(pg, -cfg.dual_clip * adv), pg)
        if cfg.kind == "sft":
            pg = torch.where(mask, -logp, 0.0)  # maximum likelihood of the demonstrated tokens
        pg_term = weight * pg  # (W,) w_t pg_t
        per_token = pg_term

        metrics: dict[str, Tensor] = {}
        if ref_logprobs is not None:
            d = gap(logp, ref_logprobs)
            kl = {"k1": d, "k2": d.square() / 2, "k3": (-d).exp() - 1 + d}[cfg.kl_estimator]
            per_token = per_token + cfg.kl_coef * kl
            metrics["ref_kl_sum"] = kl
        if teacher_logprobs is not None:
            reverse_kl = gap(logp, teacher_logprobs)  # logp_t - teacher_t, the one-sample reverse KL
            per_token = per_token + cfg.opd_coef * weight * ratio * reverse_kl.detach()
            metrics["opd_kl_sum"] = reverse_kl
        if entropy is not None:
            ent = torch.where(mask, entropy.to(dtype), 0.0)
            per_token = per_token - cfg.entropy_coef * ent
            metrics["entropy_sum"] = ent

        # (W,) n_t, 1 off the mask; a loss token with n_t = 0 (a caller's bug) makes the loss inf
        n = torch.where(mask, seq_loss_tokens.to(dtype), 1.0)
        step_total = normaliser.tokens if self.aggregation == "token_mean" else normaliser.sequences  # N or S
        per_sequence = n if self.aggregation == "seq_mean_token_mean" else 1.0
        coef = torch.where(mask, normaliser.grad_mean_ranks / (max(step_total, 1) * per_sequence), 0.0)  # (W,)
        loss = (coef * per_token).sum()  # per_token is 0 off the mask: every input went through where

        with torch.no_grad():
            metrics.update(tokens=mask, sequences=1 / n, pg_loss_sum=pg_term)  # 1/n_t: shares sum to 1
            if cfg.kind != "sft":  # the ratio means nothing against demonstrations
                metrics.update(
                    clipped_low=(adv < 0) & (ratio < 1 - cfg.clip_low),
                    clipped_high=(adv > 0) & (ratio > 1 + cfg.clip_high),
                    approx_kl_sum=log_ratio.exp() - 1 - log_ratio,  # k3 of KL(anchor || pi)
                )
            if cfg.dual_clip is not None:
                metrics["dual_clipped"] = (adv < 0) & (ratio > cfg.dual_clip)
            if cfg.tis_cap is not None:
                metrics["tis_clipped"] = importance > cfg.tis_cap
                metrics["tis_weight_sum"] = weight
            out = {name: torch.where(mask, value.detach().double(), 0.0).sum() for name, value in metrics.items()}
            if cfg.kind != "sft":
                out["ratio_max"] = torch.where(mask, ratio.detach().double(), 0.0).max()
        return LossOutput(loss=loss, metrics=out)

    def _check_inputs(self, logprobs: Tensor, **arrays: Tensor | None) -> PolicyLoss.Config:
        """Shapes, the mask's dtype, and the optional inputs the config needs."""
        cfg = self.config
        if logprobs.dim() != 1:
            raise ValueError(f"logprobs has shape {tuple(logprobs.shape)}; expected (W,)")
        for name, array in arrays.items():
            if array is not None and array.shape != logprobs.shape:
                raise ValueError(
                    f"{name} has shape {tuple(array.shape)}; expected {tuple(logprobs.shape)} like logprobs"
                )
        if arrays["loss_mask"].dtype != torch.bool:
            raise ValueError(f"loss_mask has dtype {arrays['loss_mask'].dtype}; expected torch.bool")
        needs = {
            "proximal_logprobs": ("tis_cap", cfg.tis_cap is not None),
            "ref_logprobs": ("kl_coef", cfg.kl_coef > 0),
            "teacher_logprobs": ("opd_coef", cfg.opd_coef > 0),
            "entropy": ("entropy_coef", cfg.entropy_coef > 0),
        }
        for name, (field_name, needed) in needs.items():
            if needed and arrays[name] is None:
                raise ValueError(f"PolicyLoss.Config.{field_name}={getattr(cfg, field_name)} needs {name}; none given")
        return cfg


def token_logprobs_and_entropy(
    logits: Tensor, targets: Tensor, temperature: float = 1.0, *, chunk_size: int = 1024
) -> tuple[Tensor, Tensor]:
    """``(logprobs, entropy)``, each ``(W,)`` float32 (float64 for float64 logits), with grads.

    ``logits`` is ``(W, V)``; row ``i`` is the model's output at position ``i``, which predicts
    the token at ``i + 1``. The caller shifts: for logprobs aligned with token-indexed arrays
    (``old_logprobs[t]`` is token ``t``'s), pass ``logits[:-1]`` with ``targets = token_ids[1:]``
    and place the result at positions ``1..`` (under CP the last row needs the next chunk's
    first token). ``logits / temperature`` is the sampling distribution, as in the engine.

    Memory: rows are processed ``chunk_size`` at a time in float32, forward and backward (which
    recomputes the softmax from ``logits``), so beyond the ``(W, V)`` logits and their gradient
    only ``O(chunk_size * V)`` temporaries and ``O(W)`` saved values exist, whatever ``W``.
    """
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)}; expected (W, V) and (W,)")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature}; expected > 0")
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size}; expected >= 1")
    return _LogprobEntropy.apply(logits, targets, float(temperature), chunk_size)


class _LogprobEntropy(torch.autograd.Function):
    """Chunked ``log_softmax`` gather and entropy. With ``z = logits / T``, ``p = softmax(z)``:

    ``d logp_y / d z_v = [v = y] - p_v`` and ``d H / d z_v = -p_v (log p_v + H)``.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, chunk_size: int):
        dtype = torch.promote_types(logits.dtype, torch.float32)
        width = logits.shape[0]
        logprobs = logits.new_empty(width, dtype=dtype)
        entropy = logits.new_empty(width, dtype=dtype)
        lse = logits.new_empty(width, dtype=dtype)
        for start in range(0, width, chunk_size):
            rows = slice(start, start + chunk_size)
            z = logits[rows].to(dtype) / temperature  # (C, V)
            lse[rows] = z.logsumexp(-1)
            logp = z.sub_(lse[rows, None])  # (C, V) log p, in place of z
            logprobs[rows] = logp.gather(-1, targets[rows, None]).squeeze(-1)
            entropy[rows] = -(logp.exp() * logp).sum(-1)
        ctx.save_for_backward(logits, targets, lse, entropy)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return logprobs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logprobs: Tensor, grad_entropy: Tensor):
        logits, targets, lse, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            logp = (logits[rows].to(lse.dtype) / ctx.temperature).sub_(lse[rows, None])  # (C, V)
            g_lp, g_h = grad_logprobs[rows, None], grad_entropy[rows, None]  # (C, 1)
            grad_z = -logp.exp() * (g_lp + g_h * (logp + entropy[rows, None]))
            grad_z.scatter_add_(-1, targets[rows, None], g_lp)
            grad[rows] = grad_z / ctx.temperature
        return grad, None, None, None
