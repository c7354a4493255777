"""Routing replay on the tiny Qwen3-VL-MoE, measured: what the routing field costs in the store and
what replay changes between the rollout's logprobs and the trainer's.

1. The embedded engine samples two-turn trajectories (a screenshot, then a text turn continuing
   the first's KV prefix) twice with the same seeds, recording routing and not; the trajectories
   are stored as an Agent Loop stores them, advantages added as the group hook adds them.
2. Bytes: what the store holds for each sequence key (its schema) and what the packer's window
   read from it (``io_stats``), per token, with and without ``extra/routed_experts``.
3. Mismatch: a real ``Trainer`` (one gloo rank, float32, one micro-batch) scores the rollouts at
   the rollout's own weights, takes one AdamW step on them (lr ``--lr``), and scores them again
   one version stale, with ``loss.routing_replay`` off and on: the step's ``logprob_mismatch``
   (mean and max |trainer - rollout| over the sampled tokens), and the shares of recorded
   token-layer routings, and of tokens in any layer, whose top-k set the trainer's own router changes.

    .venv/bin/python scripts/routing_replay.py [--trajectories 8] [--lr 1e-3]

CPU, a minute or two. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoProcessor

from vlrl.mm import content_hash, patch_rule_of
from vlrl.models import build_tiny
from vlrl.models.routing import decode
from vlrl.pack import Layout, MicroBatchPlanner, cut_window
from vlrl.records import ADVANTAGES, ROUTED_EXPERTS
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.engine import EmbeddedEngine, EngineCore
from vlrl.rollout.protocol import GenerateRequest, ImagePart, SamplingParams
from vlrl.rollout.trajectory import Trajectory
from vlrl.store import LocalStore
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer


def turn(processor, text: str, shot: np.ndarray | None, *, first: bool) -> np.ndarray:
    chat = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" if first else "\n"
    chat += "<|im_start|>user\n" + ("<|vision_start|><|image_pad|><|vision_end|>" if shot is not None else "") + text
    chat += "<|im_end|>\n<|im_start|>assistant\n"
    return processor(text=[chat], images=[shot] if shot is not None else None, return_tensors="np")["input_ids"][0].astype(np.int32)


def sample(path: Path, processor, trajectories: int, *, record: bool, dtype: str) -> tuple[LocalStore, list]:
    """``trajectories`` two-turn trajectories sampled and stored; returns the store and their metas."""
    rng = np.random.default_rng(0)
    shots = [rng.integers(0, 256, (96 + 16 * (i % 3), 160, 3), dtype=np.uint8) for i in range(trajectories)]
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    store, metas = LocalStore(), []

    async def one(core, i: int) -> Trajectory:
        shot, tid = shots[i], f"t{i}"
        part = ImagePart(content_hash(shot), shot.shape[1], shot.shape[0], shot)
        first = turn(processor, f"click the button number {i}", shot, first=True)
        offset = int(np.flatnonzero(first == pad)[0])
        trajectory = Trajectory(tid)
        trajectory.set_context(Segment(first.tolist(), [offset]), [ContextImage.of(shot)])
        sampling = SamplingParams(temperature=1.0, max_tokens=16, seed=i)
        trajectory.add_generated(await core.generate(GenerateRequest(f"{tid}a", tid, first, (part,), sampling)))
        second = np.concatenate([trajectory.current.prompt_array(), turn(processor, "now press Enter", None, first=False)])
        trajectory.set_context(Segment(second.tolist(), [offset]), [ContextImage.of(shot)])
        again = (replace(part, pixels=None),)
        trajectory.add_generated(await core.generate(GenerateRequest(f"{tid}b", tid, second, again, replace(sampling, seed=100 + i))))
        return trajectory

    async def main() -> list[Trajectory]:
        core = EngineCore(EmbeddedEngine.Config(record_routing=record, max_batch=trajectories, dtype=dtype), str(path))
        try:
            return await asyncio.gather(*(one(core, i) for i in range(trajectories)))
        finally:
            await core.close()

    signs = np.random.default_rng(1).choice([-1.0, 1.0], trajectories)  # a group's advantages
    for i, trajectory in enumerate(asyncio.run(main())):
        (meta,) = trajectory.finish(
            store, key=f"seq/{i}", group_id="g", source="s", sample_index=i, reward=float(signs[i] > 0),
            success=bool(signs[i] > 0), finish="done", patch_rule=patch_rule_of(processor),
        )  # fmt: skip
        store.add_fields(meta.key, {ADVANTAGES: np.where(np.arange(meta.num_tokens) >= meta.context_lengths[0], signs[i], 0).astype(np.float32)})
        metas.append(meta)
    return store, metas


def payload_bytes(store: LocalStore, metas) -> dict[str, float]:
    """Per token, what the store holds for the sequence keys and what the packer's window reads."""
    tokens = sum(m.num_tokens for m in metas)
    held = {name: 0 for name in store.schema(metas[0].key)}
    for meta in metas:
        for name, spec in store.schema(meta.key).items():
            held[name] += spec.nbytes
    layout, by_key = Layout(1), {m.key: m for m in metas}
    plan = MicroBatchPlanner.Config(max_tokens_per_micro_batch=100_000).build().plan(metas, 1)
    before = store.io_stats().bytes_read
    for mb in plan.ranks[0]:
        cut_window(store, layout, mb, 0, by_key, PolicyLoss.Config(kind="grpo").payload_fields())
    return {
        "held_per_token": sum(held.values()) / tokens,
        "held_per_token_by_field": {name: n / tokens for name, n in held.items()},
        "packer_read_per_token": (store.io_stats().bytes_read - before) / tokens,
    }


