"""Parallel equals serial for every model family: one trainer step over DP x CP x TP gives the
loss, every parameter's gradient (the vision tower's and, for Qwen3-VL, the DeepStack mergers'
included) and the weights after the step of a plain single-process transformers forward of each
sequence, on packed multi-turn sequences whose images straddle CP and TP borders. Qwen2-VL's
own run is ``test_trainer_parallel``; this runs the other families on their tiny builds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.integration.train.test_trainer_parallel import LOSS, _assert_matches, _run, trainer_config
from tests.helpers.trainer_workload import make_workload, reference_step
from vlrl.models import build_tiny

FAMILIES = ["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
MOE_LOSS = replace(LOSS, router_aux_coef=0.5)
"""Qwen3-VL-MoE's load-balancing term weighted 500x the checkpoint's 0.001, so that it moves the
router's gradients far beyond the tolerance."""


@pytest.fixture(scope="module", params=FAMILIES)
def family_reference(request, tmp_path_factory):
    path = build_tiny(request.param, tmp_path_factory.mktemp(request.param))
    work = make_workload(path)
    loss_config = MOE_LOSS if request.param == "qwen3_vl_moe" else LOSS
    config = trainer_config(loss_config)
    loss, grads, weights = reference_step(
        path, work, loss_config, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm
    )
    return request.param, path, work, config, (loss, grads, weights)


def test_two_and_four_rank_layouts_match_single_process(family_reference, tmp_path):
    name, path, work, config, want = family_reference
    if name.startswith("qwen3_vl"):
        deepstack = [n for n in want[1] if "deepstack" in n]
        assert deepstack, "the reference has no DeepStack gradients: the test would not see that path"
    if name == "qwen3_vl_moe":
        experts = [n for n in want[1] if n.endswith(("mlp.gate.weight", "experts.gate_up_proj", "experts.down_proj"))]
        assert len(experts) == 3 * 2, "the reference lacks router or expert gradients: the test would not see them"
    two = [(2, 1, 1), (1, 2, 1), (1, 1, 2)]
    (tmp_path / "two").mkdir()
    (tmp_path / "four").mkdir()
    results = _run(tmp_path / "two", 2, two, path, work, config)
    results.update(_run(tmp_path / "four", 4, [(1, 2, 2)], path, work, config))
    for shape in [*two, (1, 2, 2)]:
        # The towers' patch embeddings get gradients near Adam's eps (1e-8) on a few elements,
        # where lr * g / (|g| + eps) turns a 1e-12 gradient difference into ~4e-7; a wrong step
        # is ~1e-3 off, and every gradient itself is checked at rtol 1e-7.
        if name == "qwen3_vl_moe":
            # The family routes in float32 whatever the dtype: a 1e-16 difference in a hidden state
            # moves a routing weight by a float32 rounding (6e-8), which reaches the loss at ~1e-8
            # relative, gradients at ~1e-8 (of at most 0.2) and Adam's first step at ~1e-6; a
            # wrong route or load-balancing term is ~1e-2 off.
            _assert_matches(shape, results[shape], *want, weight_atol=1e-5, grad_atol=1e-7, loss_rel=1e-7)
        else:
            _assert_matches(shape, results[shape], *want, weight_atol=1e-6)
