"""``micro_batch_inputs``: what one rank feeds the model and the loss for one micro-batch.

The logits at position ``q`` predict token ``q + 1``, so the loss at ``q`` uses the *next* token's
id, rollout logprob, advantage, loss mask and teacher logprob. The token after the last one of a
CP chunk lives on another CP rank, so the CP group all-gathers its windows' per-token scalars
(a few bytes per token, against the keys and values every layer gathers) and every rank rebuilds
the micro-batch in packed order, shifts it by one, and keeps its own window and TP shard. A
target counts only inside its sequence (same segment) and where the next token is a loss token.

The sampling temperature and nucleus of each target (``records.SAMPLING_TEMPERATURE`` and
``SAMPLING_NUCLEUS``, when the window's sequences carry them) are shifted the same way, so the
trainer scores each target under the distribution the engine drew it from; off the loss mask
they are neutral (temperature 1, no nucleus).

Under routing replay each position's recorded experts (``records.ROUTED_EXPERTS``) come as they
are, unshifted: the routing of position ``q`` is that of the token at ``q``, the input there.

For the logprob-mismatch guard (``train.mismatch``) each loss position also says which reply turn
of its sequence its target belongs to (a turn: a run of loss tokens) and which images (ordinals of
the sequence's image runs) that turn's prompt showed, counted in the whole packed micro-batch so
that every CP rank numbers them alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from vlrl.pack.layout import Layout
from vlrl.pack.packed import PackedWindow
from vlrl.pack.plan import MicroBatch
from vlrl.records import ADVANTAGES, LOGPROBS, ROUTED_EXPERTS, SAMPLING_NUCLEUS, SAMPLING_TEMPERATURE, TEACHER_LOGPROBS
from vlrl.train.mrope import window_mrope

_OPTIONAL = (LOGPROBS, ADVANTAGES, TEACHER_LOGPROBS)
"""Per-token scalars a window has when the loss needs them; shifted like the ids."""
_SAMPLING = (SAMPLING_TEMPERATURE, SAMPLING_NUCLEUS)
"""Per-token sampling settings a window has when its sequences were sampled with them."""


@dataclass(frozen=True, slots=True)
class MicroBatchInputs:
    """One rank's share of a micro-batch; ``(W,)`` arrays cover the whole CP window, ``(S,)`` ones
    this rank's TP shard of it."""

    token_ids: np.ndarray  # (W,)
    mrope: np.ndarray  # (3, W) M-RoPE positions
    positions: np.ndarray  # (W,) packed position in the micro-batch (causality across CP ranks)
    segment_ids: np.ndarray  # (W,)
    image_index: np.ndarray  # (R,) shard positions of this rank's image-token rows, window order
    target_ids: np.ndarray  # (S,) token q + 1 (0 where there is none)
    loss_mask: np.ndarray  # (S,) bool
    logprobs: np.ndarray | None  # (S,) the sampling policy's, when the window has them
    advantages: np.ndarray | None  # (S,)
    teacher_logprobs: np.ndarray | None  # (S,)
    temperature: np.ndarray | None  # (S,) float32 the target was sampled at, when not 1 (1 off the mask)
    nucleus: np.ndarray | None  # (S,) int64 kept count of its top-p nucleus (0: none, and off the mask)
    routing: np.ndarray | None  # (S, layers, k) the rollout's expert records of each position, under routing replay
    seq_loss_tokens: np.ndarray  # (S,) loss tokens of the position's whole sequence (0 off the mask)
    shard_segments: np.ndarray  # (S,) segment (index into the micro-batch's keys) of each position
    turn_ids: np.ndarray  # (S,) reply turn of the target within its sequence, 0-based (-1 off the mask)
    turn_first_image: np.ndarray  # (S,) ordinal of the first image of that turn's prompt in its sequence
    turn_images: np.ndarray  # (S,) images of that turn's prompt, since the previous turn (0: none)
    target_positions: np.ndarray  # (S,) the target's position in its own sequence (q's + 1)

    def sampled_distribution(self, device: torch.device) -> dict[str, Any]:
        """``token_logprobs_and_entropy``'s ``temperature`` and ``nucleus`` for these targets: the
        distribution each was drawn from (temperature 1 and no nucleus when not stored)."""
        as_tensor = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
        return {
            "temperature": 1.0 if self.temperature is None else as_tensor(self.temperature),
            "nucleus": None if self.nucleus is None else as_tensor(self.nucleus),
        }


