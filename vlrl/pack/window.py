"""Cut one CP window of a packed micro-batch straight from the store's unpadded rows.

Two steps, so that the caller chooses where the window lives (private memory, or one shared
segment per TP group) and nothing is copied twice:

1. ``WindowCut.of`` decides everything from metadata (``Plan`` ranges, ``SeqMeta``, one
   ``schema`` call): the row ranges to read, the arrays' shapes and dtypes, where each image's
   token rows land. No payload moves. The fields are the ones the caller's loss needs
   (``records.fields_for``) plus the sequences' ``extra/...`` fields; each window array has its
   store field's name.
2. ``WindowCut.fill`` reads each range of each field with ``get_range``, so only the store
   chunks the window overlaps move, and writes it into the given arrays at its window offset. A
   branch's prefix rows are read from its root's key (``store.sequence_rows.read_range``).

No dense micro-batch is ever built: besides the rows of one range at a time, as the store returns
them, the window's own arrays are all that is allocated, and a sequence outside it is never read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vlrl.pack.layout import Layout
from vlrl.pack.packed import PAD_SEGMENT_ID, ImagePlacement, PackedWindow
from vlrl.pack.plan import MicroBatch, RowRange
from vlrl.records import EXTRA_PREFIX, FIELDS, TOKEN_IDS, SeqMeta, pad_value
from vlrl.store import PayloadStore
from vlrl.store.sequence_rows import read_range


@dataclass(frozen=True, slots=True)
class WindowCut:
    """What one CP window is made of, known before any payload is read."""

    length: int
    """Window tokens, padding included (``Layout.window_len``)."""
    ranges: tuple[RowRange, ...]
    """Row ranges in window order; they fill ``[0, num_tokens)`` and padding follows."""
    segments: tuple[int, ...]
    """Index in the micro-batch of each range's sequence: its segment id."""
    fields: Mapping[str, tuple[tuple[int, ...], str]]
    """Store field (and window array) -> (row shape, dtype)."""
    images: tuple[ImagePlacement, ...]
    sequences: tuple[SeqMeta, ...] = ()
    """Each range's sequence: where its rows are stored (a branch's prefix rows under its root's
    key, ``store.sequence_rows``)."""

    @property
    def num_tokens(self) -> int:
        return sum(r.stop - r.start for r in self.ranges)

    @classmethod
    def of(
        cls,
        store: PayloadStore,
        layout: Layout,
        micro_batch: MicroBatch,
        cp_rank: int,
        metas: Mapping[str, SeqMeta],
        fields: Sequence[str],
    ) -> WindowCut:
        """Plan CP rank ``cp_rank``'s window of ``micro_batch`` with the payload ``fields``;
        ``metas`` must hold its sequences."""
        for key, length in zip(micro_batch.keys, micro_batch.lengths):
            if key not in metas:
                raise ValueError(f"no SeqMeta for sequence {key!r} of the micro-batch; pass the step's metadata")
            if metas[key].num_tokens != length:
                raise ValueError(f"SeqMeta of {key!r} has {metas[key].num_tokens} tokens but the plan {length}")
        ranges = tuple(micro_batch.cp_ranges(cp_rank, layout))
        segment_of = {key: j for j, key in enumerate(micro_batch.keys)}
        return cls(
            length=layout.window_len(micro_batch.num_tokens),
            ranges=ranges,
            segments=tuple(segment_of[r.key] for r in ranges),
            fields=_fields(store, micro_batch, metas, fields),
            images=tuple(p for r in ranges for p in _placements(r, metas[r.key])),
            sequences=tuple(metas[r.key] for r in ranges),
        )

    def array_specs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Shape and dtype of every array of the window."""
        specs = {"position_ids": ((self.length,), "int32"), "segment_ids": ((self.length,), "int32")}
        pieces = len(self.ranges) + (self.num_tokens < self.length)  # the pad tail is a piece
        specs["cu_seqlens"] = ((pieces + 1,), "int32")
        for name, (row_shape, dtype) in self.fields.items():
            specs[name] = ((self.length, *row_shape), dtype)
        return specs

    def fill(self, store: PayloadStore, out: Mapping[str, np.ndarray]) -> PackedWindow:
        """Read the window's ranges into ``out`` (arrays of ``array_specs``) and pad the tail."""
        real = self.num_tokens
        for field, (row_shape, dtype) in self.fields.items():
            target = out[field]
            for r, meta in zip(self.ranges, self.sequences, strict=True):
                rows = read_range(store, meta, field, r.start, r.stop)
                if rows.shape[1:] != row_shape or rows.dtype != dtype:
                    raise ValueError(
                        f"store field {r.key!r}/{field!r} holds {rows.dtype}{list(rows.shape[1:])} rows; the"
                        f" micro-batch's first sequence has {dtype}{list(row_shape)}: a field must agree across it"
                    )
                target[r.window_start : r.window_start + len(rows)] = rows
            target[real:] = pad_value(field)
        positions, segments = out["position_ids"], out["segment_ids"]
        for r, segment in zip(self.ranges, self.segments):
            positions[r.window_start : r.window_start + r.stop - r.start] = np.arange(r.start, r.stop)
            segments[r.window_start : r.window_start + r.stop - r.start] = segment
        positions[real:] = 0
        segments[real:] = PAD_SEGMENT_ID
        starts = [r.window_start for r in self.ranges] + ([real] if real < self.length else [])
        out["cu_seqlens"][:] = [*starts, self.length]
        return PackedWindow.from_arrays(out, num_tokens=real, images=self.images)


