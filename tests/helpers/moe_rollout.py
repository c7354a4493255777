"""A two-turn trajectory the embedded engine samples from a tiny Qwen3-VL-MoE with its routing
recorded, stored as an Agent Loop stores it; and transformers' own forward with a recorded routing
imposed, the reference of routing replay that shares no code with ``train.moe``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe

from tests.helpers.chat import part, request, run_core, screen, user_turn
from vlrl.mm import patch_rule_of
from vlrl.models.routing import decode
from vlrl.records import ADVANTAGES, SeqMeta
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.trajectory import Trajectory

SAMPLING = SamplingParams(temperature=1.0, max_tokens=12, seed=5)


def sampled_moe_trajectory(path, processor, store: Any) -> tuple[SeqMeta, np.ndarray]:
    """Turn 1 shows a screenshot, turn 2 continues its context (and KV prefix) with text; the
    sequence is stored with advantages 1. Returns its metadata and the screenshot."""
    shot = screen(160, 96, 7)
    first = user_turn(processor, "click the Save button", [shot])
    offset = int(np.flatnonzero(first == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>"))[0])
    trajectory = Trajectory("t")

    async def body(core):
        trajectory.set_context(Segment(first.tolist(), [offset]), [ContextImage.of(shot)])
        trajectory.add_generated(await core.generate(request(first, (part(shot),), trajectory="t", sampling=SAMPLING)))
        second = np.concatenate([trajectory.current.prompt_array(), user_turn(processor, "now press Enter", [], first=False)])
        trajectory.set_context(Segment(second.tolist(), [offset]), [ContextImage.of(shot)])
        result = await core.generate(request(second, (part(shot, send=False),), trajectory="t", sampling=SAMPLING))
        assert result.reused_prefix_tokens > 0  # the second turn continued the first's KV prefix
        trajectory.add_generated(result)

    run_core(path, body, record_routing=True)
    (meta,) = trajectory.finish(
        store, key="seq", group_id="g", source="s", sample_index=0, reward=1.0, success=True, finish="done",
        patch_rule=patch_rule_of(processor),
    )  # fmt: skip
    store.add_fields(meta.key, {ADVANTAGES: np.ones(meta.num_tokens, np.float32)})
    return meta, shot


@contextmanager
def imposed_routing(records: torch.Tensor) -> Iterator[None]:
    """transformers' own router, made to send the tokens of a ``(T,)`` forward to the recorded
    experts ``records`` ``(T, layers, k)`` (ids + 1; 0: its own pick), weights from its softmax
    renormalised over them."""
    router = modeling_qwen3_vl_moe.Qwen3VLMoeTextTopKRouter
    own, layer = router.forward, iter(range(records.shape[1]))

    def forward(self, hidden_states):
        logits = F.linear(hidden_states.reshape(-1, self.hidden_dim), self.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        recorded = decode(records[:, next(layer)])
        ids = torch.where((recorded >= 0).all(-1, keepdim=True), recorded, probs.topk(self.top_k, -1).indices)
        picked = probs.gather(1, ids)
        return logits, (picked / picked.sum(-1, keepdim=True)).to(logits.dtype), ids

    router.forward = forward
    try:
        yield
    finally:
        router.forward = own


def forward_logits(model, processor, token_ids: np.ndarray, shot: np.ndarray, records: np.ndarray | None = None) -> torch.Tensor:
    """``(T, V)`` logits of transformers' forward of the sequence, ``records`` imposed if given."""
    ids = torch.from_numpy(token_ids.astype(np.int64))[None]
    vision = processor.image_processor(images=[shot], return_tensors="pt")
    inputs = dict(
        input_ids=ids, pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"],
        mm_token_type_ids=(ids == model.config.image_token_id).int(),
    )  # fmt: skip
    with torch.no_grad():
        if records is None:
            return model(**inputs).logits[0]
        with imposed_routing(torch.from_numpy(records)):
            return model(**inputs).logits[0]
