"""The policy loss: clipped surrogate, truncated importance sampling, on-policy distillation, KL to a
reference, entropy.

Per token ``t`` of a window (all arrays ``(W,)``), with ``m_t`` the loss mask, ``A_t`` the
advantage, ``logp_t`` the current policy's logprob of the sampled token (with grad), ``old_t`` the
rollout engine's logprob of it (the window's ``old_logprobs``) and ``sg`` stop-gradient:

**Ratio**, against the rollout engine's logprobs::

    r_t = exp(logp_t - old_t)

**Clipped surrogate** (PPO; GRPO is the same on group-relative advantages), to minimise::

    pg_t = max(-A_t r_t, -A_t clip(r_t, 1 - clip_low, 1 + clip_high))
    pg_t = min(pg_t, -c A_t)                  where A_t < 0, under dual clip c > 1

``clip_high > clip_low`` ("clip-higher", DAPO) leaves more room to raise unlikely tokens. For
``A_t < 0`` the first line grows with ``r_t`` without bound; dual clip caps it at ``c |A_t|``.

**On-policy distillation (OPD)**: the reverse KL to a teacher, ``KL(pi || T) = E_pi[logp - logT]``,
has gradient ``E_pi[(logp - logT) grad logp]``. From engine samples that is the score-function
term (the pathwise ``grad(logp - logT) = grad logp`` has zero mean: noise only)::

    opd_t = r_t sg(logp_t - teacher_t)

so minimising it lowers the logprob of a token the teacher rates below the student and raises one
it rates above. It adds the teacher's signal to reward advantages; ``GroupHook``'s ``opd`` mode
instead makes ``teacher - old`` *the* advantage (clipped like any other): use one, not both.

**Per-token loss**, with ``H_t`` the policy's entropy at the token (a bonus, hence minus)::

    l_t = pg_t + opd_coef opd_t - entropy_coef H_t

**Truncated importance sampling (TIS, decoupled PPO).** ``prox_t`` is the sampled token's logprob
under the *proximal* policy, the trainer's weights before this update. The trainer takes one
optimizer step per batch, so the proximal policy is the current forward's, ``prox_t = sg(logp_t)``,
whatever policy version sampled the token. Engine and trainer kernels differ, and an asynchronous
rollout may come from older weights, so ``prox_t != old_t``; TIS anchors the ratio at ``prox_t``
(AReaL's decoupled objective) and re-weights the score-function terms (surrogate, OPD) from the
behaviour policy to the proximal one, truncated to bound the variance rare mismatched tokens add::

    w_t = min(exp(prox_t - old_t), tis_cap)     r_t = exp(logp_t - prox_t)
    l_t = w_t pg_t + w_t opd_coef opd_t + ...

With one step per batch ``r_t`` is 1 in value (its gradient is ``grad logp_t``), so ``pg_t`` is the
truncated importance-weighted policy gradient and the ratio clip does not bind.

**KL to a reference** (``ref_t``: the sampled token's logprob under a frozen reference model, by
default the weights the trainer started from) adds ``kl_coef k_t``, ``d_t = logp_t - ref_t``, one
of Schulman's estimators::

    k1 = d_t            k2 = d_t^2 / 2            k3 = exp(-d_t) - 1 + d_t

As a loss on on-policy samples, their pathwise gradients differ: ``E[grad k1] = 0`` (k1 is a metric,
no penalty), ``E[grad k2] = grad KL(pi || ref)`` and ``E[grad k3] = grad KL(ref || pi)`` (GRPO's).

**Aggregation** over a whole optimizer step (every micro-batch of every rank), with ``N`` the
step's loss tokens, ``S`` its sequences with a loss token and ``n_t`` the loss tokens of ``t``'s
sequence::

    token_mean:           L = sum_t m_t l_t / N
    seq_mean_token_sum:   L = sum_t m_t l_t / S
    seq_mean_token_mean:  L = sum_t m_t l_t / (S n_t)        (GRPO: 1/G sum_i 1/|o_i| sum_t)

Every mode is a sum of per-token terms over fixed *global* denominators (``Normaliser``, computed
before the step), so the losses of any split into micro-batches, DP ranks and CP/TP shards add up
to the loss of the whole step, gradients included, when the backend *sums* gradients over ranks
(the trainer's FSDP does): each call returns its share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import Tensor

from vlrl.config import ConfigError, Ge, Gt, Lt, validate
from vlrl.errors import PicklesWhole
from vlrl.records import LossTerm, fields_for

Aggregation = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"]
KLEstimator = Literal["k1", "k2", "k3"]

DEFAULT_AGGREGATION: dict[str, Aggregation] = {"ppo": "token_mean", "grpo": "seq_mean_token_mean", "sft": "token_mean"}
"""Each kind's aggregation when the config leaves it None."""


