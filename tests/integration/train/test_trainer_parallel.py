"""Parallel equals serial: one trainer step over DP x CP x TP on gloo processes gives the loss
and every parameter's gradient (vision tower included) of a plain single-process forward of each
sequence, on packed multi-turn sequences whose images straddle CP and TP borders.

Every case of this module runs in one spawn of 4 processes (``vlrl.bench.worlds``: the 4-rank
layouts, then the 2-rank ones, then single ranks), built once by the ``runs`` fixture; each test
checks its cases' results. Spawning a world per case cost ~5 CPU s of imports a process."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.helpers.trainer_workload import reference_step
from vlrl.bench.trainer_workload import Workload, make_workload
from vlrl.bench.worlds import World, run_worlds
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer

LOSS = PolicyLoss.Config(kind="grpo", clip_low=0.2, clip_high=0.28)
MICRO_BATCH_TOKENS = 160  # several micro-batches per rank, sequences packed together


LOSS_TIS_KL = PolicyLoss.Config(kind="grpo", tis_cap=1.03, kl_coef=0.5, kl_estimator="k3")
"""Rollout logprobs are the model's plus noise of 0.05: a cap of 1.03 truncates some weights."""


def trainer_config(loss: PolicyLoss.Config = LOSS, reference: str | None = None) -> Trainer.Config:
    return Trainer.Config(
        dtype="float64", loss=loss, encode_chunk_tokens=64, optim=Optimizer.Config(lr=1e-3, max_grad_norm=0.5),
        reference=reference,
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=MICRO_BATCH_TOKENS),
    )  # fmt: skip


def layouts_main(
    rank: int, world: int, layouts, model_path: str, work: Workload, config: Trainer.Config, min_version: int | None = None
) -> dict | None:
    """One trainer step on each of ``layouts`` (``world`` ranks each: ``(dp, cp, tp)``, or
    ``(dp, cp, tp, ep)`` with expert parallelism); rank 0 returns ``{layout: (metrics, gradients,
    weights after clipping and one AdamW step)}``."""
    store = work.store()
    results = {}
    for shape in layouts:
        layout = Layout(*shape[:3], ep=shape[3] if len(shape) > 3 else 1)
        trainer = config.build(model_path=model_path, store=store, layout=layout)
        metrics = trainer.forward_backward(work.metas, min_version)
        grads = {}
        for name, param in trainer.model.model.named_parameters():
            grad = param.grad
            if grad is not None and hasattr(grad, "full_tensor"):
                grad = grad.full_tensor()
            if grad is not None:
                grads[name] = grad.detach().clone()
        trainer.apply_gradients()  # clipping and AdamW over DTensor and plain parameters
        weights = trainer.full_weights()
        if trainer.model.routed:  # how many ranks split each sparse layer's experts
            metrics["ep_ranks"] = [1 if b.ep_group is None else dist.get_world_size(b.ep_group) for b in trainer.model.routed]
        results[shape] = (metrics, grads, weights)
        trainer.close()
    return results if rank == 0 else None


def layouts_world(
    world: int, layouts, model_path, work: Workload, config: Trainer.Config | None = None, min_version: int | None = None
) -> World:
    """``layouts_main`` as a world of ``run_worlds``."""
    return World(world, layouts_main, (layouts, str(model_path), work, config or trainer_config(), min_version))


def _run(tmp_path, world: int, layouts, model_path, work, config: Trainer.Config | None = None, min_version=None):
    """``layouts_main``'s results from a spawn of its own."""
    return run_worlds(tmp_path, [layouts_world(world, layouts, model_path, work, config, min_version)])[0][0]


def _optim(config: Trainer.Config) -> dict:
    return {"lr": config.optim.lr, "betas": config.optim.betas, "max_grad_norm": config.optim.max_grad_norm}


@pytest.fixture(scope="module")
def work(tiny_path) -> Workload:
    return make_workload(tiny_path)


@pytest.fixture(scope="module")
def reference(tiny_path, work):
    loss, grads, weights = reference_step(tiny_path, work, LOSS, **_optim(trainer_config()))
    return work, loss, grads, weights


@pytest.fixture(scope="module")
def kl_reference(tmp_path_factory):
    """Another tiny Qwen2-VL (other weights): the KL term is far from zero against it."""
    from vlrl.models import build_tiny

    return str(build_tiny("qwen2_vl", tmp_path_factory.mktemp("kl-reference"), seed=7))


