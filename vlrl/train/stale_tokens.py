"""Tokens sampled by too old a policy leave the loss: the per-token staleness bound.

An episode in flight across weight updates continues on the new weights, so one sequence holds
turns of several policy versions (``SeqMeta.turn_versions``). A step given ``min_version`` trains
only the tokens sampled by that version or a newer one: the others' loss mask is cleared in the
rank's window before the targets are shifted, so they count in no loss term and no denominator.
Which version sampled a window position comes from metadata alone: the position's sequence and
offset (``segment_ids``, ``position_ids``) fall in one request's generated tokens. A replayed
sequence (``SeqMeta.replay_of``) keeps its loss: the replay's own age bound applies to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from vlrl.pack.packed import PackedWindow
from vlrl.pack.plan import MicroBatch
from vlrl.records import SeqMeta


def token_versions(meta: SeqMeta, positions: np.ndarray) -> np.ndarray:
    """The policy version that sampled each of ``positions`` of ``meta``'s sequence (prompt
    positions get the version of the request they precede or follow: they carry no loss)."""
    if not meta.turn_versions:
        return np.full(len(positions), meta.policy_version, np.int64)
    turn = np.searchsorted(np.asarray(meta.context_lengths), positions, side="right") - 1
    return np.asarray(meta.turn_versions, np.int64)[np.clip(turn, 0, len(meta.turn_versions) - 1)]


def cut_stale(
    window: PackedWindow, micro_batch: MicroBatch, metas: Mapping[str, SeqMeta], min_version: int | None
) -> PackedWindow:
    """``window`` without loss on the tokens older than ``min_version`` (a new mask array: the
    window may be a segment its TP group shares); the window itself when none is."""
    if min_version is None or not any(metas[key].stale_tokens(min_version) for key in micro_batch.keys):
        return window
    keep = np.ones(len(window), bool)
    real = slice(0, window.num_tokens)
    segments, positions = window.segment_ids[real], window.position_ids[real]
    for segment in np.unique(segments):
        meta = metas[micro_batch.keys[segment]]
        if not meta.stale_tokens(min_version):
            continue
        at = np.flatnonzero(segments == segment)
        keep[at] = token_versions(meta, positions[at].astype(np.int64)) >= min_version
    return replace(window, loss_mask=window.loss_mask & keep)
