"""3-D M-RoPE position ids of Qwen2-VL / Qwen2.5-VL / Qwen3-VL, from ``SeqMeta`` alone, for packed training.

Qwen2-VL rotates each head's frequency bands by three position axes, (temporal, height, width)
(``mrope_section`` splits the bands). The positions of one sequence follow from where its images
sit and their patch grids; no token ids and no model call are needed:

* a text token has the same position ``p`` on all three axes, and the next one ``p + 1``;
* an image occurrence whose first placeholder comes when the next text position is ``s``, with
  LLM grid ``(t, gh, gw) = (t, h / merge, w / merge)``, gets over its ``t * gh * gw``
  placeholder tokens, in row-major ``(t, h, w)`` order::

      (s + t_idx, s + h_idx, s + w_idx)

* the text after it resumes at ``max(image positions) + 1 = s + max(gh, gw)`` (images have
  ``t = 1``, so the temporal axis never holds the maximum).

That is exactly ``Qwen2VLModel.get_rope_index`` (transformers 5.24: its next position after a
vision run is ``s + max(h, w) // merge``, which equals the maximum + 1 only when ``t = 1``).
Qwen2.5-VL's ``get_rope_index`` differs only for video, where the temporal index is scaled by
``tokens_per_second * second_per_grid``; a still image has ``t = 1`` (it is repeated to fill one
temporal patch) and index 0 there, so the same table serves both. Qwen3-VL's ``get_rope_index``
gives the same ids for still images (measured on the tiny builds); its interleaving of the three
sections over the frequency bands happens in its rotary embedding, from these same ids. Video is
not supported: a grid
with ``t != 1`` is refused rather than given positions that differ across transformers versions.

Two images back to back (no text token between) are two runs here; ``get_rope_index`` would
merge their placeholders into one run, which the chat template never produces (each image sits
between ``<|vision_start|>`` and ``<|vision_end|>``).

A packed window then gathers each token's triple from its sequence's table by
``(segment_ids, position_ids)`` (``window_mrope``); padding gets 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vlrl.records import SeqMeta


def sequence_mrope(meta: SeqMeta, merge_size: int) -> np.ndarray:
    """Return the ``(3, meta.num_tokens)`` int64 M-RoPE positions of one sequence.

    ``merge_size`` is the vision tower's ``spatial_merge_size`` (2 for every supported family).
    Every image occurrence (``meta.image_offsets``) must have a grid (``MMItemMeta.grid_thw``)
    with ``t = 1`` and sides divisible by ``merge_size``, a ``num_tokens`` of
    ``t * h * w / merge_size**2``, and its run must neither overlap another nor pass the end.
    """
    if isinstance(merge_size, bool) or not isinstance(merge_size, int) or merge_size < 1:
        raise ValueError(f"merge_size={merge_size!r}; expected an int >= 1")
    n = meta.num_tokens
    out = np.empty((3, n), dtype=np.int64)
    cursor = 0  # next token index not yet filled
    next_pos = 0  # position of the next text token
    for occurrence, (offset, index) in sorted(enumerate(meta.image_offsets), key=lambda o: o[1][0]):
        gt, gh, gw = _llm_grid(meta, occurrence, offset, index, merge_size)
        run = gt * gh * gw
        where = f"sequence {meta.key!r}: image occurrence {occurrence} (images[{index}], offset {offset})"
        if offset < cursor:
            raise ValueError(f"{where} overlaps the image run ending at token {cursor}; expected disjoint runs")
        if offset + run > n:
            raise ValueError(f"{where} has {run} tokens and runs past the sequence's {n} tokens")
        out[:, cursor:offset] = next_pos + np.arange(offset - cursor)  # text before: same on all axes
        next_pos += offset - cursor
        t_idx, h_idx, w_idx = np.indices((gt, gh, gw)).reshape(3, run)  # row-major (t, h, w)
        out[0, offset : offset + run] = next_pos + t_idx
        out[1, offset : offset + run] = next_pos + h_idx
        out[2, offset : offset + run] = next_pos + w_idx
        next_pos += max(gh, gw)  # = max(image positions) + 1, as t = 1
        cursor = offset + run
    out[:, cursor:] = next_pos + np.arange(n - cursor)
    return out


def window_mrope(
    positions_by_key: Mapping[str, np.ndarray],
    keys: Sequence[str],
    segment_ids: np.ndarray,
    position_ids: np.ndarray,
) -> np.ndarray:
    """Return the ``(3, W)`` int64 M-RoPE positions of a packed window.

    Token ``i`` belongs to sequence ``keys[segment_ids[i]]`` (``MicroBatch.keys``) at position
    ``position_ids[i]`` within it, and gets column ``position_ids[i]`` of that sequence's
    ``(3, num_tokens)`` table in ``positions_by_key`` (``sequence_mrope``); padding
    (``segment_ids == -1``) gets 0. Only the sequences the window holds need a table.
    """
    segment_ids = np.asarray(segment_ids)
    position_ids = np.asarray(position_ids)
    if segment_ids.ndim != 1 or position_ids.shape != segment_ids.shape:
        raise ValueError(
            f"segment_ids has shape {segment_ids.shape}, position_ids {position_ids.shape}; expected equal (W,)"
        )
    out = np.zeros((3, len(segment_ids)), dtype=np.int64)
    real = segment_ids != -1
    if not real.any():
        return out
    seg, pos = segment_ids[real].astype(np.int64), position_ids[real].astype(np.int64)
    present = np.unique(seg)
    if present[0] < 0 or present[-1] >= len(keys):
        bad = present[0] if present[0] < 0 else present[-1]
        raise ValueError(f"segment_ids holds {bad}; expected -1 (padding) or 0..{len(keys) - 1} (index into keys)")
    tables = [_table(positions_by_key, keys[s]) for s in present]
    lengths = np.array([table.shape[1] for table in tables])
    local = np.searchsorted(present, seg)  # (R,) index into present
    if pos.min() < 0 or (pos >= lengths[local]).any():
        i = int(np.flatnonzero((pos < 0) | (pos >= lengths[local]))[0])
        raise ValueError(
            f"position_ids holds {pos[i]} for sequence {keys[seg[i]]!r} of {lengths[local[i]]} tokens;"
            " expected a position within it"
        )
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out[:, real] = np.concatenate(tables, axis=1)[:, starts[local] + pos]  # (3, R)
    return out


def _llm_grid(meta: SeqMeta, occurrence: int, offset: int, index: int, merge_size: int) -> tuple[int, int, int]:
    """The image's grid in LLM tokens, ``(t, h / merge, w / merge)``, after checking it."""
    image = meta.images[index]
    where = f"sequence {meta.key!r}: image occurrence {occurrence} (images[{index}] = {image.store_key})"
    if image.grid_thw is None:
        raise ValueError(f"{where} has grid_thw=None; expected a grid (apply the encoder's PatchRule)")
    t, h, w = image.grid_thw
    if t != 1:
        raise ValueError(f"{where} has grid_thw={image.grid_thw}; expected t=1 (an image; video is not supported)")
    if h % merge_size or w % merge_size:
        raise ValueError(
            f"{where} has grid_thw={image.grid_thw}; expected h and w divisible by merge_size={merge_size}"
        )
    grid = (t, h // merge_size, w // merge_size)
    if image.num_tokens != grid[0] * grid[1] * grid[2]:
        raise ValueError(
            f"{where} has num_tokens={image.num_tokens}; its grid {image.grid_thw} with merge_size={merge_size}"
            f" gives {grid[0] * grid[1] * grid[2]}"
        )
    return grid


def _table(positions_by_key: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    if key not in positions_by_key:
        raise KeyError(f"positions_by_key has no table for sequence {key!r}, which the window holds")
    table = np.asarray(positions_by_key[key])
    if table.ndim != 2 or table.shape[0] != 3:
        raise ValueError(f"positions_by_key[{key!r}] has shape {table.shape}; expected (3, num_tokens)")
    return table
