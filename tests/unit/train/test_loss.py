"""``PolicyLoss`` against hand-computed values, and the exactness of its normalisation under any split.

The split test cuts a batch the way a step does (DP ranks, micro-batches, CP windows cutting
sequences in the middle, padded windows) and checks that losses, gradients and metrics add up to
those of the whole batch in one piece, for every aggregation.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from vlrl.config import ConfigError
from vlrl.train.loss import (
    LossOutput,
    Normaliser,
    PolicyLoss,
    importance_weight,
    kl_estimate,
)

F64 = torch.float64
RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


def _t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _normaliser(seq_loss_tokens: list[int]) -> Normaliser:
    """The step's ``Normaliser`` from every sequence's loss-token count."""
    return Normaliser(tokens=sum(seq_loss_tokens), sequences=sum(n > 0 for n in seq_loss_tokens))


def _one_sequence(loss: PolicyLoss, logprobs: torch.Tensor, **arrays) -> LossOutput:
    """``loss`` on one sequence whose every token is a loss token."""
    w = len(logprobs)
    return loss(
        logprobs,
        loss_mask=torch.ones(w, dtype=torch.bool),
        seq_loss_tokens=torch.full((w,), w),
        normaliser=Normaliser(tokens=w, sequences=1),
        **arrays,
    )


# --- the clipped surrogate -------------------------------------------------------------------

# (advantage, ratio, dual_clip, loss, d loss / d logp); clip range [0.8, 1.28]
SURROGATE = {
    "pos_unclipped_low_ratio": (1.0, 0.5, None, -0.5, -0.5),
    "pos_inside": (1.0, 1.1, None, -1.1, -1.1),
    "pos_clipped_high": (1.0, 1.5, None, -1.28, 0.0),
    "pos_dual_has_no_effect": (2.0, 4.0, 3.0, -2.56, 0.0),
    "neg_clipped_low": (-1.0, 0.5, None, 0.8, 0.0),
    "neg_inside": (-1.0, 0.9, None, 0.9, 0.9),
    "neg_high_ratio_unclipped": (-1.0, 1.5, None, 1.5, 1.5),
    "neg_below_dual_cap": (-1.0, 2.0, 3.0, 2.0, 2.0),
    "neg_dual_clipped": (-2.0, 4.0, 3.0, 6.0, 0.0),
    "zero_advantage": (0.0, 3.0, None, 0.0, 0.0),
}


@pytest.mark.parametrize(("adv", "ratio", "dual", "expected", "grad"), SURROGATE.values(), ids=SURROGATE.keys())
def test_clipped_surrogate_by_hand(adv, ratio, dual, expected, grad):
    loss = PolicyLoss.Config(clip_low=0.2, clip_high=0.28, dual_clip=dual).build()
    old = _t([-1.3])
    logp = (old + math.log(ratio)).requires_grad_()
    out = _one_sequence(loss, logp, old_logprobs=old, advantages=_t([adv]))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(expected)
    assert logp.grad.item() == pytest.approx(grad, abs=1e-12)
    m = out.metrics
    assert m["clipped_high"].item() == (adv > 0 and ratio > 1.28)
    assert m["clipped_low"].item() == (adv < 0 and ratio < 0.8)
    assert ("dual_clipped" in m) == (dual is not None)
    if dual is not None:
        assert m["dual_clipped"].item() == (adv < 0 and ratio > dual)
    assert m["ratio_max"].item() == pytest.approx(ratio)
    assert m["approx_kl_sum"].item() == pytest.approx(ratio - 1 - math.log(ratio))


# --- truncated importance sampling and KL to a reference: math only, not wired yet -----------


def test_importance_weight_is_truncated_and_one_off_the_mask():
    old = _t([-1.0, -2.0, -0.5, float("nan")])
    proximal = old + _t([math.log(3.0), math.log(0.5), 0.0, 0.0])  # 3 -> capped at 2, 0.5, 1, padding
    mask = _t([True, True, True, False], torch.bool)
    assert importance_weight(proximal, old, mask, cap=2.0).tolist() == pytest.approx([2.0, 0.5, 1.0, 1.0])


@pytest.mark.parametrize(
    ("estimator", "value", "grad"),
    [
        ("k1", lambda d: d, lambda d: 1.0),
        ("k2", lambda d: d * d / 2, lambda d: d),
        ("k3", lambda d: math.exp(-d) - 1 + d, lambda d: 1 - math.exp(-d)),
    ],
)
def test_kl_estimators_match_their_formulas(estimator, value, grad):
    ref = _t([-1.0, -2.0, float("nan")])
    gaps = [0.3, -0.7]  # d = logp - ref
    logp = torch.cat([ref[:2] + _t(gaps), _t([50.0])]).requires_grad_()
    mask = _t([True, True, False], torch.bool)
    kl = kl_estimate(logp, ref, mask, estimator)
    kl.sum().backward()
    assert kl.tolist() == pytest.approx([*(value(d) for d in gaps), 0.0])
    assert logp.grad.tolist() == pytest.approx([*(grad(d) for d in gaps), 0.0])


# --- OPD, entropy -----------------------------------------------------------------------------


def test_opd_term_estimates_reverse_kl_and_moves_logprobs_towards_the_teacher():
    loss = PolicyLoss.Config(opd_coef=1.0).build()
    teacher = _t([-0.5, -3.0])  # above the student on token 0, below it on token 1
    student = _t([-1.5, -1.0])
    logp = student.clone().requires_grad_()
    out = _one_sequence(loss, logp, old_logprobs=student, advantages=_t([0.0, 0.0]), teacher_logprobs=teacher)
    out.loss.backward()
    reverse_kl = student - teacher  # [-1, 2]
    assert out.loss.item() == pytest.approx(reverse_kl.sum().item() / 2)  # r = 1 on policy
    assert logp.grad.tolist() == pytest.approx((reverse_kl / 2).tolist())  # sg(k) * d r / d logp
    assert out.metrics["opd_kl_sum"].item() == pytest.approx(1.0)
    stepped = student - 0.1 * logp.grad  # one gradient-descent step
    assert ((stepped - teacher).abs() < (student - teacher).abs()).all()


def test_entropy_bonus_lowers_the_loss_and_pushes_entropy_up():
    loss = PolicyLoss.Config(entropy_coef=0.1).build()
    entropy = _t([2.0, 1.0]).requires_grad_()
    old = _t([-1.0, -1.0])
    out = _one_sequence(loss, old.clone(), old_logprobs=old, advantages=_t([0.0, 0.0]), entropy=entropy)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.1 * 3 / 2)
    assert entropy.grad.tolist() == pytest.approx([-0.05, -0.05])
    assert out.metrics["entropy_sum"].item() == pytest.approx(3.0)


# --- exact normalisation under any split ------------------------------------------------------

DP, MICRO, CP, PAD = 2, 3, 2, 3


def _batch(seed: int):
    """Sequences of random lengths: prompt tokens, then response tokens with a few masked out."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 12, size=DP * MICRO * 2)
    masks = []
    for length in lengths:
        mask = np.arange(length) >= rng.integers(1, length)
        mask &= rng.random(length) > 0.2
        mask[-1] = True
        masks.append(mask)
    masks[3][:] = False  # a sequence with no loss token counts for nothing, not even in S
    total = int(lengths.sum())
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(total, generator=gen, dtype=F64) * 3
    arrays = {
        "old_logprobs": old,
        "advantages": torch.randn(total, generator=gen, dtype=F64),
        "teacher_logprobs": old + 0.5 * torch.randn(total, generator=gen, dtype=F64),
    }
    logp = (old + 0.4 * torch.randn(total, generator=gen, dtype=F64)).requires_grad_()
    entropy = (torch.rand(total, generator=gen, dtype=F64) * 2).requires_grad_()
    return lengths, masks, arrays, logp, entropy


