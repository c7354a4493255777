"""On-policy distillation: a teacher scores every finished trajectory.

The teacher is anything with ``Teacher.logprobs`` (the training job passes an engine replica
through ``rollout.teacher_engine.EngineTeacher``; the control plane never imports the engines).
For each sequence of a group the scorer reads its token ids, loss mask and images from the store,
asks the teacher for per-token logprobs of the whole sequence (images included), and writes them
on the response tokens (0 elsewhere) as the ``teacher_logprobs`` field. It plugs into the driver
as a grader: it runs asynchronously alongside rollouts, is retried and reported like one, and
leaves rewards as they were; the OPD hook then turns the scores into per-token advantages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from vlrl.mm.image_rows import read_images
from vlrl.records import LOSS_MASK, TEACHER_LOGPROBS, TOKEN_IDS, MMItemMeta, SeqMeta
from vlrl.store.sequence_rows import own_rows, read_sequences

ImageOccurrence = tuple[MMItemMeta, "np.ndarray | None"]
"""One image of a sequence in order of appearance: its metadata, and its pixels at the image's
first occurrence (None after: the teacher has them by then)."""


class Teacher(Protocol):
    async def logprobs(
        self, sequence_id: str, token_ids: np.ndarray, images: Sequence[ImageOccurrence]
    ) -> np.ndarray:
        """``(T,)`` logprob of each of ``token_ids`` under the teacher, given every earlier one."""
        ...


class TeacherScorer:
    def __init__(self, teacher: Teacher, store: Any) -> None:
        self.teacher = teacher
        self.store = store

    async def grade(self, metas: Sequence[SeqMeta]) -> list[float]:
        await asyncio.gather(*(self._score(meta) for meta in metas))
        return [meta.reward for meta in metas]

    async def _score(self, meta: SeqMeta) -> None:
        if TEACHER_LOGPROBS in await asyncio.to_thread(self.store.schema, meta.key):
            return  # an earlier attempt of a retried group already wrote this sequence's scores
        token_ids, mask, images = await asyncio.to_thread(self._inputs, meta)
        logprobs = await self.teacher.logprobs(f"teacher/{meta.key}", token_ids, images)
        scores = np.where(mask, logprobs, 0.0).astype(np.float32)  # (T,) response tokens only
        await asyncio.to_thread(self.store.add_fields, meta.key, {TEACHER_LOGPROBS: own_rows(meta, scores)})

    def _inputs(self, meta: SeqMeta) -> tuple[np.ndarray, np.ndarray, list[ImageOccurrence]]:
        row = read_sequences(self.store, [meta], [TOKEN_IDS, LOSS_MASK])[meta.key]
        keys = list(dict.fromkeys(item.store_key for item in meta.images))
        pixels = read_images(self.store, keys)
        sent: set[str] = set()
        images: list[ImageOccurrence] = []
        for _, index in meta.image_offsets:
            item = meta.images[index]
            first = item.content_hash not in sent
            sent.add(item.content_hash)
            images.append((item, pixels[item.store_key] if first else None))
        return row[TOKEN_IDS], row[LOSS_MASK], images
