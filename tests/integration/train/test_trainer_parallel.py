"""Parallel equals serial: one trainer step over DP x CP x TP on gloo processes gives the loss
and every parameter's gradient (vision tower included) of a plain single-process forward of each
sequence, on packed multi-turn sequences whose images straddle CP and TP borders."""

from __future__ import annotations

import pickle
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.helpers.trainer_workload import Workload, make_workload, reference_step
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


def _rank_main(
    rank: int, world: int, layouts, model_path: str, work_file: str, rdzv: str, out_file: str, config: Trainer.Config,
    min_version: int | None = None,
) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world, timeout=timedelta(seconds=180))
    with open(work_file, "rb") as f:
        work = pickle.load(f)
    store = work.store()
    results = {}
    try:
        for shape in layouts:
            trainer = config.build(model_path=model_path, store=store, layout=Layout(*shape))
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
            results[shape] = (metrics, grads, weights)
            trainer.close()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(out_file, "wb") as f:
            pickle.dump(results, f)


def _run(tmp_path, world: int, layouts, model_path, work, config: Trainer.Config | None = None, min_version=None):
    work_file = tmp_path / "work.pkl"
    work_file.write_bytes(pickle.dumps(work))
    out = tmp_path / "out.pkl"
    args = (
        world, layouts, str(model_path), str(work_file), str(tmp_path / "rdzv"), str(out), config or trainer_config(),
        min_version,
    )  # fmt: skip
    mp.spawn(_rank_main, args=args, nprocs=world)
    return pickle.loads(out.read_bytes())


@pytest.fixture(scope="module")
def reference(tiny_path):
    work = make_workload(tiny_path)
    config = trainer_config()
    loss, grads, weights = reference_step(
        tiny_path, work, LOSS, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm
    )
    return work, loss, grads, weights


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


def test_two_rank_layouts_match_single_process(tiny_path, reference, tmp_path):
    work, *want = reference
    layouts = [(2, 1, 1), (1, 2, 1), (1, 1, 2)]
    results = _run(tmp_path, 2, layouts, tiny_path, work)
    for shape in layouts:
        _assert_matches(shape, results[shape], *want)


def test_four_rank_layouts_match_single_process(tiny_path, reference, tmp_path):
    work, *want = reference
    layouts = [(1, 2, 2), (2, 2, 1)]
    results = _run(tmp_path, 4, layouts, tiny_path, work)
    for shape in layouts:
        _assert_matches(shape, results[shape], *want)


def test_one_rank_matches_single_process(tiny_path, reference, tmp_path):
    work, *want = reference
    results = _run(tmp_path, 1, [(1, 1, 1)], tiny_path, work)
    _assert_matches((1, 1, 1), results[(1, 1, 1)], *want)


@pytest.fixture(scope="module")
def kl_reference(tmp_path_factory):
    """Another tiny Qwen2-VL (other weights): the KL term is far from zero against it."""
    from vlrl.models import build_tiny

    return str(build_tiny("qwen2_vl", tmp_path_factory.mktemp("kl-reference"), seed=7))


@pytest.mark.parametrize("world, layouts", [(1, [(1, 1, 1)]), (2, [(2, 1, 1), (1, 1, 2)])])
def test_tis_and_the_kl_penalty_match_single_process(tiny_path, kl_reference, tmp_path, world, layouts):
    """Truncated importance weights and a KL term against a frozen reference, computed by the
    trainer's ranks, give the loss, gradients and updated weights of a plain forward of each
    sequence through both models."""
    work = make_workload(tiny_path)
    config = trainer_config(LOSS_TIS_KL, reference=kl_reference)
    want = reference_step(
        tiny_path, work, LOSS_TIS_KL, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm,
        kl_reference=kl_reference,
    )  # fmt: skip
    plain = reference_step(tiny_path, work, LOSS, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm)
    assert abs(want[0] - plain[0]) > 1e-3  # the two terms change the loss: the comparison means something
    results = _run(tmp_path, world, layouts, tiny_path, work, config)
    for shape in layouts:
        _assert_matches(shape, results[shape], *want)
        metrics = results[shape][0]
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