@pytest.fixture(scope="module")
def runs(tiny_path, work, kl_reference, tmp_path_factory) -> dict[str, list]:
    """Every case of the module by name (each rank's return value), from one spawn of 4 processes."""
    path, tmp = str(tiny_path), tmp_path_factory.mktemp("parallel")
    spanning, _ = _spanning_a_weight_update(work)
    tis = trainer_config(LOSS_TIS_KL, reference=kl_reference)
    cases = {
        "four ranks": layouts_world(4, [(1, 2, 2), (2, 2, 1)], path, work),
        "two ranks": layouts_world(2, [(2, 1, 1), (1, 2, 1), (1, 1, 2)], path, work),
        "tis and kl, 2": layouts_world(2, [(2, 1, 1), (1, 1, 2)], path, work, tis),
        "staleness, 2": layouts_world(2, [(1, 2, 1), (1, 1, 2)], path, spanning, min_version=4),
        "payload lost": World(2, _lost_payload_main, (path, work), timeout=timedelta(seconds=60)),
        "one rank": layouts_world(1, [(1, 1, 1)], path, work),
        "tis and kl, 1": layouts_world(1, [(1, 1, 1)], path, work, tis),
        "staleness, 1": layouts_world(1, [(1, 1, 1)], path, spanning, min_version=4),
        "kl across a resume": World(1, _two_steps_main, (path, work, str(tmp / "kl.ckpt"))),
    }
    return dict(zip(cases, run_worlds(tmp / "worlds", list(cases.values())), strict=True))


def _assert_matches(
    shape, result, reference_loss, reference_grads, reference_weights, *, weight_atol: float = 1e-8, grad_atol: float = 1e-10,
    loss_rel: float = 1e-9,
):  # fmt: skip
    metrics, grads, weights = result
    assert metrics["loss"] == pytest.approx(reference_loss, rel=loss_rel, abs=1e-12), shape
    assert set(grads) == set(reference_grads), (shape, set(reference_grads) ^ set(grads))
    for name, want in reference_grads.items():
        torch.testing.assert_close(grads[name], want, rtol=1e-7, atol=grad_atol, msg=lambda m: f"{shape} {name}: {m}")
    # After clipping and one AdamW step (lr 1e-3): Adam's first update is lr * g / (|g| + eps), so
    # gradients near eps carry float noise into the weights at ~1e-9; a wrong step is ~1e-3 off.
    for name, want in reference_weights.items():
        torch.testing.assert_close(weights[name], want, rtol=1e-7, atol=weight_atol, msg=lambda m: f"{shape} {name}: {m}")


def test_two_rank_layouts_match_single_process(reference, runs):
    _, *want = reference
    results = runs["two ranks"][0]
    assert list(results) == [(2, 1, 1), (1, 2, 1), (1, 1, 2)]
    for shape, result in results.items():
        _assert_matches(shape, result, *want)


def test_four_rank_layouts_match_single_process(reference, runs):
    _, *want = reference
    results = runs["four ranks"][0]
    assert list(results) == [(1, 2, 2), (2, 2, 1)]
    for shape, result in results.items():
        _assert_matches(shape, result, *want)


def test_one_rank_matches_single_process(reference, runs):
    _, *want = reference
    _assert_matches((1, 1, 1), runs["one rank"][0][(1, 1, 1)], *want)


@pytest.fixture(scope="module")
def tis_kl_reference(tiny_path, work, kl_reference):
    config = trainer_config(LOSS_TIS_KL, reference=kl_reference)
    return reference_step(tiny_path, work, LOSS_TIS_KL, **_optim(config), kl_reference=kl_reference)


@pytest.mark.parametrize("world", [1, 2])
def test_tis_and_the_kl_penalty_match_single_process(reference, tis_kl_reference, runs, world):
    """Truncated importance weights and a KL term against a frozen reference, computed by the
    trainer's ranks, give the loss, gradients and updated weights of a plain forward of each
    sequence through both models."""
    want = tis_kl_reference
    assert abs(want[0] - reference[1]) > 1e-3  # the two terms change the loss: the comparison means something
    results = runs[f"tis and kl, {world}"][0]
    assert list(results) == ([(1, 1, 1)] if world == 1 else [(2, 1, 1), (1, 1, 2)])
    for shape, result in results.items():
        _assert_matches(shape, result, *want)
        metrics = result[0]
        assert metrics["ref_kl"] > 0.01 and 0 < metrics["tis_truncated_frac"] < 1