def cut_window(
    store: PayloadStore,
    layout: Layout,
    micro_batch: MicroBatch,
    cp_rank: int,
    metas: Mapping[str, SeqMeta],
    fields: Sequence[str],
) -> PackedWindow:
    """CP rank ``cp_rank``'s window of ``micro_batch`` in private memory."""
    cut = WindowCut.of(store, layout, micro_batch, cp_rank, metas, fields)
    out = {name: np.empty(shape, dtype) for name, (shape, dtype) in cut.array_specs().items()}
    return cut.fill(store, out)


def _fields(
    store: PayloadStore, micro_batch: MicroBatch, metas: Mapping[str, SeqMeta], fields: Sequence[str]
) -> dict[str, tuple[tuple[int, ...], str]]:
    """Field -> (row shape, dtype) of ``fields`` and the ``extra/...`` fields, read from the first
    sequence's schema: every sequence of a micro-batch must carry the same per-token fields."""
    unknown = [f for f in fields if f not in FIELDS or FIELDS[f].rows != "token"]
    if unknown or TOKEN_IDS not in fields:
        per_token = [f for f, spec in FIELDS.items() if spec.rows == "token"]
        raise ValueError(f"fields to pack {list(fields)}; expected {TOKEN_IDS!r} and others of {per_token}")
    if not micro_batch.keys:
        return {field: ((), FIELDS[field].dtype) for field in fields}
    first = micro_batch.keys[0]
    extras = set(metas[first].extra_fields)
    for key in micro_batch.keys[1:]:
        if set(metas[key].extra_fields) != extras:
            raise ValueError(
                f"SeqMeta.extra_fields of {key!r} is {sorted(metas[key].extra_fields)} but {first!r} of the same"
                f" micro-batch has {sorted(extras)}; sequences packed together must carry the same extra fields"
            )
    schema = store.schema(first)
    names = [*fields, *sorted(extras)]
    missing = [field for field in names if field not in schema]
    if missing:
        raise ValueError(f"store key {first!r} has no field(s) {missing} to pack; it has {sorted(schema)}")
    undeclared = sorted(f for f in schema if f.startswith(EXTRA_PREFIX) and f not in extras)
    if undeclared:
        raise ValueError(f"store key {first!r} has {undeclared}, which its SeqMeta.extra_fields does not list")
    return {field: (schema[field].shape[1:], schema[field].dtype) for field in names}


def _placements(r: RowRange, meta: SeqMeta) -> list[ImagePlacement]:
    """Image token runs of ``meta`` that fall in row range ``r``, placed in the window."""
    out = []
    for occurrence, (offset, index) in sorted(enumerate(meta.image_offsets), key=lambda item: item[1][0]):
        image = meta.images[index]
        if image.num_tokens is None:
            raise ValueError(
                f"image {index} of {meta.key!r} has no token count; apply the encoder's patch rule before packing"
            )
        if offset + image.num_tokens > meta.num_tokens:
            raise ValueError(
                f"image {index} of {meta.key!r} at token {offset} runs {image.num_tokens} tokens, past the"
                f" sequence's {meta.num_tokens}"
            )
        lo, hi = max(offset, r.start), min(offset + image.num_tokens, r.stop)
        if hi > lo:
            window_start = r.window_start + lo - r.start
            out.append(ImagePlacement(meta.key, occurrence, image.store_key, window_start, lo - offset, hi - lo))
    return out
