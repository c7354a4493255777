"""Micro-batch planning from metadata alone, and the rank layout the packer cuts windows by.

``MicroBatchPlanner`` turns a step's ``SeqMeta`` into a ``Plan``: per DP rank, the same number
of micro-batches under a token budget, with rank costs balanced at least as well as
Karmarkar-Karp. ``Layout`` answers every rank question (coordinates, groups, each CP rank's
window and each TP rank's shard of a packed micro-batch, the owners of a token), and
``Plan.cp_ranges`` says which row ranges make up a CP rank's window. No tensor is touched.
"""

from vlrl.pack.cost import CostModel
from vlrl.pack.kk import karmarkar_karp
from vlrl.pack.layout import Coords, Layout
from vlrl.pack.plan import MicroBatch, Plan, RowRange, imbalance
from vlrl.pack.planner import MicroBatchPlanner, PlanItem

__all__ = [
    "Coords",
    "CostModel",
    "Layout",
    "MicroBatch",
    "MicroBatchPlanner",
    "Plan",
    "PlanItem",
    "RowRange",
    "imbalance",
    "karmarkar_karp",
]