def _spanning_a_weight_update(work: Workload) -> tuple[Workload, Workload]:
    """``work`` as episodes that crossed a weight update: each response's first part sampled by
    version 3, the rest by version 4; and the same rows with the version-3 tokens' loss mask
    cleared by hand (what a cut at version 4 must train)."""
    spanning, masked = [], {}
    for meta in work.metas:
        row = work.rows[meta.key]
        start = int(np.flatnonzero(row["loss_mask"])[0])
        first = (meta.num_response_tokens + 1) // 2
        spanning.append(replace(
            meta, turns=2, context_lengths=(start, start + first), policy_version=3, turn_versions=(3, 4),
            turn_tokens=(first, meta.num_response_tokens - first),
        ))  # fmt: skip
        mask = row["loss_mask"].copy()
        mask[start : start + first] = False
        masked[meta.key] = {**row, "loss_mask": mask}
    return Workload(spanning, work.rows, work.images), Workload(work.metas, masked, work.images)


@pytest.fixture(scope="module")
def stale_reference(tiny_path, work):
    _, masked = _spanning_a_weight_update(work)
    return reference_step(tiny_path, masked, LOSS, **_optim(trainer_config()))


@pytest.mark.parametrize("world", [1, 2])
def test_tokens_older_than_the_staleness_bound_leave_the_loss_exactly(reference, stale_reference, runs, world):
    """Sequences whose turns two policy versions sampled, trained with ``min_version`` = the newer:
    the loss, gradients and weights are those of the same rows with the older turn's tokens
    masked by hand (so denominators count only the kept tokens), on every layout."""
    want = stale_reference
    moved = max(float((want[1][n] - g).abs().max()) for n, g in reference[2].items())
    assert moved > 1e-4  # the cut changes the gradients far beyond the tolerance: the comparison means something
    results = runs[f"staleness, {world}"][0]
    assert list(results) == ([(1, 1, 1)] if world == 1 else [(1, 2, 1), (1, 1, 2)])
    for shape, result in results.items():
        _assert_matches(shape, result, *want)


def _two_steps_main(rank: int, world: int, model_path: str, work: Workload, ckpt: str) -> list[float]:
    """Two steps, a checkpoint, then a third step by a trainer resumed from it: the steps' KL terms."""
    store = work.store()
    trainer = trainer_config(LOSS_TIS_KL).build(model_path=model_path, store=store, layout=Layout())
    kls = [trainer.step(work.metas)["ref_kl"] for _ in range(2)]
    saved = trainer.save(ckpt)
    trainer.close()
    resumed = trainer_config(LOSS_TIS_KL).build(model_path=model_path, store=store, layout=Layout())
    resumed.load(saved)
    kls.append(resumed.step(work.metas)["ref_kl"])
    resumed.close()
    return kls


def test_the_default_kl_reference_is_the_starting_weights_across_a_resume(runs):
    first, second, third = runs["kl across a resume"][0]
    assert abs(first) < 1e-12  # the policy is the reference before its first update
    assert second > 1e-8  # and moves away from it, which the penalty measures
    assert third > second  # resumed from the checkpoint, still measured against the starting weights


def _lost_payload_main(rank: int, world: int, model_path: str, work: Workload) -> tuple[str, int]:
    """Rank 1's store has lost one sequence: both ranks stop together, then step on the rest."""
    from vlrl.train.trainer import StepInputsLost

    store = work.store()
    lost = work.metas[-1]
    if rank == 1:
        store.delete([lost.key])
    trainer = trainer_config().build(model_path=model_path, store=store, layout=Layout(dp=2))
    try:
        trainer.step(work.metas)
        outcome = "no error"
    except StepInputsLost as error:
        outcome = str(error)
    again = trainer.step([m for m in work.metas if m.key != lost.key])
    trainer.close()
    return outcome, again["step"]


def test_a_payload_lost_on_one_rank_stops_every_rank_before_any_gradient(runs):
    outcomes = runs["payload lost"]
    assert all("payload of" in outcome and "lost" in outcome for outcome, _ in outcomes), outcomes
    assert "KeyMissingError" in outcomes[1][0] or "KeyMissingError" in outcomes[0][0]
    assert [step for _, step in outcomes] == [1, 1]  # the failed step took no optimizer step
