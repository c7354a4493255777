"""Parallel equals serial: one trainer step over DP x CP x TP on gloo processes gives the loss
and every parameter's gradient (vision tower included) of a plain single-process forward of each
sequence, on packed multi-turn sequences whose images straddle CP and TP borders."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.train.trainer_workload import make_workload, reference_step
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.train.loss import PolicyLoss
from vlrl.train.trainer import Trainer

LOSS = PolicyLoss.Config(kind="grpo", clip_low=0.2, clip_high=0.28)
MICRO_BATCH_TOKENS = 160  # several micro-batches per rank, sequences packed together


def trainer_config() -> Trainer.Config:
    return Trainer.Config(
        dtype="float64", loss=LOSS, encode_chunk_tokens=64, lr=1e-3, max_grad_norm=0.5,
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=MICRO_BATCH_TOKENS),
    )  # fmt: skip


def _rank_main(rank: int, world: int, layouts, model_path: str, work_file: str, rdzv: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world, timeout=timedelta(seconds=180))
    with open(work_file, "rb") as f:
        work = pickle.load(f)
    store = work.store()
    results = {}
    try:
        for shape in layouts:
            trainer = trainer_config().build(model_path=model_path, store=store, layout=Layout(*shape))
            metrics = trainer.forward_backward(work.metas)
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


def _run(tmp_path, world: int, layouts, model_path, work):
    work_file = tmp_path / "work.pkl"
    work_file.write_bytes(pickle.dumps(work))
    out = tmp_path / "out.pkl"
    mp.spawn(
        _rank_main, args=(world, layouts, str(model_path), str(work_file), str(tmp_path / "rdzv"), str(out)), nprocs=world
    )
    return pickle.loads(out.read_bytes())


@pytest.fixture(scope="module")
def reference(tiny_path):
    work = make_workload(tiny_path)
    config = trainer_config()
    loss, grads, weights = reference_step(
        tiny_path, work, LOSS, lr=config.lr, betas=config.betas, max_grad_norm=config.max_grad_norm
    )
    return work, loss, grads, weights


def _assert_matches(shape, result, reference_loss, reference_grads, reference_weights, *, weight_atol: float = 1e-8):
    metrics, grads, weights = result
    assert metrics["loss"] == pytest.approx(reference_loss, rel=1e-9, abs=1e-12), shape
    assert set(grads) == set(reference_grads), (shape, set(reference_grads) ^ set(grads))
    for name, want in reference_grads.items():
        torch.testing.assert_close(grads[name], want, rtol=1e-7, atol=1e-10, msg=lambda m: f"{shape} {name}: {m}")
    # After clipping and one AdamW step (lr 1e-3): Adam's first update is lr * g / (|g| + eps), so
    # gradients near eps carry float noise into the weights at ~1e-9; a wrong step is ~1e-3 off.
    for name, want in reference_weights.items():
        torch.testing.assert_close(weights[name], want, rtol=1e-7, atol=weight_atol, msg=lambda m: f"{shape} {name}: {m}")


@pytest.mark.slow
def test_two_rank_layouts_match_single_process(tiny_path, reference, tmp_path):
    work, *want = reference
    layouts = [(2, 1, 1), (1, 2, 1), (1, 1, 2)]
    results = _run(tmp_path, 2, layouts, tiny_path, work)
    for shape in layouts:
        _assert_matches(shape, results[shape], *want)


@pytest.mark.slow
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
