"""A trajectory as it grows turn by turn, and its split into payload and metadata at the end.

Each turn the Agent Loop proposes the whole context. When it extends the current sequence (all
screenshots kept), only the new tail is appended, so one trajectory is one training sequence and
the engine reuses its KV prefix. When the context was rewritten (a history window dropped an old
screenshot), a new sequence starts with that context as its prompt: every sequence is exactly
what the policy conditioned on, and only the tokens it sampled carry loss.

At finish each sequence's payload is written to the store once (images once per content hash,
under their own keys) and only ``SeqMeta`` records go back to the driver. A branch of a branching
rollout does not write again the rows it shares with its root: it names the root's key
(``SeqMeta.prefix_key``) and holds a reference to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from vlrl.mm import PatchRule, describe_image, require_canonical
from vlrl.mm.image_rows import ImageWriter
from vlrl.records import EXTRA_PREFIX, FIELDS, LOGPROBS, LOSS_MASK, TOKEN_IDS, Finish, SeqMeta
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.protocol import GenerateResult
from vlrl.store import KeyMissingError, WriteLedger


@dataclass(slots=True)
class Sequence:
    """One training sequence: the exact ids, their logprobs, and which of them the policy sampled."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[bool] = field(default_factory=list)
    images: list[ContextImage] = field(default_factory=list)
    image_offsets: list[int] = field(default_factory=list)
    context_lengths: list[int] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    """Tokens generated at each request."""
    states: list[str] = field(default_factory=list)
    """The state key each request was made in (``Observation.state_key``, else the screenshot's
    content hash)."""
    extras: dict[str, list[tuple[int, np.ndarray]]] = field(default_factory=dict)

    def extends_to(self, context: Segment, images: list[ContextImage]) -> bool:
        n, m = len(self.token_ids), len(self.images)
        return (
            context.ids[:n] == self.token_ids
            and [i.content_hash for i in images[:m]] == [i.content_hash for i in self.images]
            and context.image_offsets[:m] == self.image_offsets
        )

    def add_prompt(self, ids: list[int], images: list[ContextImage], offsets: list[int]) -> None:
        self.token_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.loss_mask += [False] * len(ids)
        self.images += images
        self.image_offsets += offsets

    def add_generated(self, result: GenerateResult, state: str = "") -> None:
        prompt_start = len(self.token_ids) - result.prefill_tokens  # the engine computed the prompt from here
        for start, extras in ((prompt_start, result.prompt_extras), (len(self.token_ids), result.extras)):
            for name, values in extras.items():
                earlier = self.extras.setdefault(name, [])
                if earlier and (earlier[0][1].shape[1:], earlier[0][1].dtype) != (values.shape[1:], values.dtype):
                    raise ValueError(
                        f"extra field {name!r}: rows of {values.dtype}{list(values.shape[1:])} after "
                        f"{earlier[0][1].dtype}{list(earlier[0][1].shape[1:])}; every turn must report the same form"
                    )
                earlier.append((start, values))
        self.context_lengths.append(len(self.token_ids))
        self.states.append(state)
        self.policy_versions.append(result.policy_version)
        self.generated.append(len(result.token_ids))
        self.token_ids += [int(t) for t in result.token_ids]
        self.logprobs += [float(p) for p in result.logprobs]
        self.loss_mask += [True] * len(result.token_ids)

    def prompt_array(self) -> np.ndarray:
        return np.asarray(self.token_ids, dtype=np.int32)

    def payload(self) -> dict[str, np.ndarray]:
        fields = {
            TOKEN_IDS: np.asarray(self.token_ids, dtype=FIELDS[TOKEN_IDS].dtype),
            LOGPROBS: np.asarray(self.logprobs, dtype=FIELDS[LOGPROBS].dtype),
            LOSS_MASK: np.asarray(self.loss_mask, dtype=FIELDS[LOSS_MASK].dtype),
        }
        # Engine-reported fields become per-token arrays over the whole sequence (zero rows where
        # the engine reported none), so a packer cuts them by token range like the ids; a later
        # request's rows (a prompt it computed again) replace an earlier one's.
        for name, parts in self.extras.items():
            first = parts[0][1]
            full = np.zeros((len(self.token_ids), *first.shape[1:]), dtype=first.dtype)
            for start, values in parts:
                full[start : start + len(values)] = values
            fields[f"{EXTRA_PREFIX}{name}"] = full
        return fields


