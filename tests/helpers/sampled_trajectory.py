"""A two-turn trajectory the embedded engine samples at temperature 0.7 and top-p 0.9, stored as
an Agent Loop stores it, with advantages as the group hook would write them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from tests.helpers.chat import part, request, run_core, screen, user_turn
from vlrl.mm import patch_rule_of
from vlrl.records import ADVANTAGES, SeqMeta
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.trajectory import Trajectory

SAMPLING = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=10, seed=11)


def stored_two_turns(tiny_path, processor, store: Any) -> tuple[Any, SeqMeta, np.ndarray]:
    """Turn 1 shows a screenshot; turn 2 continues the same context with a text message (the
    engine reuses the turn's KV prefix). Returns the store, the sequence's metadata and the shot."""
    shot = screen(320, 240, 4)
    first = user_turn(processor, "click the Save button", [shot])
    image_offset = int(np.flatnonzero(first == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>"))[0])
    image = ContextImage.of(shot)
    trajectory = Trajectory("traj-sampled")

    async def body(core):
        trajectory.set_context(Segment(first.tolist(), [image_offset]), [image])
        result = await core.generate(request(first, (part(shot),), trajectory="traj-sampled", sampling=SAMPLING))
        trajectory.add_generated(result)
        second = np.concatenate([trajectory.current.prompt_array(), user_turn(processor, "now press Enter", [], first=False)])
        trajectory.set_context(Segment(second.tolist(), [image_offset]), [image])
        again = (part(shot, send=False),)
        trajectory.add_generated(
            await core.generate(request(second, again, trajectory="traj-sampled", sampling=replace(SAMPLING, seed=12)))
        )

    run_core(tiny_path, body)
    (meta,) = trajectory.finish(
        store, key="seq/sampled", group_id="g", source="s", sample_index=0, reward=1.0, success=True,
        finish="done", patch_rule=patch_rule_of(processor),
    )  # fmt: skip
    store.add_fields(meta.key, {ADVANTAGES: np.ones(meta.num_tokens, np.float32)})
    return store, meta, shot
