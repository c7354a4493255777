"""Micro-batch planning from metadata alone, and the rank layout the packer cuts windows by.

``MicroBatchPlanner`` turns a step's ``SeqMeta`` into a ``Plan``: per DP rank, the same number
of micro-batches under a token budget, with rank costs balanced at least as well as
Karmarkar-Karp. ``Layout`` answers every rank question (coordinates, groups, each CP rank's
window and each TP rank's shard of a packed micro-batch, the owners of a token), and
``Plan.cp_ranges`` says which row ranges make up a CP rank's window. Planning touches no tensor.

At pack time one ``TPGroupPacker`` per TP group cuts its CP window (``PackedWindow``) from the
store's rows, reading only the chunks the window overlaps, and ``packer_for_rank`` shares it with
the group's ranks as one read-only copy in node shared memory.
"""

from vlrl.pack.cost import CostModel
from vlrl.pack.kk import karmarkar_karp
from vlrl.pack.layout import Coords, Layout
from vlrl.pack.packed import PAD_SEGMENT_ID, PAD_TOKEN_ID, ImagePlacement, PackedWindow
from vlrl.pack.packer import PackError, RankPacker, SharedWindow, TPGroupPacker, new_tp_group, packer_for_rank
from vlrl.pack.plan import MicroBatch, Plan, RowRange, imbalance
from vlrl.pack.planner import MicroBatchPlanner, PlanItem
from vlrl.pack.window import WindowCut, cut_window

__all__ = [
    "PAD_SEGMENT_ID",
    "PAD_TOKEN_ID",
    "Coords",
    "CostModel",
    "ImagePlacement",
    "Layout",
    "MicroBatch",
    "MicroBatchPlanner",
    "PackError",
    "PackedWindow",
    "Plan",
    "PlanItem",
    "RankPacker",
    "RowRange",
    "SharedWindow",
    "TPGroupPacker",
    "WindowCut",
    "cut_window",
    "imbalance",
    "karmarkar_karp",
    "new_tp_group",
    "packer_for_rank",
]
