"""A trajectory as it grows turn by turn, and its split into payload and metadata at the end.

The token sequence is kept exactly as built: prompt ids the client made and ids the policy
sampled, with their logprobs. At finish the payload is written to the store once (images once
per content hash, under their own keys) and only a ``SeqMeta`` goes back to the driver.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vlrl.mm import PatchRule, store_image
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.protocol import GenerateResult
from vlrl.store.records import EXTRA_PREFIX, Finish, SeqMeta


class Trajectory:
    def __init__(self, trajectory_id: str) -> None:
        self.trajectory_id = trajectory_id
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.loss_mask: list[bool] = []
        self.images: list[ContextImage] = []
        self.image_offsets: list[int] = []
        self.context_lengths: list[int] = []
        self.policy_versions: list[int] = []
        self.extras: dict[str, list[tuple[int, np.ndarray]]] = {}
        self.ended_with_stop = True

    def add_prompt(self, segment: Segment, images: list[ContextImage]) -> None:
        if len(images) != len(segment.image_offsets):
            raise ValueError(f"segment has {len(segment.image_offsets)} image slots but {len(images)} images")
        start = len(self.token_ids)
        self.token_ids += segment.ids
        self.logprobs += [0.0] * len(segment.ids)
        self.loss_mask += [False] * len(segment.ids)
        self.images += images
        self.image_offsets += [start + offset for offset in segment.image_offsets]

    def add_generated(self, result: GenerateResult) -> None:
        for name, values in result.extras.items():
            earlier = self.extras.setdefault(name, [])
            if earlier and (earlier[0][1].shape[1:], earlier[0][1].dtype) != (values.shape[1:], values.dtype):
                raise ValueError(
                    f"extra field {name!r}: rows of {values.dtype}{list(values.shape[1:])} after "
                    f"{earlier[0][1].dtype}{list(earlier[0][1].shape[1:])}; every turn must report the same form"
                )
            earlier.append((len(self.token_ids), values))
        self.context_lengths.append(len(self.token_ids))
        self.policy_versions.append(result.policy_version)
        self.token_ids += [int(t) for t in result.token_ids]
        self.logprobs += [float(p) for p in result.logprobs]
        self.loss_mask += [True] * len(result.token_ids)
        self.ended_with_stop = result.finish_reason == "stop"

    def prompt_array(self) -> np.ndarray:
        return np.asarray(self.token_ids, dtype=np.int32)

    def finish(
        self,
        store: Any,
        *,
        key: str,
        group_id: str,
        source: str,
        sample_index: int,
        reward: float,
        success: bool,
        finish: Finish,
        patch_rule: PatchRule,
    ) -> SeqMeta:
        """Write the payload once and return the metadata the driver schedules on."""
        unique: dict[str, int] = {}
        metas = []
        for image in self.images:
            if image.content_hash not in unique:
                unique[image.content_hash] = len(metas)
                metas.append(store_image(store, image.pixels, rule=patch_rule))
        store.put(
            key,
            {
                "token_ids": np.asarray(self.token_ids, dtype=np.int32),
                "logprobs": np.asarray(self.logprobs, dtype=np.float32),
                "loss_mask": np.asarray(self.loss_mask, dtype=bool),
                **self._extra_fields(),
            },
        )
        return SeqMeta(
            key=key,
            extra_fields=tuple(f"{EXTRA_PREFIX}{name}" for name in self.extras),
            group_id=group_id,
            source=source,
            sample_index=sample_index,
            reward=float(reward),
            success=success,
            finish=finish,
            turns=len(self.context_lengths),
            num_tokens=len(self.token_ids),
            num_response_tokens=sum(self.loss_mask),
            context_lengths=tuple(self.context_lengths),
            policy_version=min(self.policy_versions, default=0),
            images=tuple(metas),
            image_offsets=tuple(
                (offset, unique[image.content_hash]) for offset, image in zip(self.image_offsets, self.images)
            ),
        )

    def _extra_fields(self) -> dict[str, np.ndarray]:
        """Each engine-reported field as one per-token array over the whole sequence (zero rows on
        prompt tokens), so a packer can cut it by token range like the ids."""
        out = {}
        for name, parts in self.extras.items():
            first = parts[0][1]
            full = np.zeros((len(self.token_ids), *first.shape[1:]), dtype=first.dtype)
            for start, values in parts:
                full[start : start + len(values)] = values
            out[f"{EXTRA_PREFIX}{name}"] = full
        return out