RL_DUAL_CLIP = 3.0
"""The training job's RL loss caps a negative-advantage token's loss at this many times its
advantage by default (``TrainJob.Config.loss``, ``recipes.base_recipe``): with rollouts ahead of
training (``driver.prefetch_batches``, ``max_staleness`` 1) most tokens are one version old, and
plain PPO weights a negative-advantage token the policy has since made likelier by its ratio,
without bound (11.6 and 17.2 were seen on the main job); the dual clip gives it no gradient past
3, and keeps PPO's clip (the trust region against the sampling policy) everywhere else. At lag 0
with an exact engine the ratio is 1 and the step is the plain one. Measured on the main job
against TIS (``tis_cap=2``), two task seeds each from one warm start (``docs/lab/training-runs.md``):
0.875 and 0.875 at step 50 against 0.845 and 0.835; TIS here drops the clip (its ratio is against
the trainer's own weights) and learned less."""


class NonFiniteLossError(PicklesWhole, FloatingPointError):
    """A micro-batch's loss is NaN or infinite; ``where`` names the micro-batch and rank."""

    def __init__(self, value: float, where: str) -> None:
        super().__init__(f"non-finite loss {value} at {where}")
        self.value = value
        self.where = where


@dataclass(frozen=True, slots=True, kw_only=True)
class Normaliser:
    """Denominators of one optimizer step, the same on every rank and for every micro-batch."""

    tokens: int
    """``N``: loss tokens in the step, over all micro-batches and DP ranks."""
    sequences: int
    """``S``: sequences of the step with at least one loss token."""

    def __post_init__(self) -> None:
        if not 0 <= self.sequences <= self.tokens:
            raise ValueError(f"Normaliser: sequences={self.sequences}, tokens={self.tokens}; expected 0 <= S <= N")
        if (self.sequences == 0) != (self.tokens == 0):
            raise ValueError(f"Normaliser: sequences={self.sequences} and tokens={self.tokens} must be 0 together")


@dataclass(frozen=True, slots=True)
class LossOutput:
    """``loss`` to call backward on, and detached float64 metrics to all-reduce.

    Every metric is a sum (or count) over this window's loss tokens, reduced with SUM, except
    names ending in ``_max``, reduced with MAX; divide by ``tokens`` (or ``sequences``) after the
    reduction for exact means. Keys depend only on the config and the optional inputs given.
    """

    loss: Tensor
    metrics: dict[str, Tensor]


def clipped_surrogate(
    ratio: Tensor, advantages: Tensor, *, clip_low: float, clip_high: float, dual_clip: float | None
) -> Tensor:
    """``pg_t``, ``(W,)``: the clipped surrogate, dual-clipped where ``A_t < 0`` when ``dual_clip`` is set."""
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    pg = torch.maximum(-advantages * ratio, -advantages * clipped)
    if dual_clip is not None:
        pg = torch.where(advantages < 0, torch.minimum(pg, -dual_clip * advantages), pg)
    return pg


