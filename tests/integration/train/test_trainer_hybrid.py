"""Parallel equals serial for the hybrid linear-attention family (Qwen3.5): one trainer step over
DP, CP, TP and CP x TP on packed multi-turn sequences gives the loss, every gradient (the DeltaNet
layers' conv, decay and gate parameters included) and the weights after the step of a plain
single-process transformers forward of each sequence. Under CP the sequences straddle the CP
ranks' chunk borders, so a DeltaNet layer must bring each segment's state and conv window from
the ranks holding its earlier chunks; under TP its heads are split.

All layouts run in one spawn of 4 processes (``vlrl.bench.worlds``): 1x2x2, then the 2-rank
layouts on its first two."""

from __future__ import annotations

from tests.helpers.trainer_workload import reference_step
from vlrl.bench.trainer_workload import make_workload
from vlrl.bench.worlds import run_worlds
from tests.integration.train.test_trainer_parallel import _assert_matches, layouts_world, trainer_config
from vlrl.models import build_tiny
from vlrl.pack import Layout


def test_parallel_layouts_match_single_process(tmp_path):
    path = build_tiny("qwen3_5", tmp_path / "qwen3_5")
    work = make_workload(path)
    config = trainer_config()
    want = reference_step(
        path, work, config.loss, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm
    )
    linear = [name for name in want[1] if ".linear_attn." in name]
    assert {n.rsplit(".", 2)[-2] if n.endswith(".weight") else n.rsplit(".", 1)[-1] for n in linear} >= {"conv1d", "A_log", "dt_bias"}
    assert all(_straddles_cp_borders(work, config, layout) for layout in (Layout(cp=2), Layout(cp=2, tp=2)))
    four, two = run_worlds(tmp_path / "run", [
        layouts_world(4, [(1, 2, 2)], path, work, config),
        layouts_world(2, [(2, 1, 1), (1, 2, 1), (1, 1, 2)], path, work, config),
    ])  # fmt: skip
    results = {**four[0], **two[0]}
    assert list(results) == [(1, 2, 2), (2, 1, 1), (1, 2, 1), (1, 1, 2)]
    # transformers' DeltaNet path (torch_chunk_gated_delta_rule) computes in float32 whatever the
    # dtype: hidden states that differ at 1e-16 between packings round to float32 differently, which
    # reaches gradients at ~1e-10 (4e-7 relative, measured) and Adam's first step near eps at ~1e-6;
    # a state leaking across a segment border, or one not brought across a CP border, is ~1e-3 off.
    for shape, result in results.items():
        _assert_matches(shape, result, *want, weight_atol=1e-5, grad_atol=3e-8, loss_rel=1e-8)


def _straddles_cp_borders(work, config, layout: Layout) -> bool:
    """Whether some sequence of the step's micro-batches has tokens on both sides of a CP chunk
    border held by two different CP ranks (the state must come from another rank)."""
    plan = config.micro_batches.build().plan(work.metas, layout.dp)
    for mb in plan.ranks[0]:
        owners = [{layout.coords(r).cp for r in layout.owners(p, mb.num_tokens, 0)}.pop() for p in range(mb.num_tokens)]
        for start, length in zip(mb.offsets, mb.lengths, strict=True):
            if len(set(owners[start : start + length])) > 1:
                return True
    return False