@pytest.mark.parametrize("world, layouts", [(1, [(1, 1, 1)]), (2, [(1, 2, 1), (1, 1, 2)])])
def test_tokens_older_than_the_staleness_bound_leave_the_loss_exactly(tiny_path, reference, tmp_path, world, layouts):
    """Sequences whose turns two policy versions sampled, trained with ``min_version`` = the newer:
    the loss, gradients and weights are those of the same rows with the older turn's tokens
    masked by hand (so denominators count only the kept tokens), on every layout."""
    work = reference[0]
    spanning, masked = _spanning_a_weight_update(work)
    config = trainer_config()
    want = reference_step(tiny_path, masked, LOSS, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm)
    moved = max(float((want[1][n] - g).abs().max()) for n, g in reference[2].items())
    assert moved > 1e-4  # the cut changes the gradients far beyond the tolerance: the comparison means something
    results = _run(tmp_path, world, layouts, tiny_path, spanning, config, min_version=4)
    for shape in layouts:
        _assert_matches(shape, results[shape], *want)


def _two_steps_main(rank: int, model_path: str, work_file: str, rdzv: str, out_file: str) -> None:
    """Two steps, a checkpoint, then a third step by a trainer resumed from it."""
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=0, world_size=1)
    with open(work_file, "rb") as f:
        work = pickle.load(f)
    store = work.store()
    try:
        trainer = trainer_config(LOSS_TIS_KL).build(model_path=model_path, store=store, layout=Layout())
        kls = [trainer.step(work.metas)["ref_kl"] for _ in range(2)]
        saved = trainer.save(out_file + ".ckpt")
        trainer.close()
        resumed = trainer_config(LOSS_TIS_KL).build(model_path=model_path, store=store, layout=Layout())
        resumed.load(saved)
        kls.append(resumed.step(work.metas)["ref_kl"])
        resumed.close()
    finally:
        dist.destroy_process_group()
    with open(out_file, "wb") as f:
        pickle.dump(kls, f)


def test_the_default_kl_reference_is_the_starting_weights_across_a_resume(tiny_path, tmp_path):
    work_file, out = tmp_path / "work.pkl", tmp_path / "kls.pkl"
    work_file.write_bytes(pickle.dumps(make_workload(tiny_path)))
    mp.spawn(_two_steps_main, args=(str(tiny_path), str(work_file), str(tmp_path / "rdzv"), str(out)), nprocs=1)
    first, second, third = pickle.loads(out.read_bytes())
    assert abs(first) < 1e-12  # the policy is the reference before its first update
    assert second > 1e-8  # and moves away from it, which the penalty measures
    assert third > second  # resumed from the checkpoint, still measured against the starting weights


def _lost_payload_main(rank: int, model_path: str, work_file: str, rdzv: str, out_file: str) -> None:
    """Rank 1's store has lost one sequence: both ranks stop together, then step on the rest."""
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    with open(work_file, "rb") as f:
        work = pickle.load(f)
    store = work.store()
    lost = work.metas[-1]
    if rank == 1:
        store.delete([lost.key])
    from vlrl.train.trainer import StepInputsLost

    try:
        trainer = trainer_config().build(model_path=model_path, store=store, layout=Layout(dp=2))
        try:
            trainer.step(work.metas)
            outcome = "no error"
        except StepInputsLost as error:
            outcome = str(error)
        again = trainer.step([m for m in work.metas if m.key != lost.key])
        trainer.close()
    finally:
        dist.destroy_process_group()
    with open(f"{out_file}.{rank}", "wb") as f:
        pickle.dump((outcome, again["step"]), f)


def test_a_payload_lost_on_one_rank_stops_every_rank_before_any_gradient(tiny_path, tmp_path):
    work_file, out = tmp_path / "work.pkl", tmp_path / "lost"
    work_file.write_bytes(pickle.dumps(make_workload(tiny_path)))
    mp.spawn(_lost_payload_main, args=(str(tiny_path), str(work_file), str(tmp_path / "rdzv"), str(out)), nprocs=2)
    outcomes = [pickle.loads(Path(f"{out}.{rank}").read_bytes()) for rank in range(2)]
    assert all("payload of" in outcome and "lost" in outcome for outcome, _ in outcomes), outcomes
    assert "KeyMissingError" in outcomes[1][0] or "KeyMissingError" in outcomes[0][0]
    assert [step for _, step in outcomes] == [1, 1]  # the failed step took no optimizer step
