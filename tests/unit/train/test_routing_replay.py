"""Routing replay, engine to trainer, on the tiny Qwen3-VL-MoE: the embedded engine records a
two-turn trajectory's routing (prompts included) into the store; the packer's window carries it;
the trainer's ``PolicyModel`` replaying it gives the rollout's logprobs, and with its weights one
step on (the rollout one version stale) sends every token to the recorded experts with the gate
weights of its own router, as a transformers forward with that routing imposed does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import AutoProcessor

from tests.helpers.moe_rollout import forward_logits, sampled_moe_trajectory
from vlrl.models import build_tiny, family
from vlrl.models.routing import decode
from vlrl.pack import Layout, MicroBatchPlanner, cut_window
from vlrl.records import LOGPROBS, ROUTED_EXPERTS, fields_for
from vlrl.store import LocalStore
from vlrl.train.mrope import sequence_mrope
from vlrl.train.packed_attention import PackedMask
from vlrl.train.policy_model import PolicyModel
from vlrl.train.targets import micro_batch_inputs


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    """``(path, processor, store, meta, shot)``: the tiny MoE and its stored two-turn trajectory."""
    path = build_tiny("qwen3_vl_moe", tmp_path_factory.mktemp("moe"))
    processor = AutoProcessor.from_pretrained(path)
    store = LocalStore()
    meta, shot = sampled_moe_trajectory(path, processor, store)
    return path, processor, store, meta, shot


def _replayed_forward(policy: PolicyModel, rollout, *, replay: bool):
    """The trainer's logits ``(T, V)`` of the stored sequence, routing replayed or not, and the
    trainer's inputs (through the packer's window and ``micro_batch_inputs``)."""
    _, _, store, meta, shot = rollout
    layout = Layout(1)
    (mb,) = MicroBatchPlanner.Config().build().plan([meta], 1).ranks[0]
    window = cut_window(store, layout, mb, 0, {meta.key: meta}, fields_for({"policy_gradient"}))
    inputs = micro_batch_inputs(
        window, mb, layout, 0, 0, {meta.key: sequence_mrope(meta, policy.merge_size)},
        image_token_id=policy.image_token_id, replay_routing=replay,
    )  # fmt: skip
    encoder = policy.encoder
    rows = encoder(encoder.collate([encoder.preprocess(shot)]))
    mask = PackedMask.build(inputs.positions, inputs.segment_ids, None)
    routing = None if inputs.routing is None else torch.from_numpy(inputs.routing)
    as_tensor = torch.from_numpy
    logits = policy(as_tensor(inputs.token_ids), as_tensor(inputs.mrope), mask, rows, as_tensor(inputs.image_index), routing)
    return logits[: meta.num_tokens], inputs


def _logprobs(logits: torch.Tensor, inputs) -> torch.Tensor:
    """The trainer's logprob of each sampled token, in the order of the stored loss tokens."""
    on = torch.from_numpy(inputs.loss_mask[: len(logits)])
    targets = torch.from_numpy(inputs.target_ids[: len(logits)])
    return torch.log_softmax(logits.float(), -1).gather(1, targets[:, None])[:, 0][on]


def test_replay_gives_the_rollouts_logprobs_and_routes_a_stale_policy_as_recorded(rollout):
    path, processor, store, meta, shot = rollout
    stored = store.get([meta.key], [ROUTED_EXPERTS, LOGPROBS, "loss_mask", "token_ids"])[meta.key]
    routed, old = stored[ROUTED_EXPERTS].copy(), stored[LOGPROBS][stored["loss_mask"]]
    policy = PolicyModel.load(path)
    layers, k = len(policy.routed), policy.routed[0].top_k
    assert routed.dtype == np.uint8 and routed.shape == (meta.num_tokens, layers, k)
    # every token has a record (prompts from their prefill, the first turn's last token from the
    # second turn's) but the last, which no forward fed back
    assert (routed[:-1] > 0).all() and (routed[-1] == 0).all()

    # the rollout's own weights: replay reproduces every sampled token's logprob
    with torch.no_grad():
        logits, inputs = _replayed_forward(policy, rollout, replay=True)
    np.testing.assert_allclose(_logprobs(logits, inputs).numpy(), old, rtol=0, atol=2e-5)

    # one version stale: every weight moved by 1e-3 up or down, as AdamW's first step at lr 1e-3 moves it
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.parameters():
            param += 1e-3 * torch.randint(0, 2, param.shape, generator=generator).mul(2).sub(1)
        own_logits, _ = _replayed_forward(policy, rollout, replay=False)
        own = torch.stack([block.router_logits.topk(k, -1).indices.sort(-1).values for block in policy.routed], 1)
        replay_logits, _ = _replayed_forward(policy, rollout, replay=True)
    recorded = decode(torch.from_numpy(routed[:-1])).sort(-1).values
    differing = (own[: meta.num_tokens - 1] != recorded).any(-1).float().mean().item()  # of token-layer routings
    assert differing > 0.02, differing  # without replay a measurable share goes to other experts

    model = family("qwen3_vl_moe").load(path).eval()
    model.load_state_dict(policy.model.state_dict())
    imposed = forward_logits(model, processor, stored["token_ids"], shot, routed)
    torch.testing.assert_close(replay_logits, imposed, rtol=0, atol=1e-5)
    assert (own_logits - imposed).abs().max() > 1e-3  # the replayed routing changed the forward


def test_replay_refuses_a_window_without_records(rollout):
    _, _, store, meta, _ = rollout
    plain = LocalStore()
    plain.put(meta.key, store.get([meta.key], ["token_ids", "logprobs", "loss_mask", "advantages"])[meta.key])
    meta = replace(meta, extra_fields=())
    layout = Layout(1)
    (mb,) = MicroBatchPlanner.Config().build().plan([meta], 1).ranks[0]
    window = cut_window(plain, layout, mb, 0, {meta.key: meta}, fields_for({"policy_gradient"}))
    with pytest.raises(ValueError, match="routing replay .* carry no 'extra/routed_experts'; the engine .* did not record"):
        micro_batch_inputs(window, mb, layout, 0, 0, {meta.key: sequence_mrope(meta, 2)}, image_token_id=-1, replay_routing=True)