def micro_batch_inputs(
    window: PackedWindow,
    micro_batch: MicroBatch,
    layout: Layout,
    cp_rank: int,
    tp_rank: int,
    mrope_tables: Mapping[str, np.ndarray],
    *,
    image_token_id: int,
    cp_group=None,
    replay_routing: bool = False,
) -> MicroBatchInputs:
    """Inputs of this rank from its CP window. Collective over ``cp_group`` (None for cp = 1).
    An empty micro-batch comes as a window of padding only (``layout.pad_multiple`` tokens).
    ``replay_routing``: the window's sequences must carry the rollout's routing, which ``routing`` holds."""
    routing = window.extras.get(ROUTED_EXPERTS)
    if replay_routing and routing is None and micro_batch.keys:
        raise ValueError(
            f"routing replay (loss.routing_replay='rollout'): sequences {list(micro_batch.keys)[:3]} carry no"
            f" {ROUTED_EXPERTS!r}; the engine that sampled them did not record routing (EmbeddedEngine.Config.record_routing)"
        )
    total = micro_batch.num_tokens or layout.pad_multiple
    positions = np.concatenate([np.arange(a, b) for a, b in layout.cp_window(total, cp_rank)] or [np.zeros(0, np.int64)])
    if len(positions) != len(window):
        raise ValueError(f"CP rank {cp_rank}: window of {len(window)} tokens; the layout gives {len(positions)}")
    present = {**{name: getattr(window, name) for name in _OPTIONAL}, **window.extras}
    names = [name for name in (*_OPTIONAL, *_SAMPLING) if present.get(name) is not None]
    full = _packed_columns(window, [present[n] for n in names], layout, total, cp_group)  # (padded, 3 + len(names)), packed order
    seg = full[:, 1].astype(np.int64)
    nxt = np.concatenate([full[1:], np.zeros((1, full.shape[1]))])  # token q + 1's columns
    nxt_seg = np.concatenate([seg[1:], [-1]])
    mask = (seg >= 0) & (nxt_seg == seg) & (nxt[:, 2] > 0)
    shifted = {name: nxt[:, 3 + i] for i, name in enumerate(names)}
    counts = np.bincount(seg[mask], minlength=max(len(micro_batch.keys), 1))
    seq_tokens = np.where(mask, counts[np.maximum(seg, 0)], 0)
    turn_ids, first_image, images = _turns(full[:, 0] == image_token_id, seg, mask)

    start, stop = layout.tp_shard(len(window), tp_rank)
    mine = positions[start:stop]
    shard = window.tp_shard(layout, tp_rank)
    image_index = np.concatenate(
        [np.arange(p.window_start, p.window_start + p.num_rows) for p in shard.images] or [np.zeros(0, np.int64)]
    )
    if len(image_index) and not np.all(shard.token_ids[image_index] == image_token_id):
        raise ValueError(
            f"CP rank {cp_rank} TP rank {tp_rank}: image placements cover tokens that are not the image token"
            f" {image_token_id}; the stored token ids and SeqMeta.image_offsets disagree"
        )
    return MicroBatchInputs(
        token_ids=np.asarray(window.token_ids, dtype=np.int64),
        mrope=window_mrope(mrope_tables, micro_batch.keys, window.segment_ids, window.position_ids),
        positions=positions,
        segment_ids=np.asarray(window.segment_ids, dtype=np.int64),
        image_index=image_index.astype(np.int64),
        target_ids=np.where(mask[mine], nxt[mine, 0], 0).astype(np.int64),
        loss_mask=mask[mine],
        **{name: shifted[name][mine] if name in shifted else None for name in _OPTIONAL},
        temperature=_on_mask(shifted, SAMPLING_TEMPERATURE, mask[mine], mine, np.float32, 1),
        nucleus=_on_mask(shifted, SAMPLING_NUCLEUS, mask[mine], mine, np.int64, 0),
        routing=np.array(shard.extras[ROUTED_EXPERTS]) if replay_routing and routing is not None else None,  # a writable copy
        seq_loss_tokens=seq_tokens[mine].astype(np.float64),
        shard_segments=seg[mine],
        turn_ids=turn_ids[mine],
        turn_first_image=first_image[mine],
        turn_images=images[mine],
        target_positions=np.asarray(window.position_ids[start:stop], dtype=np.int64) + 1,
    )


