"""Next-token sampling for a batch of rows, each with its own parameters and random stream.

The returned logprob of a sampled token is under the policy's *raw* distribution,
``log_softmax(logits)`` at temperature 1 before top-p: that is the behaviour policy's
``log pi(a|s)`` that RL importance ratios and KL terms compare against the trainer's recomputed
logprobs. Temperature and top-p only shape which token is drawn.

A draw that raises fails every request of its batch, so ``check_sampling`` refuses, before a
request is queued, the values that would make it raise.
"""

from __future__ import annotations

import torch

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


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    banned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of ``logits`` (B, V); return ids (B,) and their raw logprobs (B,).

    ``banned`` ids (the vision placeholders) are never drawn: a generated ``<|image_pad|>`` would
    read as an image slot in the next turn's prompt. Their logprobs stay in the raw distribution.
    """
    logits = logits.float()
    raw_logprobs = torch.log_softmax(logits, dim=-1)  # (B, V), temperature 1, before top-p
    if banned is not None:
        logits = logits.index_fill(1, banned, float("-inf"))
    ids = torch.empty(len(params), dtype=torch.long, device=logits.device)
    for row, (p, generator) in enumerate(zip(params, generators)):
        if p.temperature == 0:
            ids[row] = torch.argmax(logits[row])
            continue
        probs = torch.softmax(logits[row] / p.temperature, dim=-1)
        if p.top_p < 1:
            probs = _top_p(probs, p.top_p)
        ids[row] = torch.multinomial(probs, 1, generator=generator)[0]
    return ids, raw_logprobs.gather(1, ids[:, None])[:, 0]


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p`` (the top one always)."""
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    drop = mass_before >= top_p
    drop[..., 0] = False  # a top_p below float32's smallest positive value would drop it too
    sorted_probs[drop] = 0
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