def rerouted(trainer: Trainer, store: LocalStore, metas) -> dict[str, float]:
    """Shares of the recorded token-layer routings, and of the recorded tokens in any layer, whose
    top-k set the trainer's own router (its last forward, of the one micro-batch) picks differently."""
    (mb,) = trainer.planner.plan(metas, 1).ranks[0]
    window = cut_window(store, Layout(1), mb, 0, {m.key: m for m in metas}, ("token_ids", "loss_mask"))
    records = decode(torch.from_numpy(window.extras[ROUTED_EXPERTS][: window.num_tokens].copy())).sort(-1).values  # (T, L, k)
    k = records.shape[-1]
    own = torch.stack([b.router_logits[: window.num_tokens].topk(k, -1).indices.sort(-1).values for b in trainer.model.routed], 1)
    recorded = (records >= 0).all(-1)  # (T, L)
    moved = (own != records).any(-1) & recorded  # (T, L)
    tokens = recorded.all(-1)
    return {
        "routings_changed": moved.sum().item() / recorded.sum().item(),
        "tokens_rerouted": (moved.any(-1) & tokens).sum().item() / tokens.sum().item(),
    }


def mismatch(path: Path, store: LocalStore, metas, *, replay: bool, lr: float) -> dict[str, float]:
    """The trainer's logprob gap to the rollout at the rollout's weights and one step later, and
    the shares of routings the trainer's own router changes there."""
    config = Trainer.Config(
        dtype="float32", loss=PolicyLoss.Config(kind="grpo", routing_replay="rollout" if replay else "off", mismatch_warn=None),
        optim=Optimizer.Config(lr=lr, max_grad_norm=1e9),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=100_000),
    )  # fmt: skip
    trainer = config.build(model_path=str(path), store=store, layout=Layout(1))
    fresh = trainer.forward_backward(metas)
    fresh_routes = rerouted(trainer, store, metas)
    trainer.apply_gradients()
    stale = trainer.forward_backward(metas)
    stale_routes = rerouted(trainer, store, metas)
    trainer.close()
    return {
        "fresh_mean": fresh["logprob_mismatch"], "fresh_max": fresh["logprob_mismatch_max"],
        **{f"fresh_{name}": value for name, value in fresh_routes.items()},
        "stale_mean": stale["logprob_mismatch"], "stale_max": stale["logprob_mismatch_max"],
        **{f"stale_{name}": value for name, value in stale_routes.items()},
        "sampled_tokens": int(stale["tokens"]),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--engine-dtype", default="float32", choices=["float32", "bfloat16"], help="the trainer computes in float32")
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny("qwen3_vl_moe", Path(tmp) / "moe")
        processor = AutoProcessor.from_pretrained(path)
        recorded, metas = sample(path, processor, args.trajectories, record=True, dtype=args.engine_dtype)
        plain, plain_metas = sample(path, processor, args.trajectories, record=False, dtype=args.engine_dtype)
        assert [m.num_tokens for m in metas] == [m.num_tokens for m in plain_metas]  # the same draws
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rdzv", rank=0, world_size=1)
        try:
            out = {
                "model": "tiny qwen3_vl_moe (2 sparse layers, 4 experts, top-2)",
                "tokens": sum(m.num_tokens for m in metas),
                "recorded_routings": int(sum((recorded.get([m.key], [ROUTED_EXPERTS])[m.key][ROUTED_EXPERTS] > 0).all(-1).sum() for m in metas)),
                "bytes_with_routing": payload_bytes(recorded, metas),
                "bytes_without_routing": payload_bytes(plain, plain_metas),
                "lr": args.lr,
                "engine_dtype": args.engine_dtype,
                "replay_off": mismatch(path, recorded, metas, replay=False, lr=args.lr),
                "replay_on": mismatch(path, recorded, metas, replay=True, lr=args.lr),
            }
        finally:
            dist.destroy_process_group()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