def _turns(is_image: np.ndarray, seg: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position of the packed micro-batch (``(P,)`` each, sequences contiguous, padding -1):
    the reply turn of its target (runs of ``mask`` in its sequence, 0-based; -1 off the mask), and
    the first ordinal and number of the image runs between the previous turn and this one.

    1. Number the contiguous sequences (``run``) so that counts restart in each.
    2. Image runs and turns start where an image token / a loss position follows none in the
       same sequence; ``seen[q]``: image runs started at or before ``q`` in its sequence.
    3. At each turn's start, the images shown since the previous turn are ``seen`` there minus
       ``seen`` at the previous turn's last position (carried forward as a running max).
    4. Each loss position takes the values of its turn's start.
    """
    size = len(seg)
    same = np.concatenate([[False], seg[1:] == seg[:-1]]) & (seg >= 0)  # (P,) continues the previous position's sequence
    run = np.cumsum(~same)  # 1.
    image_start = is_image & (seg >= 0) & ~(np.concatenate([[False], is_image[:-1]]) & same)  # 2.
    turn_start = mask & ~(np.concatenate([[False], mask[:-1]]) & same)
    seen = _per_run_cumsum(image_start, run)
    turns = _per_run_cumsum(turn_start, run) - 1
    base = run.astype(np.int64) * (size + 1)  # running max restarted per sequence: offset each sequence above the last
    at_turns = np.maximum.accumulate(np.where(mask, seen, 0) + base) - base  # 3. seen at the latest loss position
    before = np.concatenate([[0], at_turns[:-1]])
    before = np.where(same, before, 0)
    starts = np.maximum.accumulate(np.where(turn_start, np.arange(size), 0))  # 4. each position's latest turn start
    first = before[starts]
    shown = seen[starts] - first
    return (
        np.where(mask, turns, -1).astype(np.int64),
        np.where(mask, first, 0).astype(np.int64),
        np.where(mask, shown, 0).astype(np.int64),
    )


def _per_run_cumsum(flags: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Inclusive cumulative count of ``flags`` restarted at each new value of ``run`` (ascending)."""
    total = np.cumsum(flags, dtype=np.int64)
    starts = np.concatenate([[True], run[1:] != run[:-1]])
    before_run = np.maximum.accumulate(np.where(starts, total - flags, 0))
    return total - before_run


def _on_mask(
    shifted: Mapping[str, np.ndarray], name: str, mask: np.ndarray, mine: np.ndarray, dtype: type, neutral: float
) -> np.ndarray | None:
    """The shard's shifted sampling column ``name`` on loss targets, ``neutral`` elsewhere (prompt
    targets are stored as 0, which is no temperature); None when the window lacks the field."""
    if name not in shifted:
        return None
    return np.where(mask, shifted[name][mine], neutral).astype(dtype)


def _packed_columns(window: PackedWindow, optional: list[np.ndarray], layout: Layout, total: int, cp_group) -> np.ndarray:
    """``(padded_len, 3 + len(optional))`` float64 of the whole micro-batch in packed order: token
    ids, segment ids, loss mask, then the ``optional`` per-token scalars."""
    columns = [window.token_ids, window.segment_ids, window.loss_mask, *optional]
    local = np.stack(columns, axis=1).astype(np.float64)  # (W, columns): token ids are exact in float64
    if cp_group is None:
        return local
    gathered = torch.empty((layout.cp * len(local), local.shape[1]), dtype=torch.float64)
    dist.all_gather_into_tensor(gathered, torch.from_numpy(local), group=cp_group)
    out = np.empty((layout.padded_len(total), local.shape[1]))
    for cp_rank, rows in enumerate(gathered.numpy().reshape(layout.cp, len(local), -1)):
        at = 0
        for a, b in layout.cp_window(total, cp_rank):
            out[a:b] = rows[at : at + b - a]
            at += b - a
    return out
