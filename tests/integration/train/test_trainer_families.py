"""Parallel equals serial for every model family: one trainer step over DP x CP x TP gives the
loss, every parameter's gradient (the vision tower's and, for Qwen3-VL, the DeepStack mergers'
included) and the weights after the step of a plain single-process transformers forward of each
sequence, on packed multi-turn sequences whose images straddle CP and TP borders. Qwen2-VL's
own run is ``test_trainer_parallel``; this runs the other families on their tiny builds.

Layouts: 1x2x2 for every family, where FSDP2 (over the DP x CP = 2 ranks), CP and TP all act on
the family's own code (its TP plan, Qwen3's per-head q/k norms, DeepStack levels spliced into a
sequence-parallel shard, M-RoPE positions of a CP chunk). A dense family's 2x1x1, 1x2x1 and 1x1x2
run nothing of the family that 1x2x2 does not; what they add is the family-independent plumbing
of one dimension alone, which Qwen2-VL's own run checks. Qwen3-VL-MoE keeps 2x1x1, 1x2x1 and
1x1x2 besides: its load-balancing term is reduced over the CP and TP groups (either of which may
be absent) and normalised over sequences that DP splits, paths only that family takes, and
expert parallelism with ep = 2 (each rank holds 2 of the 4 experts; routed rows cross to the
other rank of its EP group and back by all-to-all): over DP (2x1x1) and over CP (1x2x1), with
the experts FSDP-sharded over the two ranks holding the same ones besides (2x2x1), and beside TP,
whose ranks route their own shards through the same experts (1x2x2). The weights compared
after the step are ``Trainer.full_weights``, what a push and a checkpoint's ``hf/`` carry: under
EP the experts gathered whole from the ranks holding them.

Every world runs in one spawn of 4 processes (``vlrl.bench.worlds``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.trainer_workload import reference_step
from vlrl.bench.trainer_workload import make_workload
from vlrl.bench.worlds import run_worlds
from tests.integration.train.test_trainer_parallel import LOSS, _assert_matches, layouts_world, trainer_config
from vlrl.models import build_tiny

FAMILIES = ["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
LAYOUTS = {
    "qwen2_5_vl": [(1, 2, 2)], "qwen3_vl": [(1, 2, 2)],
    "qwen3_vl_moe": [(1, 2, 2), (2, 2, 1, 2), (1, 2, 2, 2), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 1, 1, 2), (1, 2, 1, 2)],
}  # fmt: skip
"""``(dp, cp, tp)``, or ``(dp, cp, tp, ep)`` with expert parallelism."""
MOE_LOSS = replace(LOSS, router_aux_coef=0.5)
"""Qwen3-VL-MoE's load-balancing term weighted 500x the checkpoint's 0.001, so that it moves the
router's gradients far beyond the tolerance."""


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict:
    """Each family's tiny checkpoint, workload and trainer config."""
    out = {}
    for name in FAMILIES:
        path = build_tiny(name, tmp_path_factory.mktemp(name))
        out[name] = (path, make_workload(path), trainer_config(MOE_LOSS if name == "qwen3_vl_moe" else LOSS))
    return out


@pytest.fixture(scope="module")
def runs(builds, tmp_path_factory) -> dict[str, dict]:
    """Each family's ``{layout: (metrics, gradients, weights)}``: the 4-rank worlds, then the 2-rank one."""
    worlds = []
    for size in (4, 2):
        for name in FAMILIES:
            path, work, config = builds[name]
            layouts = [shape for shape in LAYOUTS[name] if shape[0] * shape[1] * shape[2] == size]
            if layouts:
                worlds.append((name, layouts_world(size, layouts, path, work, config)))
    results = run_worlds(tmp_path_factory.mktemp("families"), [world for _, world in worlds])
    out: dict[str, dict] = {name: {} for name in FAMILIES}
    for (name, _), ranks in zip(worlds, results, strict=True):
        out[name].update(ranks[0])
    return out


@pytest.fixture(scope="module", params=FAMILIES)
def family_reference(request, builds):
    path, work, config = builds[request.param]
    loss, grads, weights = reference_step(
        path, work, config.loss, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm
    )
    return request.param, (loss, grads, weights)


def test_two_and_four_rank_layouts_match_single_process(family_reference, runs):
    name, want = family_reference
    if name.startswith("qwen3_vl"):
        deepstack = [n for n in want[1] if "deepstack" in n]
        assert deepstack, "the reference has no DeepStack gradients: the test would not see that path"
    if name == "qwen3_vl_moe":
        experts = [n for n in want[1] if n.endswith(("mlp.gate.weight", "experts.gate_up_proj", "experts.down_proj"))]
        assert len(experts) == 3 * 2, "the reference lacks router or expert gradients: the test would not see them"
    results = runs[name]
    assert sorted(results) == sorted(LAYOUTS[name])
    for shape in LAYOUTS[name]:
        # The towers' patch embeddings get gradients near Adam's eps (1e-8) on a few elements,
        # where lr * g / (|g| + eps) turns a 1e-12 gradient difference into ~4e-7; a wrong step
        # is ~1e-3 off, and every gradient itself is checked at rtol 1e-7.
        if name == "qwen3_vl_moe":
            ep = shape[3] if len(shape) > 3 else 1
            assert results[shape][0]["ep_ranks"] == [ep, ep], shape  # both sparse layers split their experts
            # The family routes in float32 whatever the dtype: a 1e-16 difference in a hidden state
            # moves a routing weight by a float32 rounding (6e-8), which reaches the loss at ~1e-8
            # relative, gradients at ~1e-8 (of at most 0.2) and Adam's first step at ~1e-6; a
            # wrong route or load-balancing term is ~1e-2 off.
            _assert_matches(shape, results[shape], *want, weight_atol=1e-5, grad_atol=1e-7, loss_rel=1e-7)
        else:
            _assert_matches(shape, results[shape], *want, weight_atol=1e-6)
