"""Pass-rate sampling: keep a group only when its task is neither always solved nor never solved.

A group whose trajectories all pass (or all fail) has no reward spread, so its group-relative
advantages are zero and it teaches nothing (DAPO's dynamic sampling). The sampler decides on
metadata alone, before the hook reads any payload, so a rejected group costs no store reads. It
sees rewards as the rollout (or a grader) left them, before length penalties.

The window is ``[min, max]`` with each end included or excluded by a flag; the default, both ends
0 and 1 excluded, is ``0 < pass_rate < 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from vlrl.config import ConfigError, Ge, Le
from vlrl.records import SeqMeta, group_id_of


@dataclass(frozen=True, slots=True)
class SampleDecision:
    accepted: bool
    pass_rate: float
    reason: str
    """Why, in words: ``pass rate 1.00 above max 0.99``."""


class PassRateSampler:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Accept a group when its pass rate lies in a window (default: drop all-pass and all-fail)."""

        success_from: Literal["success", "reward"] = "success"
        """What counts as a pass: the harness's ``success`` flag, or ``reward > reward_threshold``."""

        reward_threshold: float = 0.0
        """With ``success_from='reward'``: a sequence passes when its reward is strictly above this."""

        min_pass_rate: Annotated[float, Ge(0), Le(1)] = 0.0
        """Lower end of the accepted window."""

        max_pass_rate: Annotated[float, Ge(0), Le(1)] = 1.0
        """Upper end of the accepted window."""

        include_min: bool = False
        """Whether a pass rate exactly at ``min_pass_rate`` is accepted (default: no, all-fail is dropped)."""

        include_max: bool = False
        """Whether a pass rate exactly at ``max_pass_rate`` is accepted (default: no, all-pass is dropped)."""

        def check(self) -> None:
            if self.min_pass_rate > self.max_pass_rate:
                raise ConfigError(
                    "max_pass_rate", self.max_pass_rate, f"a number >= min_pass_rate={self.min_pass_rate}"
                )
            if self.min_pass_rate == self.max_pass_rate and not (self.include_min and self.include_max):
                raise ConfigError(
                    "max_pass_rate",
                    self.max_pass_rate,
                    f"a number > min_pass_rate={self.min_pass_rate}",
                    hint="an equal min and max accept nothing unless include_min and include_max are both set",
                )

        def build(self) -> PassRateSampler:
            return PassRateSampler(self)

    def __init__(self, config: PassRateSampler.Config) -> None:
        self.config = config

    def passed(self, meta: SeqMeta) -> bool:
        if self.config.success_from == "success":
            return meta.success
        return meta.reward > self.config.reward_threshold

    def pass_rate(self, metas: Sequence[SeqMeta]) -> float:
        """Fraction of the group that passed: ``#passed / n``."""
        group_id_of(metas)
        return sum(self.passed(m) for m in metas) / len(metas)

    def decide(self, metas: Sequence[SeqMeta]) -> SampleDecision:
        cfg = self.config
        rate = self.pass_rate(metas)
        lo, hi = cfg.min_pass_rate, cfg.max_pass_rate
        if rate < lo:
            return SampleDecision(False, rate, f"pass rate {_num(rate)} below min {_num(lo)}")
        if rate == lo and not cfg.include_min:
            return SampleDecision(False, rate, f"pass rate {_num(rate)} at excluded min {_num(lo)}")
        if rate > hi:
            return SampleDecision(False, rate, f"pass rate {_num(rate)} above max {_num(hi)}")
        if rate == hi and not cfg.include_max:
            return SampleDecision(False, rate, f"pass rate {_num(rate)} at excluded max {_num(hi)}")
        window = f"{'[' if cfg.include_min else '('}{_num(lo)}, {_num(hi)}{']' if cfg.include_max else ')'}"
        return SampleDecision(True, rate, f"pass rate {_num(rate)} in {window}")


def _num(x: float) -> str:
    """Two decimals, or more when two would hide the difference (0.995 must not read as 1.00)."""
    return f"{x:.2f}" if round(x, 2) == x else f"{x:.4g}"
