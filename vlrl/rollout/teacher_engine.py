"""An engine replica as the OPD teacher (``control.teacher.Teacher``): one ``score`` call per
sequence, every image's pixels sent with its first occurrence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlrl.records import MMItemMeta
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, ImagePart


class EngineTeacher:
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        """Ray handle of the teacher engine replica (``score(request)``)."""

    async def logprobs(
        self, sequence_id: str, token_ids: np.ndarray, images: Sequence[tuple[MMItemMeta, np.ndarray | None]]
    ) -> np.ndarray:
        parts = tuple(ImagePart(item.content_hash, item.width, item.height, pixels) for item, pixels in images)
        answer = await self.engine.score.remote(GenerateRequest(sequence_id, sequence_id, token_ids, parts))
        if isinstance(answer, CacheMiss):  # every pixel was sent: a miss means a broken teacher
            raise RuntimeError(f"teacher reported images {answer.missing} missing though their pixels were sent")
        return answer.logprobs