def importance_weight(proximal_logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor, cap: float) -> Tensor:
    """TIS's ``w_t = min(exp(prox_t - old_t), cap)`` on loss tokens, 1 elsewhere, ``(W,)``; the
    caller passes detached ``prox_t``, so the weight carries no gradient."""
    gap = torch.where(loss_mask, proximal_logprobs - old_logprobs, 0.0)
    return gap.exp().clamp(max=cap)


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, loss_mask: Tensor, estimator: KLEstimator) -> Tensor:
    """``k_t`` of ``d_t = logp_t - ref_t`` on loss tokens, 0 elsewhere, ``(W,)``, with grad through ``logprobs``."""
    d = torch.where(loss_mask, logprobs - ref_logprobs, 0.0)
    if estimator == "k1":
        return d
    if estimator == "k2":
        return d.square() / 2
    return (-d).exp() - 1 + d


def step_weights(loss_mask: Tensor, seq_loss_tokens: Tensor, normaliser: Normaliser, aggregation: Aggregation) -> Tensor:
    """``(W,)`` the coefficient of ``l_t`` in the step's loss: ``1/N``, ``1/S`` or ``1/(S n_t)``, 0 off the mask.

    ``seq_loss_tokens`` is ``n_t`` as floats; a loss token with ``n_t = 0`` (a caller's bug) makes
    the loss inf rather than vanish."""
    step_total = normaliser.tokens if aggregation == "token_mean" else normaliser.sequences  # N or S
    per_sequence = seq_loss_tokens if aggregation == "seq_mean_token_mean" else torch.ones_like(seq_loss_tokens)
    return torch.where(loss_mask, 1.0 / (max(step_total, 1) * per_sequence), 0.0)


