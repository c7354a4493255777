"""OPD: a real teacher engine scores a stored trajectory (images included); the scores land in
the store on response tokens and the OPD hook turns them into per-token advantages."""

from __future__ import annotations

import asyncio

import numpy as np
from transformers import Qwen2VLForConditionalGeneration

from tests.helpers.reference_logprobs import reference_logprobs
from vlrl.control.group_hook import GroupHook
from vlrl.control.teacher import TeacherScorer
from vlrl.mm import patch_rule_of, store_image
from vlrl.records import ADVANTAGES, TEACHER_LOGPROBS, SeqMeta
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.teacher_engine import EngineTeacher
from vlrl.store import LocalStore


def _stored_sequence(store, processor, index: int) -> SeqMeta:
    rule = patch_rule_of(processor)
    chat = ChatFormat(processor.tokenizer, rule, "gui-agent", "Answer with one action.")
    pixels = np.random.default_rng(index).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    context = chat.context([ChatTurn("Click OK.", (160, 120), answer=[15, 16, 17, chat.im_end])])
    ids = np.asarray(context.ids, np.int32)
    mask = np.zeros(len(ids), bool)
    mask[-4:] = True
    key = f"seq/{index}"
    image = store_image(store, pixels, holder=key, rule=rule)
    store.put(key, {"token_ids": ids, "logprobs": np.where(mask, -1.0, 0.0).astype(np.float32), "loss_mask": mask})
    return SeqMeta(
        key=key, group_id="g", source="s", sample_index=index, reward=0.0, success=False, finish="done", turns=1,
        num_tokens=len(ids), num_response_tokens=4, context_lengths=(len(ids) - 4,), policy_version=0,
        images=(image,), image_offsets=((context.image_offsets[0], 0),),
    )


def test_teacher_scores_land_in_the_store_and_drive_opd_advantages(ray_session, tiny_path, processor):
    teacher = EmbeddedEngine.Config(cpus=0).build(model_path=str(tiny_path))
    store = LocalStore()
    try:
        metas = [_stored_sequence(store, processor, i) for i in range(2)]
        rewards = asyncio.run(TeacherScorer(EngineTeacher(teacher), store).grade(metas))
        assert rewards == [0.0, 0.0]  # scoring leaves rewards alone
        model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_path).eval()
        for meta in metas:
            row = store.get([meta.key])[meta.key]
            expected = reference_logprobs(model, processor, store, meta)
            scores, mask = row[TEACHER_LOGPROBS], row["loss_mask"]
            np.testing.assert_allclose(scores[1:][mask[1:]], expected[mask[1:]], atol=1e-4)
            assert (scores[~row["loss_mask"]] == 0).all()
        decision = GroupHook.Config(mode="opd").build()(metas, store)
        assert decision.accepted
        for meta in metas:
            row = store.get([meta.key])[meta.key]
            mask = row["loss_mask"]
            np.testing.assert_allclose(row[ADVANTAGES][mask], row[TEACHER_LOGPROBS][mask] - row["logprobs"][mask])
        # A retried group does not write the scores twice.
        asyncio.run(TeacherScorer(EngineTeacher(teacher), store).grade(metas))
    finally:
        ray_session.kill(teacher)
