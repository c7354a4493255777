"""Routing replay in the real trainer (one gloo rank, float32): with ``loss.routing_replay='rollout'``
and its weights one optimizer step past the rollout's, the trainer's logprob gap to the rollout is
that of a transformers forward with the recorded routing imposed, not that of its own routing."""

from __future__ import annotations

import pickle
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoProcessor

from tests.helpers.moe_rollout import forward_logits, sampled_moe_trajectory
from vlrl.models import build_tiny, family
from vlrl.pack import Layout
from vlrl.records import LOGPROBS, LOSS_MASK, ROUTED_EXPERTS, TOKEN_IDS
from vlrl.store import LocalStore
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer


def _rank_main(rank: int, model_path: str, rdzv: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=0, world_size=1, timeout=timedelta(seconds=120))
    try:
        store = LocalStore()
        meta, shot = sampled_moe_trajectory(model_path, AutoProcessor.from_pretrained(model_path), store)
        config = Trainer.Config(
            loss=PolicyLoss.Config(kind="grpo", routing_replay="rollout", mismatch_warn=None), optim=Optimizer.Config(lr=1e-3)
        )
        trainer = config.build(model_path=model_path, store=store, layout=Layout(1))
        trainer.forward_backward([meta])
        trainer.apply_gradients()  # the rollout is now one version stale
        metrics = trainer.forward_backward([meta])
        weights = trainer.full_weights()
        trainer.close()
    finally:
        dist.destroy_process_group()
    stored = store.get([meta.key], [TOKEN_IDS, LOGPROBS, LOSS_MASK, ROUTED_EXPERTS])[meta.key]
    with open(out_file, "wb") as f:
        pickle.dump((metrics, weights, {name: np.array(value) for name, value in stored.items()}, shot), f)


def _gap(logits: torch.Tensor, stored: dict[str, np.ndarray]) -> np.ndarray:
    """|logprob - rollout logprob| of each sampled token under ``logits`` ``(T, V)``."""
    ids = torch.from_numpy(stored[TOKEN_IDS].astype(np.int64))
    logprobs = torch.log_softmax(logits[:-1].float(), -1).gather(1, ids[1:, None])[:, 0].numpy()
    on = stored[LOSS_MASK][1:]
    return np.abs(logprobs[on] - stored[LOGPROBS][1:][on])


def test_the_trainer_replays_the_rollouts_routing_one_step_stale(tmp_path):
    path = build_tiny("qwen3_vl_moe", tmp_path / "moe")
    out = tmp_path / "out.pkl"
    mp.spawn(_rank_main, args=(str(path), str(tmp_path / "rdzv"), str(out)), nprocs=1)
    metrics, weights, stored, shot = pickle.loads(out.read_bytes())

    model = family("qwen3_vl_moe").load(path).eval()
    model.load_state_dict(weights)
    processor = AutoProcessor.from_pretrained(path)
    replayed = _gap(forward_logits(model, processor, stored[TOKEN_IDS], shot, stored[ROUTED_EXPERTS]), stored)
    own = _gap(forward_logits(model, processor, stored[TOKEN_IDS], shot), stored)
    assert abs(own.mean() - replayed.mean()) > 1e-3  # the step moved routings: replaying them shows
    np.testing.assert_allclose(metrics["logprob_mismatch"], replayed.mean(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(metrics["logprob_mismatch_max"], replayed.max(), rtol=0, atol=1e-5)
