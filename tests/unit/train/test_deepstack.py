"""DeepStack (Qwen3-VL) through vlrl's own forwards: the trainer's ``PolicyModel`` and the engine's
``ModelRunner`` give what a plain ``Qwen3VLForConditionalGeneration`` forward gives, gradients
included, and a prefill continued from a cached prefix agrees with one from scratch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

from encoders import registry
from encoders.qwen3vl import Qwen3VLEncoder
from tests.helpers.records import seq_meta
from tests.helpers.chat import GREEDY, part, screen, user_turn
from vlrl.mm import content_hash, describe_image, patch_rule_of
from vlrl.models import build_tiny
from vlrl.rollout.engine.images import preprocess, preprocess_plug_in
from vlrl.rollout.engine.prefix import ImageSpan
from vlrl.rollout.engine.runner import ModelRunner, Sequence
from vlrl.train.mrope import sequence_mrope
from vlrl.train.packed_attention import PackedMask
from vlrl.train.policy_model import PolicyModel

H = 64
"""The tiny model's hidden size: the width of each feature level."""


@pytest.fixture(scope="module")
def qwen3_path(tmp_path_factory):
    return build_tiny("qwen3_vl", tmp_path_factory.mktemp("tiny-qwen3vl"))


@pytest.fixture(scope="module")
def processor(qwen3_path):
    return AutoProcessor.from_pretrained(qwen3_path)


@pytest.fixture(scope="module")
def shots():
    return [screen(160, 96, 1), screen(96, 130, 2)]


def reference_logits(path, processor, ids: np.ndarray, shots, dtype=torch.float64, *, grad: bool = False):
    """The plain Hugging Face forward of one sequence: ``(model, (T, V) logits)``."""
    model = Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=dtype).eval()
    tokens = torch.as_tensor(ids, dtype=torch.long)[None]
    vision = processor.image_processor(images=shots, return_tensors="pt")
    with torch.set_grad_enabled(grad):
        logits = model(
            input_ids=tokens,
            pixel_values=vision["pixel_values"].to(dtype),
            image_grid_thw=vision["image_grid_thw"],
            mm_token_type_ids=(tokens == model.config.image_token_id).int(),
        ).logits[0]
    return model, logits


def two_image_turn(processor, shots) -> np.ndarray:
    return user_turn(processor, "click the OK button then Save", shots).astype(np.int64)


# ---- trainer


def test_policy_model_matches_plain_forward_and_gradients(qwen3_path, processor, shots):
    policy = PolicyModel.load(qwen3_path, dtype=torch.float64)
    assert policy.encoder.feature_levels == 2
    ids = two_image_turn(processor, shots)
    rule = patch_rule_of(processor)
    image_id = int(policy.model.config.image_token_id)
    starts = [int(i) for i in np.flatnonzero((ids == image_id) & (np.roll(ids, 1) != image_id))]
    meta = seq_meta(
        "s", len(ids), images=tuple(describe_image(p, rule=rule) for p in shots),
        image_offsets=tuple((start, k) for k, start in enumerate(starts)),
    )  # fmt: skip
    encoder = policy.encoder
    rows = encoder(encoder.collate([encoder.preprocess(p) for p in shots]))  # (R, 2H), in the tower's graph
    leaf = rows.detach().requires_grad_()
    token_ids = torch.as_tensor(ids)
    mrope = torch.as_tensor(sequence_mrope(meta, policy.merge_size))  # the trainer's positions, from metadata
    mask = PackedMask.build(np.arange(len(ids)), np.zeros(len(ids), np.int64), None)
    image_index = torch.as_tensor(np.flatnonzero(ids == image_id))
    logits = policy(token_ids, mrope, mask, leaf, image_index)  # (T, V)

    reference, expected = reference_logits(qwen3_path, processor, ids, shots, grad=True)
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-9)
    with torch.no_grad():  # without its DeepStack level the sequence reads differently: the check has teeth
        flat = policy(token_ids, mrope, mask, torch.cat([rows[:, :H], torch.zeros_like(rows[:, H:])], 1), image_index)
    assert (flat - expected).abs().max() > 1e-4

    readout = torch.randn(logits.shape, generator=torch.Generator().manual_seed(0), dtype=logits.dtype)
    (logits * readout).sum().backward()
    assert leaf.grad[:, H:].abs().sum() > 0  # gradient reaches the DeepStack columns
    rows.backward(leaf.grad)  # as EncodedStep.backward: through the tower once
    (expected * readout).sum().backward()
    ours = dict(policy.model.named_parameters())
    for name, param in reference.named_parameters():
        torch.testing.assert_close(ours[name].grad, param.grad, rtol=1e-7, atol=1e-10, msg=name)
    assert ours["model.visual.deepstack_merger_list.0.linear_fc2.weight"].grad.abs().sum() > 0


