"""On-policy distillation: a teacher scores every finished trajectory.

The teacher is an engine replica with the same API as the policy's (``score``). For each
sequence of a group the scorer reads its token ids, loss mask and images from the store, asks the
teacher for per-token logprobs of the whole sequence (images included), and writes them on the
response tokens (0 elsewhere) as the ``teacher_logprobs`` field. It plugs into the driver as a
grader: it runs asynchronously alongside rollouts, is retried and reported like one, and leaves
rewards as they were; the OPD hook then turns the scores into per-token advantages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlrl.control.group_hook import TEACHER_FIELD
from vlrl.mm import PIXELS_FIELD
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, ImagePart
from vlrl.store.records import SeqMeta


class TeacherScorer:
    def __init__(self, teacher: Any, store: Any) -> None:
        self.teacher = teacher
        """Ray handle of the teacher engine replica (``score(request)``)."""
        self.store = store

    async def grade(self, metas: Sequence[SeqMeta]) -> list[float]:
        await asyncio.gather(*(self._score(meta) for meta in metas))
        return [meta.reward for meta in metas]

    async def _score(self, meta: SeqMeta) -> None:
        if TEACHER_FIELD in await asyncio.to_thread(self.store.schema, meta.key):
            return  # an earlier attempt of a retried group already wrote this sequence's scores
        request, mask = await asyncio.to_thread(self._request, meta)
        answer = await self.teacher.score.remote(request)
        if isinstance(answer, CacheMiss):  # every pixel was sent: a miss means a broken teacher
            raise RuntimeError(f"teacher reported images {answer.missing} missing though their pixels were sent")
        scores = np.where(mask, answer.logprobs, 0.0).astype(np.float32)  # (T,) response tokens only
        await asyncio.to_thread(self.store.add_fields, meta.key, {TEACHER_FIELD: scores})

    def _request(self, meta: SeqMeta) -> tuple[GenerateRequest, np.ndarray]:
        row = self.store.get([meta.key], ["token_ids", "loss_mask"])[meta.key]
        keys = list(dict.fromkeys(item.store_key for item in meta.images))
        pixels = self.store.get(keys, [PIXELS_FIELD]) if keys else {}
        sent: set[str] = set()
        parts = []
        for _, index in meta.image_offsets:
            item = meta.images[index]
            first = item.content_hash not in sent
            sent.add(item.content_hash)
            image = pixels[item.store_key][PIXELS_FIELD] if first else None
            parts.append(ImagePart(item.content_hash, item.width, item.height, image))
        request = GenerateRequest(f"teacher/{meta.key}", f"teacher/{meta.key}", row["token_ids"], tuple(parts))
        return request, row["loss_mask"]