def _windows(lengths):
    """Global token indices of each (dp rank, micro-batch, cp rank) window, sequences cut mid-way."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    windows = {}
    for rank in range(DP):
        for micro in range(MICRO):
            seqs = range(rank * MICRO + micro, len(lengths), DP * MICRO)
            packed = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in seqs])
            for cp, part in enumerate(np.array_split(packed, CP)):  # the cut falls inside a sequence
                windows[rank, micro, cp] = part
    return windows


def _call(loss, index, masks, lengths, arrays, logp, entropy, normaliser):
    """``loss`` on the tokens ``index`` of the batch followed by ``PAD`` tokens of garbage."""
    mask = torch.from_numpy(np.concatenate(masks))
    counts = torch.tensor([int(m.sum()) for m in masks])
    seq_of = torch.from_numpy(np.repeat(np.arange(len(lengths)), lengths))
    n = counts[seq_of]
    idx = torch.from_numpy(index)
    junk = torch.full((PAD,), float("nan"), dtype=F64)

    def window(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[idx], pad])

    return loss(
        window(logp, torch.full((PAD,), 50.0, dtype=F64)),
        loss_mask=window(mask, torch.zeros(PAD, dtype=torch.bool)),
        seq_loss_tokens=window(n, torch.zeros(PAD, dtype=n.dtype)),
        normaliser=normaliser,
        entropy=window(entropy, junk),
        **{name: window(value, junk) for name, value in arrays.items()},
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"])
def test_split_losses_grads_and_metrics_add_up_to_the_whole(aggregation, seed):
    loss = PolicyLoss.Config(
        aggregation=aggregation, dual_clip=3.0, opd_coef=0.2, entropy_coef=0.01
    ).build()
    lengths, masks, arrays, logp, entropy = _batch(seed)
    counts = [int(m.sum()) for m in masks]
    normaliser = _normaliser(counts)
    assert normaliser.sequences == len(counts) - 1

    whole = _call(loss, np.arange(sum(lengths)), masks, lengths, arrays, logp, entropy, normaliser)
    whole.loss.backward()
    grads = (logp.grad.clone(), entropy.grad.clone())
    logp.grad = entropy.grad = None

    parts = [
        _call(loss, index, masks, lengths, arrays, logp, entropy, normaliser) for index in _windows(lengths).values()
    ]
    total = sum(part.loss for part in parts)
    total.backward()
    assert total.item() == pytest.approx(whole.loss.item(), rel=1e-12, abs=1e-14)
    torch.testing.assert_close((logp.grad, entropy.grad), grads, rtol=1e-12, atol=1e-14)
    assert logp.grad.abs().sum() > 0
    for name, value in whole.metrics.items():
        reduce = max if name.endswith("_max") else sum
        assert reduce(part.metrics[name] for part in parts).item() == pytest.approx(value.item(), rel=1e-12), name
    assert whole.metrics["tokens"].item() == sum(counts)
    assert whole.metrics["sequences"].item() == pytest.approx(normaliser.sequences)


def test_masked_tokens_and_padding_add_nothing_whatever_their_values():
    loss = PolicyLoss.Config(opd_coef=0.1, entropy_coef=0.1).build()
    mask = _t([True, False, True, False], torch.bool)
    garbage = {
        "old_logprobs": _t([-1.0, float("nan"), -2.0, float("inf")]),
        "advantages": _t([1.0, float("nan"), -1.0, 1e30]),
        "teacher_logprobs": _t([-0.8, float("nan"), -2.5, 0.0]),
    }
    logp = _t([-0.9, 80.0, -2.2, float("nan")]).requires_grad_()
    entropy = _t([1.0, float("inf"), 0.5, float("nan")]).requires_grad_()
    out = loss(
        logp,
        loss_mask=mask,
        seq_loss_tokens=_t([2, 0, 2, 0], torch.int64),
        normaliser=Normaliser(tokens=2, sequences=1),
        entropy=entropy,
        **garbage,
    )
    out.loss.backward()
    clean = torch.tensor([0, 2])
    kept = loss(
        logp.detach()[clean],
        loss_mask=mask[clean],
        seq_loss_tokens=_t([2, 2], torch.int64),
        normaliser=Normaliser(tokens=2, sequences=1),
        entropy=entropy.detach()[clean],
        **{name: value[clean] for name, value in garbage.items()},
    )
    assert out.loss.item() == pytest.approx(kept.loss.item())
    assert logp.grad[1].item() == logp.grad[3].item() == 0.0
    assert entropy.grad[1].item() == entropy.grad[3].item() == 0.0
    assert all(math.isfinite(value.item()) for value in out.metrics.values())
    assert out.metrics["tokens"].item() == 2


# --- config, inputs, normaliser ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("clip_low", 0.0),
        ("clip_low", 1.0),
        ("clip_high", -0.1),
        ("dual_clip", 1.0),
        ("tis_cap", 0.0),
        ("kl_coef", -0.1),
        ("opd_coef", -1.0),
        ("entropy_coef", -0.01),
        ("kind", "dpo"),
        ("kl_estimator", "k4"),
        ("aggregation", "mean"),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError) as error:
        PolicyLoss.Config(**{field: value}).build()
    assert error.value.path == field


@pytest.mark.parametrize(
    ("kind", "aggregation", "expected"),
    [
        ("ppo", None, "token_mean"),
        ("grpo", None, "seq_mean_token_mean"),
        ("grpo", "token_mean", "token_mean"),
    ],
)
def test_kind_sets_the_default_aggregation(kind, aggregation, expected):
    assert PolicyLoss.Config(kind=kind, aggregation=aggregation).build().aggregation == expected


def test_tis_weights_each_token_from_the_behaviour_to_the_trainers_policy():
    """Under TIS the gradient of token t is -w_t A_t / N with w_t = min(exp(logp_t - old_t), cap):
    a token the rollout sampled far below the trainer's probability still moves, capped, where
    plain PPO clips it to zero gradient."""
    old, logp_values, adv = [-1.0, -2.0, -0.5], [-1.1, -0.5, -0.5], [1.0, 1.0, -1.0]
    grads = {}
    for cap in (None, 2.0):
        logp = _t(logp_values).requires_grad_()
        out = _one_sequence(PolicyLoss.Config(tis_cap=cap).build(), logp, old_logprobs=_t(old), advantages=_t(adv))
        out.loss.backward()
        grads[cap] = logp.grad.tolist()
        if cap is not None:
            weights = [min(math.exp(lp - o), cap) for lp, o in zip(logp_values, old)]
            assert out.loss.item() == pytest.approx(sum(-w * a for w, a in zip(weights, adv)) / 3)
            assert out.metrics["tis_truncated"].item() == 1  # the second token: exp(1.5) > 2
            assert out.metrics["tis_weight_sum"].item() == pytest.approx(sum(weights))
    assert grads[2.0] == pytest.approx([-math.exp(-0.1) / 3, -2.0 / 3, 1.0 / 3])
    assert grads[None][1] == 0.0  # PPO: ratio exp(1.5) is clipped, no gradient


def test_the_kl_penalty_pulls_logprobs_towards_the_reference():
    logp = _t([-1.0, -3.0]).requires_grad_()
    ref = _t([-2.0, -2.0])
    loss = PolicyLoss.Config(kl_coef=0.5, kl_estimator="k3").build()
    out = _one_sequence(loss, logp, old_logprobs=logp.detach(), advantages=_t([0.0, 0.0]), ref_logprobs=ref)
    out.loss.backward()
    d = [1.0, -1.0]  # logp - ref
    assert out.metrics["ref_kl_sum"].item() == pytest.approx(sum(math.exp(-x) - 1 + x for x in d))
    assert logp.grad.tolist() == pytest.approx([0.5 * (1 - math.exp(-x)) / 2 for x in d])
    assert logp.grad[0] > 0 > logp.grad[1]  # descent lowers the token above the reference, raises the one below


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"kind": "sft", "tis_cap": 2.0}, "tis_cap"), ({"kl_coef": 0.1, "kl_estimator": "k1"}, "kl_estimator")],
)
def test_tis_without_a_sampling_policy_and_a_zero_mean_kl_penalty_are_refused(overrides, field):
    with pytest.raises(ConfigError) as error:
        PolicyLoss.Config(**overrides).build()
    assert error.value.path == field


@pytest.mark.parametrize(
    ("field", "value", "missing"),
    [
        ("opd_coef", 0.1, "teacher_logprobs"),
        ("kl_coef", 0.1, "ref_logprobs"),
        ("entropy_coef", 0.1, "entropy"),
    ],
)
def test_a_term_without_its_input_is_refused(field, value, missing):
    loss = PolicyLoss.Config(**{field: value}).build()
    with pytest.raises(ValueError, match=f"{field}=.* needs {missing}"):
        _one_sequence(loss, _t([-1.0]), old_logprobs=_t([-1.0]), advantages=_t([1.0]))


def test_inputs_of_the_wrong_shape_or_dtype_are_refused():
    loss = PolicyLoss.Config().build()
    with pytest.raises(ValueError, match="advantages has shape"):
        _one_sequence(loss, _t([-1.0, -1.0]), old_logprobs=_t([-1.0, -1.0]), advantages=_t([1.0]))
    with pytest.raises(ValueError, match="loss_mask has dtype"):
        loss(
            _t([-1.0]),
            old_logprobs=_t([-1.0]),
            advantages=_t([1.0]),
            loss_mask=_t([1.0]),
            seq_loss_tokens=_t([1]),
            normaliser=Normaliser(tokens=1, sequences=1),
        )


def test_normaliser_checks():
    with pytest.raises(ValueError, match="sequences=3, tokens=2"):
        Normaliser(tokens=2, sequences=3)
    with pytest.raises(ValueError, match="sequences=0 and tokens=2 must be 0 together"):
        Normaliser(tokens=2, sequences=0)


def test_sft_is_the_negative_log_likelihood_of_the_loss_tokens():
    logprobs = torch.tensor([-0.5, -2.0, -1.0, -3.0], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([True, True, False, True])
    loss_fn = PolicyLoss.Config(kind="sft").build()
    out = loss_fn(
        logprobs,
        old_logprobs=torch.zeros(4, dtype=torch.float64),  # ignored: no ratio, no clipping
        advantages=torch.full((4,), -7.0, dtype=torch.float64),  # ignored
        loss_mask=mask,
        seq_loss_tokens=torch.tensor([3.0, 3.0, 0.0, 3.0], dtype=torch.float64),
        normaliser=Normaliser(tokens=3, sequences=1),
    )
    assert out.loss.item() == pytest.approx((0.5 + 2.0 + 3.0) / 3)
    out.loss.backward()
    assert logprobs.grad.tolist() == pytest.approx([-1 / 3, -1 / 3, 0.0, -1 / 3])
