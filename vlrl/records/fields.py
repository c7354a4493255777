"""The one table of payload fields: every heavy per-sequence array the store holds.

Each row says what the array is (name, dtype, what its rows are), who writes it and which loss
terms need it packed. Modules that name a payload field take the name from here, and
the packer packs exactly the fields the trainer's loss terms need (``fields_for``), so nothing
writes an array only to satisfy a reader that ignores it, and no field changes name in transit:
the window array of a field has the field's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LossTerm = Literal["policy_gradient", "likelihood", "distillation"]
"""A term of the trainer's loss, by what it reads: the clipped policy gradient (``ppo``, ``grpo``),
the supervised likelihood of the warm start (``sft``), the distillation term (``opd_coef > 0``)."""

Rows = Literal["token", "image_row"]
"""What axis 0 of a field counts: the sequence's tokens, or an image's pixel rows."""


@dataclass(frozen=True, slots=True)
class PayloadField:
    """One payload field: small metadata about an array, never the array."""

    name: str
    """Store field name; also the name of its packed window array."""
    dtype: str
    """numpy dtype name of the stored array."""
    rows: Rows
    """What axis 0 counts."""
    writer: str
    """The component that writes it (once per key)."""
    needed_by: frozenset[LossTerm]
    """Loss terms that need it in the packed window (empty: never packed)."""
    pad: int | float | bool
    """Value of a window's padding positions."""
    doc: str
    """What the values are."""


TOKEN_IDS = "token_ids"
LOGPROBS = "logprobs"
LOSS_MASK = "loss_mask"
ADVANTAGES = "advantages"
TEACHER_LOGPROBS = "teacher_logprobs"
PIXELS = "pixels"

_ALL_TERMS: frozenset[LossTerm] = frozenset({"policy_gradient", "likelihood", "distillation"})

FIELDS: dict[str, PayloadField] = {
    f.name: f
    for f in (
        PayloadField(
            TOKEN_IDS, "int32", "token", "rollout.trajectory (demos too)",
            _ALL_TERMS, 0,
            "Every token of the sequence, prompt and generated, as the policy saw them.",
        ),
        PayloadField(
            LOGPROBS, "float32", "token", "rollout.trajectory",
            frozenset({"policy_gradient"}), 0.0,
            "The sampling distribution's logprob of each generated token (its temperature and top-p"
            " nucleus applied); 0 on prompt tokens.",
        ),
        PayloadField(
            LOSS_MASK, "bool", "token", "rollout.trajectory",
            _ALL_TERMS, False,
            "True on the tokens the policy generated (the only ones that carry loss).",
        ),
        PayloadField(
            ADVANTAGES, "float32", "token", "control.group_hook",
            frozenset({"policy_gradient"}), 0.0,
            "Per-token advantage of an accepted sequence (its group-relative scalar on each"
            " generated token, or teacher minus student logprobs under OPD).",
        ),
        PayloadField(
            TEACHER_LOGPROBS, "float32", "token", "control.teacher",
            frozenset({"distillation"}), 0.0,
            "The teacher's logprob of each generated token (0 elsewhere), under on-policy distillation.",
        ),
        PayloadField(
            PIXELS, "uint8", "image_row", "mm.store_images",
            frozenset(), 0,
            "Canonical RGB [H, W, 3] pixels of one image, stored once per content hash.",
        ),
    )
}
"""Every payload field by name."""

EXTRA_PREFIX = "extra/"
"""Prefix of optional per-token fields an engine reported (MoE routing, the sampling temperature
and nucleus below); packed whenever a sequence's ``SeqMeta.extra_fields`` lists them."""

SAMPLING_TEMPERATURE = f"{EXTRA_PREFIX}temperature"
"""float32 per token: the temperature its request sampled at (0 on prompt tokens). The embedded
engine reports it only for temperatures other than 0 and 1, so a run at temperature 1 stores nothing."""

SAMPLING_NUCLEUS = f"{EXTRA_PREFIX}nucleus"
"""int32 per token: how many of the most likely tokens the top-p nucleus it was drawn from kept
(0: the whole vocabulary; 0 on prompt tokens). Reported only for requests with top_p < 1; a count,
not the kept ids, so it costs 4 bytes a token whatever the nucleus holds."""

ROUTED_EXPERTS = f"{EXTRA_PREFIX}routed_experts"
"""``(tokens, moe_layers, top_k)`` per token: the experts each mixture-of-experts layer of the
rollout's forward sent the token to, as expert id + 1, so that 0 (an all-zero row, the window's
padding too) means no record: the trajectory's last token, which no forward fed back, and tokens
the engine served from a prefix cached for an earlier context. ``uint8`` up to 255 experts, else
``int16`` (``models.routing``). The embedded engine reports it with ``record_routing``, prompt
tokens included; the trainer replays it under ``loss.routing_replay='rollout'``."""

ROLLOUT_FIELDS = (TOKEN_IDS, LOGPROBS, LOSS_MASK)
"""The fields every sequence has from the moment it is written."""


def fields_for(terms: frozenset[LossTerm] | set[LossTerm]) -> tuple[str, ...]:
    """Per-token fields the packer must pack for a loss made of ``terms``, in table order."""
    unknown = set(terms) - _ALL_TERMS
    if unknown:
        raise ValueError(f"loss terms {sorted(unknown)}; expected some of {sorted(_ALL_TERMS)}")
    return tuple(f.name for f in FIELDS.values() if f.rows == "token" and f.needed_by & set(terms))


def pad_value(name: str) -> int | float | bool:
    """The window padding of field ``name`` (0 for ``extra/...`` fields)."""
    return FIELDS[name].pad if name in FIELDS else 0