def test_policy_model_refuses_more_levels_than_decoder_layers(qwen3_path):
    model = Qwen3VLForConditionalGeneration.from_pretrained(qwen3_path)
    fields = {**Qwen3VLEncoder.check_fields, "depth": 3, "deepstack_visual_indexes": (0, 1, 2)}
    encoder = registry.make("qwen3vl", **fields)
    with pytest.raises(ValueError, match="'qwen3vl' has feature_levels=4; expected 1 to 3"):
        PolicyModel(model, encoder)


# ---- engine


def spans_of(prompt: np.ndarray, image_id: int, shots) -> tuple[ImageSpan, ...]:
    pads = np.flatnonzero(prompt == image_id)
    runs = np.split(pads, np.flatnonzero(np.diff(pads) > 1) + 1)
    return tuple(ImageSpan(int(r[0]), int(r[-1]) + 1, content_hash(p)) for r, p in zip(runs, shots, strict=True))


@pytest.fixture(scope="module")
def runner(qwen3_path):
    return ModelRunner.load(str(qwen3_path), dtype=torch.float32, device="cpu", stop_token_ids=frozenset())


@pytest.mark.parametrize("tower", ["own", "plug-in"])
def test_score_matches_plain_forward(qwen3_path, processor, shots, runner, tower):
    ids = two_image_turn(processor, shots)
    if tower == "own":
        images = tuple(preprocess(processor.image_processor, part(p)) for p in shots)
        scorer = runner
    else:
        encoder = Qwen3VLEncoder.from_model(runner.model.model.visual, patch_rule_of(processor))
        scorer = ModelRunner(runner.model, frozenset(), encoder)
        images = tuple(preprocess_plug_in(encoder, patch_rule_of(processor), part(p)) for p in shots)
    scores = scorer.score(ids, images)
    _, logits = reference_logits(qwen3_path, processor, ids, shots, dtype=torch.float32)
    expected = torch.log_softmax(logits[:-1].float(), -1).gather(1, torch.as_tensor(ids[1:])[:, None])[:, 0]
    assert scores[0] == 0.0
    np.testing.assert_allclose(scores[1:], expected.numpy(), rtol=0, atol=2e-4)


def test_prefill_from_a_cached_prefix_matches_from_scratch(qwen3_path, processor, shots, runner):
    image_id = int(runner.model.config.image_token_id)
    prompt1 = user_turn(processor, "open the File menu", shots[:1]).astype(np.int64)
    images1 = (preprocess(processor.image_processor, part(shots[0])),)
    turn1 = Sequence(prompt1, images1, spans_of(prompt1, image_id, shots[:1]), GREEDY, None, keep_prefix=True)
    (first,) = runner.run([turn1])
    follow = user_turn(processor, "now click Save", shots[1:], first=False).astype(np.int64)
    prompt2 = np.concatenate([prompt1, first.token_ids.astype(np.int64), follow])
    images2 = (*images1, preprocess(processor.image_processor, part(shots[1])))
    spans2 = spans_of(prompt2, image_id, shots)

    def turn2(prefix):
        return Sequence(prompt2, images2, spans2, GREEDY, prefix, keep_prefix=False)

    # One batch: the continued row (first image cached, second new) beside a from-scratch row.
    continued, scratch = runner.run([turn2(first.prefix), turn2(None)])
    assert continued.reused_prefix_tokens == len(prompt1) + len(first.token_ids) - 1 > spans2[0].stop
    assert scratch.reused_prefix_tokens == 0
    np.testing.assert_array_equal(continued.token_ids, scratch.token_ids)
    np.testing.assert_allclose(continued.logprobs, scratch.logprobs, rtol=0, atol=1e-4)

    generated = scratch.token_ids.astype(np.int64)
    _, logits = reference_logits(qwen3_path, processor, np.concatenate([prompt2, generated]), shots, dtype=torch.float32)
    steps = torch.log_softmax(logits[len(prompt2) - 1 : -1].float(), -1)  # (len(generated), V)
    expected = steps.gather(1, torch.as_tensor(generated)[:, None])[:, 0]
    np.testing.assert_allclose(scratch.logprobs, expected.numpy(), rtol=0, atol=2e-4)
