"""Next-token sampling for a batch of rows, each with its own parameters and random stream.

The returned logprob of a sampled token is under the distribution it was drawn from, the
behaviour policy's ``log pi(a|s)`` that RL importance ratios and the trainer's recomputed
logprobs compare against. With ``z`` the logits, ``T`` the temperature and ``N`` the nucleus::

    log pi(y) = z_y / T - logsumexp_{v in N} z_v / T

At temperature 1 without top-p, ``N`` is the whole vocabulary and this is ``log_softmax(z)``,
computed exactly as before temperature and top-p were modelled. Greedy rows (temperature 0)
report ``log_softmax(z)`` too: a point mass has no useful logprob.

**The nucleus as a count.** Top-p keeps the fewest most likely tokens whose mass reaches
``top_p``; the trainer cannot recompute that set from its own logits without the engine's exact
numbers (a token near the mass boundary flips in or out, and the logprob jumps). So each draw
reports ``k``, how many tokens the nucleus kept, and the nucleus is *defined* from ``k`` on any
copy of the logits::

    N = {v : z_v >= min(z_(k), z_y)}        z_(k): the k-th largest logit

Ties at ``z_(k)`` are all kept (``k`` counts them), and the sampled token ``y`` is always in
``N``: a trainer whose logits differ slightly keeps ``k`` tokens whose logits are within noise of
the engine's, never a set that misses the token it must score. ``k`` is 4 bytes a token; the
kept ids (the seed's "top-p sampling indices") would be ``4 k``.

The vision placeholders (``banned``) are never drawn but stay in the modelled distribution (its
normaliser and the nucleus), as at temperature 1: the trainer scores the model's whole
vocabulary, and a model that gives placeholders real mass in a reply is broken either way.

A draw that raises fails every request of its batch, so ``check_sampling`` refuses, before a
request is queued, the values that would make it raise.
"""

from __future__ import annotations

import numpy as np
import torch

from vlrl.records import EXTRA_PREFIX, SAMPLING_NUCLEUS, SAMPLING_TEMPERATURE
from vlrl.rollout.protocol import SamplingParams

MIN_TEMPERATURE = 1e-5
"""Smallest non-zero temperature: ``logits / temperature`` stays finite in float32 for any logit
below 3e33, where a denormal temperature overflows it to inf and the draw raises."""

SEED_LIMIT = 2**63
"""Seeds are ints in [0, SEED_LIMIT): what torch (up to 2**64) and numpy (no negatives) both take."""


def check_sampling(params: SamplingParams) -> None:
    """Refuse a temperature or seed that would make the draw raise inside a batch."""
    if 0 < params.temperature < MIN_TEMPERATURE:
        raise ValueError(
            f"sampling temperature={params.temperature}; expected 0 (greedy) or >= {MIN_TEMPERATURE:g}"
        )
    seed = params.seed
    if seed is not None and not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < SEED_LIMIT):
        raise ValueError(f"sampling seed={seed!r}; expected an int in [0, 2**63)")


def generator_for(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A per-request stream: seeded requests replay exactly whatever else shares their batch."""
    if params.temperature == 0:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


def sampled_fields(params: SamplingParams) -> tuple[str, ...]:
    """The payload fields (``records``' ``SAMPLING_*``) that describe a draw under ``params``
    beyond its logprobs: none at temperature 1 (or 0) without top-p."""
    fields = []
    if params.temperature not in (0, 1):
        fields.append(SAMPLING_TEMPERATURE)
    if params.temperature > 0 and params.top_p < 1:
        fields.append(SAMPLING_NUCLEUS)
    return tuple(fields)


def sampled_extras(params: SamplingParams, nucleus: list[int]) -> dict[str, np.ndarray]:
    """``GenerateResult.extras`` of a request's draws: ``nucleus`` holds each draw's kept count."""
    fields = sampled_fields(params)
    extras = {}
    if SAMPLING_TEMPERATURE in fields:
        extras[SAMPLING_TEMPERATURE] = np.full(len(nucleus), params.temperature, np.float32)
    if SAMPLING_NUCLEUS in fields:
        extras[SAMPLING_NUCLEUS] = np.asarray(nucleus, np.int32)
    return {name.removeprefix(EXTRA_PREFIX): values for name, values in extras.items()}


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    banned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Draw one token per row of ``logits`` (B, V); return ids (B,), their logprobs (B,) under
    the distribution drawn from, and each row's nucleus count (0: no top-p).

    ``banned`` ids (the vision placeholders) are never drawn: a generated ``<|image_pad|>`` would
    read as an image slot in the next turn's prompt.
    """
    logits = logits.float()
    raw_logprobs = torch.log_softmax(logits, dim=-1)  # (B, V), temperature 1, whole vocabulary
    drawable = logits if banned is None else logits.index_fill(1, banned, float("-inf"))
    ids = torch.empty(len(params), dtype=torch.long, device=logits.device)
    logprobs = raw_logprobs.new_empty(len(params))
    nucleus = [0] * len(params)
    for row, (p, generator) in enumerate(zip(params, generators)):
        if p.temperature == 0:
            ids[row] = torch.argmax(drawable[row])
            logprobs[row] = raw_logprobs[row, ids[row]]
            continue
        z = logits[row] / p.temperature  # (V,)
        allowed = torch.isfinite(drawable[row])  # (V,)
        if p.top_p < 1:
            nucleus[row] = nucleus_size(z, p.top_p)
            allowed &= z >= z.topk(nucleus[row]).values[-1]
            if not allowed.any():  # the nucleus held only placeholders: draw from the rest
                allowed = torch.isfinite(drawable[row])
        probs = torch.softmax(z.masked_fill(~allowed, float("-inf")), dim=-1)
        ids[row] = torch.multinomial(probs, 1, generator=generator)[0]
        if p.temperature == 1 and p.top_p == 1:
            logprobs[row] = raw_logprobs[row, ids[row]]
        else:
            logprobs[row] = nucleus_logprob(z, int(ids[row]), nucleus[row])
    return ids, logprobs, nucleus


def nucleus_size(z: torch.Tensor, top_p: float) -> int:
    """How many of the most likely tokens of ``softmax(z)`` (V,) top-p keeps: the fewest whose
    mass reaches ``top_p`` (at least one), then every token tied with the last kept."""
    sorted_z = torch.sort(z, descending=True).values
    sorted_probs = torch.softmax(sorted_z, dim=-1)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    kept = max(int((mass_before < top_p).sum()), 1)  # a top_p below float32's smallest positive value keeps one
    return int((z >= sorted_z[kept - 1]).sum())


def nucleus_logprob(z: torch.Tensor, token: int, kept: int) -> torch.Tensor:
    """``log pi(token)`` under ``softmax(z)`` (V,) restricted to the nucleus of ``kept`` tokens
    (0: the whole vocabulary), the module docstring's ``N``."""
    if kept:
        z = z.masked_fill(z < torch.minimum(z.topk(kept).values[-1], z[token]), float("-inf"))
    return z[token] - torch.logsumexp(z, dim=-1)