class Trajectory:
    def __init__(self, trajectory_id: str) -> None:
        self.trajectory_id = trajectory_id
        self.sequences: list[Sequence] = []

    @property
    def current(self) -> Sequence:
        return self.sequences[-1]

    def set_context(self, context: Segment, images: list[ContextImage]) -> None:
        """Make the current sequence end with ``context``: extend it, or start a new sequence."""
        if len(images) != len(context.image_offsets):
            raise ValueError(f"context has {len(context.image_offsets)} image slots but {len(images)} images")
        if self.sequences and self.current.extends_to(context, images):
            sequence = self.current
            n, m = len(sequence.token_ids), len(sequence.images)
            sequence.add_prompt(context.ids[n:], images[m:], context.image_offsets[m:])
        else:
            sequence = Sequence()
            sequence.add_prompt(context.ids, images, context.image_offsets)
            self.sequences.append(sequence)

    def add_generated(self, result: GenerateResult, state: str = "") -> None:
        """``state``: the key of the state the request was made in (step-level credit's anchor;
        '' when unknown: such a turn is compared with no other)."""
        self.current.add_generated(result, state)

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
        task: str = "",
        turn_rewards: tuple[float, ...] = (),
        branch_of: tuple[int, int] = (),
        prefix_from: tuple[tuple[str, list[int]], ...] = (),
        ledger: WriteLedger | None = None,
    ) -> list[SeqMeta]:
        """Write every sequence's payload once; return their metadata (the trajectory's reward on
        each). Each sequence holds one reference to each of its images (``mm.store_images``).
        ``branch_of``: a branch's ``SeqMeta.branch_of`` (() for a trajectory played from reset).
        ``prefix_from``: a branch's root's sequences, ``(store key, token ids)``, written already.
        The rows the branch's first sequence shares with one of them, up to its first request's
        prompt, are not written again: the sequence names that key as its ``prefix_key`` and holds
        one reference to it (``store.sequence_rows``).
        ``turn_rewards``: what each request's move earned, over the whole trajectory (() when not
        known); each sequence gets those of its requests.

        Every ``SeqMeta`` is built (and so checked) before the first write, and a write that fails
        takes back all earlier ones (through ``ledger``; the tenant's own, if it has one), so a
        finish either returns metadata for every key it wrote or leaves nothing behind."""
        sequences = [s for s in self.sequences if s.context_lengths]  # a prompt never answered trains nothing
        labels = dict(group_id=group_id, source=source, sample_index=sample_index, reward=float(reward))
        labels.update(success=success, finish=finish, task=task, branch_of=branch_of)
        requests = [len(s.context_lengths) for s in sequences]
        if turn_rewards and len(turn_rewards) != sum(requests):
            raise ValueError(f"turn_rewards has {len(turn_rewards)} entries; the trajectory made {sum(requests)} requests")
        starts = np.cumsum([0, *requests]).tolist()
        prefix = _shared_prefix(sequences[0], prefix_from) if sequences and prefix_from else ("", 0)
        writes = [
            _SequenceWrite.of(
                s,
                key if len(sequences) == 1 else f"{key}/{i}",
                patch_rule,
                {**labels, "turn_rewards": tuple(turn_rewards[starts[i] : starts[i + 1]])},
                prefix if i == 0 else ("", 0),
            )
            for i, s in enumerate(sequences)
        ]
        if ledger is None:
            ledger = WriteLedger(f"trajectory {self.trajectory_id}")
        images = ImageWriter(store)
        try:
            for write in writes:
                for item, pixels in zip(write.meta.images, write.pixels):
                    holder = write.meta.key
                    ledger.hold(  # called at once: the loop's variables are bound
                        store, item.store_key, holder,
                        lambda writer: images.put(store, item, pixels, holder=holder, writer=writer),  # noqa: B023
                    )  # fmt: skip
                if write.meta.prefix_key:
                    ledger.hold(store, write.meta.prefix_key, write.meta.key, partial(_share, store, write.meta))
                ledger.put(store, write.meta.key, write.payload)
        except BaseException as error:
            try:
                ledger.take_back()
            except Exception as cleanup:
                error.add_note(f"taking back the trajectory's earlier writes failed too: {cleanup!r}")
            raise
        return [write.meta for write in writes]


