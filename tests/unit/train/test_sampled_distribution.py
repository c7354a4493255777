"""End to end, engine to trainer: a two-turn trajectory sampled at temperature 0.7 and top-p 0.9
is stored, cut into a window and shifted into targets, and the trainer's logprob of every sampled
token, computed from a forward of the whole sequence, equals the engine's; the ratio's gradient
is that of the tempered nucleus, against a hand-written reference."""

from __future__ import annotations

import numpy as np
import torch
from transformers import Qwen2VLForConditionalGeneration

from tests.helpers.sampled_trajectory import stored_two_turns
from vlrl.pack import Layout, MicroBatchPlanner, cut_window
from vlrl.records import SAMPLING_NUCLEUS, SAMPLING_TEMPERATURE, fields_for
from vlrl.store import LocalStore
from vlrl.train.token_logprobs import token_logprobs_and_entropy
from vlrl.train.mrope import sequence_mrope
from vlrl.train.targets import micro_batch_inputs


def _nucleus_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, kept: torch.Tensor) -> torch.Tensor:
    """Reference: per row, log_softmax(z / T) over the ``k`` largest logits, renormalised."""
    out = []
    for z, y, k in zip(logits / temperature, targets, kept):
        inside = torch.zeros_like(z, dtype=torch.bool)
        inside[z.argsort(descending=True)[: int(k)]] = True
        assert inside[y], "the sampled token lies in the engine's nucleus"
        out.append(z[inside].log_softmax(-1)[inside[:y].sum()])
    return torch.stack(out)


def test_trainer_logprobs_and_ratio_gradient_are_those_of_the_sampling_distribution(tiny_path, processor):
    store, meta, shot = stored_two_turns(tiny_path, processor, LocalStore())
    assert sorted(meta.extra_fields) == [SAMPLING_NUCLEUS, SAMPLING_TEMPERATURE] and meta.turns == 2

    layout = Layout(1)
    (mb,) = MicroBatchPlanner.Config().build().plan([meta], 1).ranks[0]
    window = cut_window(store, layout, mb, 0, {meta.key: meta}, fields_for({"policy_gradient"}))
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_path).eval()
    inputs = micro_batch_inputs(
        window, mb, layout, 0, 0, {meta.key: sequence_mrope(meta, model.config.vision_config.spatial_merge_size)},
        image_token_id=model.config.image_token_id,
    )  # fmt: skip
    on = inputs.loss_mask
    assert on.sum() == meta.num_response_tokens
    np.testing.assert_array_equal(inputs.temperature[on], np.float32(0.7))
    assert (inputs.temperature[~on] == 1).all() and (inputs.nucleus[~on] == 0).all() and (inputs.nucleus[on] >= 1).all()

    ids = torch.from_numpy(np.asarray(window.token_ids[: meta.num_tokens], np.int64))[None]
    pixels = processor.image_processor(images=[shot], return_tensors="pt")
    logits = model(
        input_ids=ids, pixel_values=pixels["pixel_values"], image_grid_thw=pixels["image_grid_thw"],
        mm_token_type_ids=(ids == model.config.image_token_id).int(),
    ).logits[0].float()  # (T, V), the trainer's forward of the packed sequence  # fmt: skip
    logits = torch.cat([logits, logits.new_zeros(len(on) - len(logits), logits.shape[1])]).detach().requires_grad_()
    targets = torch.from_numpy(inputs.target_ids)
    logp, _ = token_logprobs_and_entropy(logits, targets, **inputs.sampled_distribution(logits.device))
    old = torch.from_numpy(inputs.logprobs.astype(np.float32))
    np.testing.assert_allclose(logp.detach()[on].numpy(), old[on].numpy(), rtol=0, atol=1e-5)
    raw = torch.log_softmax(logits.detach()[on], -1).gather(1, targets[on, None])[:, 0]
    assert (raw - old[on]).abs().max() > 1e-2  # temperature 1 over the whole vocabulary would not match

    mask = torch.from_numpy(on)
    ratio = torch.exp(logp[mask] - old[mask])
    (grad,) = torch.autograd.grad(ratio.sum(), logits)
    reference = _nucleus_logprobs(logits[mask], targets[mask], 0.7, torch.from_numpy(inputs.nucleus[on]))
    (expected,) = torch.autograd.grad(torch.exp(reference - old[mask]).sum(), logits)
    torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6)
