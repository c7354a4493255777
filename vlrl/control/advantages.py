"""Group-relative advantages: one scalar per sequence from its group's rewards, then per token.

For a group of ``n`` rewards ``r`` with mean ``m = (1/n) sum_j r_j``:

- ``grpo``:    ``A_i = (r_i - m) / (s + eps)`` with the population std ``s = sqrt((1/n) sum_j (r_j - m)^2)``
  (not torch's ``n - 1`` one), so a non-constant group's advantages have mean 0 and std
  ``s / (s + eps)``, i.e. 1 up to eps.
- ``dr_grpo``: ``A_i = r_i - m`` (Dr. GRPO: no std division, which would up-weight groups whose
  rewards barely differ).
- ``rloo``:    ``A_i = r_i - (1/(n-1)) sum_{j != i} r_j``, the leave-one-out baseline. Since
  ``sum_{j != i} r_j = n m - r_i``, ``A_i = ((n-1) r_i - n m + r_i) / (n-1) = n/(n-1) (r_i - m)``.

Two cases are zero by definition, exactly (the hook drops all-zero groups by testing ``== 0``):
a group of one sequence has no baseline to compare with (RLOO's baseline would be an empty mean),
and a group whose rewards are all equal has no signal (``r_i - m`` would otherwise leave float
round-off such as 5e-17, which GRPO's ``/ eps`` would blow up to 5e-11).

A scalar advantage becomes per-token by broadcasting it to the tokens the policy generated
(``loss_mask`` True) and 0 elsewhere. Under on-policy distillation (OPD) the per-token signal is
the teacher's instead, see ``opd_token_advantages``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from vlrl.records import SeqMeta

Estimator = Literal["grpo", "dr_grpo", "rloo"]

Shaping = Callable[[Sequence[SeqMeta], np.ndarray], "Sequence[float] | np.ndarray"]
"""A user's advantage shaping: ``(metas, advantages (n,)) -> advantages (n,)``, e.g. scale by
success or clip. It may return a new array or a list; it must not need the payload."""


class ShapingError(ValueError):
    """A shaping hook that could not be loaded, raised, or returned something unusable."""


def group_advantages(rewards: Sequence[float] | np.ndarray, estimator: Estimator, *, eps: float = 1e-6) -> np.ndarray:
    """Scalar advantages of one group, ``(n,)`` float64 (formulas in the module docstring)."""
    r = np.asarray(rewards, dtype=np.float64)  # (n,)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"group rewards must be a non-empty 1-D sequence, got shape {r.shape}")
    if not np.isfinite(r).all():
        raise ValueError(f"group rewards must be finite, got {r.tolist()}")
    n = r.size
    if n == 1 or r.min() == r.max():
        return np.zeros(n)
    centred = r - r.mean()  # r_i - m
    if estimator == "grpo":
        std = np.sqrt(np.mean(centred**2))  # population std s
        return centred / (std + eps)
    if estimator == "dr_grpo":
        return centred
    if estimator == "rloo":
        return n / (n - 1) * centred
    raise ValueError(f"estimator {estimator!r}; expected one of 'grpo', 'dr_grpo', 'rloo'")


def resolve_shaping(ref: str) -> Shaping:
    """The callable named by ``'module:function'``; ``ShapingError`` if it is not there."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ShapingError(f"shaping hook {ref!r}: expected 'module:function'")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise ShapingError(f"shaping hook {ref!r}: cannot load it: {error}") from error
    if not callable(target):
        raise ShapingError(f"shaping hook {ref!r}: {target!r} is not callable")
    return target


def apply_shaping(hook: Shaping, metas: Sequence[SeqMeta], advantages: np.ndarray) -> np.ndarray:
    """Run the user's hook and check what it returned: ``(n,)`` finite numbers, as float64."""
    name = _hook_name(hook)
    try:
        shaped = hook(metas, advantages.copy())  # a copy: the hook may modify its input in place
    except Exception as error:
        raise ShapingError(f"shaping hook {name} raised {type(error).__name__}: {error}") from error
    try:
        out = np.asarray(shaped, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ShapingError(f"shaping hook {name} returned {type(shaped).__name__}; expected numbers") from error
    if out.shape != advantages.shape:
        raise ShapingError(
            f"shaping hook {name} returned shape {out.shape}; "
            f"expected one advantage per sequence, shape {advantages.shape}"
        )
    if not np.isfinite(out).all():
        raise ShapingError(f"shaping hook {name} returned non-finite advantages {out.tolist()}")
    return out


def token_advantages(loss_mask: np.ndarray, advantage: float) -> np.ndarray:
    """``advantage`` on generated tokens, 0 on prompt/observation tokens: ``(T,)`` float32."""
    return np.where(loss_mask, np.float32(advantage), np.float32(0))  # (T,)


def opd_token_advantages(logprobs: np.ndarray, teacher_logprobs: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
    """OPD's per-token advantage ``log p_teacher(x_t) - log p_student(x_t)`` on generated tokens, 0
    elsewhere: ``(T,)`` float32.

    Sign: positive where the teacher rates the sampled token above the student that sampled it.
    Its negation is the one-sample estimate of the per-token reverse KL ``KL(student || teacher)``
    (expectation over the student's own samples), so maximising this advantage minimises reverse
    KL. ``logprobs`` are the sampling logprobs stored at rollout.
    """
    if not (logprobs.shape == teacher_logprobs.shape == loss_mask.shape):
        raise ValueError(
            f"OPD fields disagree in shape: logprobs {logprobs.shape}, teacher_logprobs "
            f"{teacher_logprobs.shape}, loss_mask {loss_mask.shape}"
        )
    gap = teacher_logprobs.astype(np.float32) - logprobs.astype(np.float32)  # (T,)
    return np.where(loss_mask, gap, np.float32(0))


def _hook_name(hook: Shaping) -> str:
    module = getattr(hook, "__module__", None)
    name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    return f"{module}:{name}" if module else name