def _shared_prefix(sequence: Sequence, roots: tuple[tuple[str, list[int]], ...]) -> tuple[str, int]:
    """``(root key, rows)``: the longest run of first token ids ``sequence`` shares with one of
    the ``roots``, within its first request's prompt (the tokens it generated are its own even
    where they repeat the root's); ``("", 0)`` when none shares any."""
    rows = min(sequence.context_lengths[0], len(sequence.token_ids) - 1)  # a sequence keeps one row of its own
    prompt = np.asarray(sequence.token_ids[:rows], dtype=np.int64)
    best = ("", 0)
    for key, ids in roots:
        limit = min(len(ids), len(prompt))
        differs = np.flatnonzero(np.asarray(ids[:limit], dtype=np.int64) != prompt[:limit])
        shared = int(differs[0]) if len(differs) else limit
        if shared > best[1]:
            best = (key, shared)
    return best


def _share(store: Any, meta: SeqMeta, writer: str | None) -> None:
    """Take ``meta``'s reference to its prefix key, which its root wrote before it."""
    if not store.share([meta.prefix_key], meta.key, writer=writer, settle=True)[0]:
        raise KeyMissingError(
            f"store key {meta.prefix_key!r}: the prefix of branch {meta.key!r} is not written (its root's write"
            " failed or went)"
        )


@dataclass(frozen=True, slots=True)
class _SequenceWrite:
    """What finishing one sequence writes, built (and checked by ``SeqMeta``) before any write."""

    meta: SeqMeta
    payload: dict[str, np.ndarray]
    pixels: list[np.ndarray]
    """Canonical pixels of each of ``meta.images``."""

    @staticmethod
    def of(
        sequence: Sequence, key: str, patch_rule: PatchRule, labels: dict[str, Any], prefix: tuple[str, int]
    ) -> _SequenceWrite:
        """``prefix``: ``(key, rows)`` of the first rows stored under another key (``("", 0)``: none)."""
        by_hash = {image.content_hash: image.pixels for image in sequence.images}
        hashes = list(by_hash)
        pixels = [require_canonical(by_hash[h]) for h in hashes]
        payload = {name: rows[prefix[1] :] for name, rows in sequence.payload().items()}
        meta = SeqMeta(
            key=key,
            turns=len(sequence.context_lengths),
            num_tokens=len(sequence.token_ids),
            num_response_tokens=sum(sequence.loss_mask),
            context_lengths=tuple(sequence.context_lengths),
            policy_version=min(sequence.policy_versions),
            turn_versions=tuple(sequence.policy_versions),
            turn_tokens=tuple(sequence.generated),
            turn_states=tuple(sequence.states),
            images=tuple(describe_image(p, rule=patch_rule) for p in pixels),
            image_offsets=tuple(
                (offset, hashes.index(image.content_hash))
                for offset, image in zip(sequence.image_offsets, sequence.images)
            ),
            extra_fields=tuple(name for name in payload if name.startswith(EXTRA_PREFIX)),
            prefix_key=prefix[0],
            prefix_tokens=prefix[1],
            **labels,
        )
        return _SequenceWrite(meta, payload, pixels)