class PolicyLoss:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Policy-gradient loss of the trainer (formulas in ``vlrl.train.loss``)."""

        kind: Literal["ppo", "grpo", "sft"] = "ppo"
        """``ppo`` and ``grpo`` are the clipped surrogate on precomputed advantages (GRPO's are
        group-relative, ``control.advantages``) and differ only in the default aggregation.
        ``sft`` is supervised warm start on demonstrations: ``pg_t = -logp_t`` (advantages and
        rollout logprobs are ignored; OPD and entropy terms still apply)."""

        clip_low: Annotated[float, Gt(0), Lt(1)] = 0.2
        """The ratio's lower clip bound is ``1 - clip_low``."""

        clip_high: Annotated[float, Gt(0)] = 0.28
        """The ratio's upper clip bound is ``1 + clip_high`` (above ``clip_low``: clip-higher)."""

        dual_clip: Annotated[float, Gt(1)] | None = None
        """``c``: caps a negative-advantage token's loss at ``c |A|``; None for no cap."""

        tis_cap: Annotated[float, Gt(0)] | None = None
        """Truncated importance sampling: the cap of ``exp(proximal - rollout)``, the weight that
        moves each token's update from the policy that sampled it to the trainer's (2.0 is
        common); None: the ratio against the rollout logprobs, clipped, as plain PPO."""

        kl_coef: Annotated[float, Ge(0)] = 0.0
        """Weight of the KL-to-reference penalty (``Trainer.Config.reference`` is the reference;
        the trainer then keeps a frozen copy of it and runs one more forward per micro-batch)."""

        kl_estimator: KLEstimator = "k3"
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

        router_aux_coef: Annotated[float, Ge(0)] | None = None
        """Weight of a mixture-of-experts model's load-balancing loss (``train.moe``: the family's
        formula per sequence, averaged over the step's sequences); None: the checkpoint's own
        ``router_aux_loss_coef``. A dense model has none."""

        routing_replay: Literal["off", "rollout"] = "off"
        """A mixture-of-experts model's routing in training: ``off``, each token goes to the
        experts the trainer's router picks; ``rollout``, to those it went to in the rollout, which
        the engines then record (``EmbeddedEngine.Config.record_routing``), the gate weights still
        from the trainer's router (``train.moe``). The embedded engine only, MoE families only."""

        mismatch_warn: Annotated[float, Gt(0)] | None = 1.0
        """A turn sampled by older weights than the trainer's (lag >= 1: rollouts ahead of training)
        whose mean ``|logp_train - logp_rollout|`` over its loss tokens exceeds this is logged as a
        warning naming the sequence, the turn and its images (``train.mismatch``); at lag >= 1 the
        gap holds the policy's own change, so the bound is loose. None: no warning at any lag. The
        mismatch metrics are reported either way."""

        mismatch_warn_lag0: Annotated[float, Gt(0)] | None = None
        """The same for a turn sampled by the weights the trainer holds (lag 0), where the gap is
        the engine's kernels against the trainer's. None: from the engine's measured noise
        (``train.mismatch.lag0_threshold``; the training job sets it from its engine, a trainer
        built alone uses ``LAG0_FLOOR``, 1e-3, for the embedded engine in float32)."""

        def check(self) -> None:
            if self.kind == "sft" and self.tis_cap is not None:
                raise ConfigError("tis_cap", self.tis_cap, "None for kind='sft': a demonstration has no sampling policy")
            if self.kl_coef > 0 and self.kl_estimator == "k1":
                raise ConfigError(
                    "kl_estimator", "k1", "'k2' or 'k3' when kl_coef > 0: k1's gradient has zero mean, a penalty of noise"
                )

        def payload_fields(self) -> tuple[str, ...]:
            """The payload fields this loss reads: what the packer packs (``records.fields_for``)."""
            terms: set[LossTerm] = {"likelihood" if self.kind == "sft" else "policy_gradient"}
            if self.opd_coef > 0:
                terms.add("distillation")
            return fields_for(terms)

        def build(self) -> PolicyLoss:
            return PolicyLoss(validate(self))

    def __init__(self, config: PolicyLoss.Config) -> None:
        self.config = config
        self.aggregation: Aggregation = config.aggregation or DEFAULT_AGGREGATION[config.kind]

    def __call__(
        self,
        logprobs: Tensor,
        *,
        old_logprobs: Tensor | None = None,
        advantages: Tensor | None = None,
        loss_mask: Tensor,
        seq_loss_tokens: Tensor,
        normaliser: Normaliser,
        teacher_logprobs: Tensor | None = None,
        ref_logprobs: Tensor | None = None,
        entropy: Tensor | None = None,
    ) -> LossOutput:
        """This window's share of the step's loss; every array is ``(W,)``.

        ``logprobs`` (with grad) and ``entropy`` come from ``token_logprobs_and_entropy``;
        ``old_logprobs`` are the rollout engine's and, with ``advantages``, needed by every kind but
        ``sft`` (a demonstration has no sampling policy: its ratio is 1); ``seq_loss_tokens`` is ``n_t``, counted over
        the sequence's every shard; ``ref_logprobs`` are the reference model's (no grad), needed
        when ``kl_coef > 0``. Padding and prompt tokens (``loss_mask`` False) add nothing
        and get zero gradient, whatever their values: every input goes through ``where`` first.
        """
        self._check_inputs(
            logprobs, old_logprobs=old_logprobs, advantages=advantages, loss_mask=loss_mask,
            seq_loss_tokens=seq_loss_tokens, teacher_logprobs=teacher_logprobs, ref_logprobs=ref_logprobs,
            entropy=entropy,
        )  # fmt: skip
        mask = loss_mask
        dtype = torch.promote_types(logprobs.dtype, torch.float32)

        def on_loss(x: Tensor) -> Tensor:
            """``x`` on loss tokens, 0 elsewhere: padding's values never reach exp or the grads."""
            return torch.where(mask, x.to(dtype), 0.0)

        logp = logprobs.to(dtype)
        weight = None
        if self.config.kind == "sft":
            adv = log_ratio = torch.zeros_like(logp)
            ratio = torch.ones_like(logp)
            pg = on_loss(-logp)  # (W,) pg_t
        else:
            adv = on_loss(advantages)
            log_ratio = on_loss(logp - old_logprobs.to(dtype))  # against the behaviour policy: metrics, and plain PPO
            ratio = log_ratio.exp()  # (W,) r_t, 1 off the mask
            if self.config.tis_cap is not None:
                weight = importance_weight(logp.detach(), old_logprobs.to(dtype), mask, self.config.tis_cap)  # (W,) w_t
                ratio = on_loss(logp - logp.detach()).exp()  # (W,) r_t against the proximal policy: 1, with grad
            pg = self._surrogate(ratio, adv)  # (W,) pg_t
        extra, sums = self._extra_terms(logp, ratio, on_loss, teacher_logprobs, entropy, weight)
        if weight is not None:
            pg = weight * pg
            sums["tis_weight_sum"] = on_loss(weight)
            sums["tis_truncated"] = mask & (weight >= self.config.tis_cap)
        if ref_logprobs is not None:
            kl = kl_estimate(logp, ref_logprobs.to(dtype), mask, self.config.kl_estimator)  # (W,) k_t
            extra = extra + self.config.kl_coef * kl
            sums["ref_kl_sum"] = kl
        n = torch.where(mask, seq_loss_tokens.to(dtype), 1.0)  # (W,) n_t, 1 off the mask
        loss = (step_weights(mask, n, normaliser, self.aggregation) * (pg + extra)).sum()
        return LossOutput(loss=loss, metrics=self._metrics(mask, n, pg, adv, ratio, log_ratio, sums))

    def _surrogate(self, ratio: Tensor, adv: Tensor) -> Tensor:
        cfg = self.config
        return clipped_surrogate(ratio, adv, clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip=cfg.dual_clip)

    def _extra_terms(
        self,
        logp: Tensor,
        ratio: Tensor,
        on_loss: Callable[[Tensor], Tensor],
        teacher_logprobs: Tensor | None,
        entropy: Tensor | None,
        weight: Tensor | None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``w_t opd_coef opd_t - entropy_coef H_t`` ``(W,)`` (``w_t`` the TIS weight, or 1), and the
        per-token values summed as metrics."""
        cfg = self.config
        extra = torch.zeros_like(ratio)
        sums: dict[str, Tensor] = {}
        if teacher_logprobs is not None:
            reverse_kl = on_loss(logp - teacher_logprobs.to(logp.dtype))  # logp_t - teacher_t, a one-sample reverse KL
            opd = cfg.opd_coef * ratio * reverse_kl.detach()
            extra = extra + (opd if weight is None else weight * opd)
            sums["opd_kl_sum"] = reverse_kl
        if entropy is not None:
            ent = on_loss(entropy)
            extra = extra - cfg.entropy_coef * ent
            sums["entropy_sum"] = ent
        return extra, sums

    @torch.no_grad()
    def _metrics(
        self, mask: Tensor, n: Tensor, pg: Tensor, adv: Tensor, ratio: Tensor, log_ratio: Tensor, sums: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        """Sums over the window's loss tokens (``ratio_max``: a max), as ``LossOutput`` says."""
        cfg = self.config
        values = {"tokens": mask, "sequences": 1 / n, "pg_loss_sum": pg, **sums}  # 1/n_t: a sequence's shares sum to 1
        if cfg.kind != "sft":  # the ratio means nothing against demonstrations
            values.update(
                clipped_low=(adv < 0) & (ratio < 1 - cfg.clip_low),
                clipped_high=(adv > 0) & (ratio > 1 + cfg.clip_high),
                approx_kl_sum=ratio - 1 - log_ratio,  # k3 of KL(old || pi)
            )
        if cfg.dual_clip is not None:
            values["dual_clipped"] = (adv < 0) & (ratio > cfg.dual_clip)
        out = {name: torch.where(mask, value.detach().double(), 0.0).sum() for name, value in values.items()}
        if cfg.kind != "sft":
            out["ratio_max"] = torch.where(mask, ratio.detach().double(), 0.0).max()
        return out

    def _check_inputs(self, logprobs: Tensor, **arrays: Tensor | None) -> None:
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
            "old_logprobs": ("kind", cfg.kind != "sft"),
            "advantages": ("kind", cfg.kind != "sft"),
            "teacher_logprobs": ("opd_coef", cfg.opd_coef > 0),
            "ref_logprobs": ("kl_coef", cfg.kl_coef > 0),
            "entropy": ("entropy_coef", cfg.entropy_coef > 0),
        }
        for name, (field_name, needed) in needs.items():
            if needed and arrays[name] is None:
                raise ValueError(f"PolicyLoss.Config.{field_name}={getattr(cfg, field_name)} needs {name}; none given")
