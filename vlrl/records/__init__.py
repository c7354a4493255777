"""The bottom layer: the records every plane shares, and the one table of payload fields.

It imports nothing else of vlrl, so any package may use it. ``SeqMeta`` and ``MMItemMeta`` are
what the control plane schedules on; ``GroupDecision``, ``AcceptedGroup`` and ``Batch`` are what
the driver decides and yields; ``fields.FIELDS`` names every heavy array the store holds.
"""

from vlrl.records.action_format import ActionFormat
from vlrl.records.fields import (
    ADVANTAGES,
    EXTRA_PREFIX,
    FIELDS,
    LOGPROBS,
    LOSS_MASK,
    PIXELS,
    ROLLOUT_FIELDS,
    ROUTED_EXPERTS,
    SAMPLING_NUCLEUS,
    SAMPLING_TEMPERATURE,
    TEACHER_LOGPROBS,
    TOKEN_IDS,
    LossTerm,
    PayloadField,
    fields_for,
    pad_value,
)
from vlrl.records.groups import AcceptedGroup, Batch, GroupDecision, GroupError, GroupStatus, group_id_of
from vlrl.records.image import HASH_HEX_CHARS, MMItemMeta, TokenRule, image_store_key
from vlrl.records.sequence import Finish, SeqMeta, TreeRollout

__all__ = [
    "ADVANTAGES",
    "EXTRA_PREFIX",
    "FIELDS",
    "HASH_HEX_CHARS",
    "LOGPROBS",
    "LOSS_MASK",
    "PIXELS",
    "ROLLOUT_FIELDS",
    "ROUTED_EXPERTS",
    "SAMPLING_NUCLEUS",
    "SAMPLING_TEMPERATURE",
    "TEACHER_LOGPROBS",
    "TOKEN_IDS",
    "AcceptedGroup",
    "ActionFormat",
    "Batch",
    "Finish",
    "GroupDecision",
    "GroupError",
    "GroupStatus",
    "LossTerm",
    "MMItemMeta",
    "PayloadField",
    "SeqMeta",
    "TokenRule",
    "TreeRollout",
    "fields_for",
    "group_id_of",
    "image_store_key",
    "pad_value",
]
