"""Packed training of a hybrid linear-attention family (Qwen3.5): the trainer's ``PolicyModel`` on a
packed row of three multi-turn sequences with screenshots gives each sequence the logits a plain
transformers forward of it alone gives (float32, atol 1e-5): the DeltaNet layers' causal conv and
recurrent state restart at every segment border. Under CP a window runs each of its segments from
the segment's first token on whichever rank it lives (``Pieces``; the trainer's parallel == serial
runs are in ``test_trainer_hybrid``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoProcessor

from tests.helpers.chat import screen, user_turn
from tests.helpers.records import seq_meta
from vlrl.mm import describe_image, patch_rule_of
from vlrl.models import build_tiny, family
from vlrl.train.linear_attention import linear_attention_layers
from vlrl.train.mrope import sequence_mrope
from vlrl.pack import Layout
from vlrl.train.packed_attention import PackedMask, Pieces
from vlrl.train.policy_model import PolicyModel


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny("qwen3_5", tmp_path_factory.mktemp("qwen3_5"))
    return path, AutoProcessor.from_pretrained(path)


def conversation(processor, turns: list[tuple[str, np.ndarray, str]]) -> np.ndarray:
    """Token ids of user turns (text + one screenshot) each answered by the assistant."""
    ids = []
    for k, (text, shot, answer) in enumerate(turns):
        ids.append(user_turn(processor, text, [shot], first=k == 0))
        ids.append(np.asarray(processor.tokenizer(answer + "<|im_end|>")["input_ids"], dtype=np.int32))
    return np.concatenate(ids).astype(np.int64)


def alone(model, processor, ids: np.ndarray, shots) -> torch.Tensor:
    tokens = torch.as_tensor(ids)[None]
    vision = processor.image_processor(images=shots, return_tensors="pt")
    with torch.no_grad():
        return model(
            input_ids=tokens, pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"],
            mm_token_type_ids=(tokens == model.config.image_token_id).int(),
        ).logits[0]  # fmt: skip


def test_a_packed_row_of_three_conversations_equals_each_alone(tiny):
    path, processor = tiny
    policy = PolicyModel.load(path).eval()
    assert len(linear_attention_layers(policy.lm)) == 1
    image_id = int(policy.model.config.image_token_id)
    rule = patch_rule_of(processor)
    shots = [[screen(160, 96, 1), screen(96, 130, 2)], [screen(200, 150, 3)], [screen(120, 90, 4), screen(160, 96, 5)]]
    texts = ["open the File menu", "click Save", "type hello"]
    sequences = [
        conversation(processor, [(texts[(i + k) % 3], shot, f'{{"action": "click", "coordinate": [{10 * k}, 45]}}') for k, shot in enumerate(row)])
        for i, row in enumerate(shots)
    ]
    mropes, segments = [], []
    for s, ids in enumerate(sequences):
        starts = [int(i) for i in np.flatnonzero((ids == image_id) & (np.roll(ids, 1) != image_id))]
        meta = seq_meta(
            f"s{s}", len(ids), images=tuple(describe_image(p, rule=rule) for p in shots[s]),
            image_offsets=tuple((start, k) for k, start in enumerate(starts)),
        )  # fmt: skip
        mropes.append(sequence_mrope(meta, policy.merge_size))
        segments.append(np.full(len(ids), s))
    packed = np.concatenate(sequences)
    mask = PackedMask.build(np.arange(len(packed)), np.concatenate(segments), None)
    encoder = policy.encoder
    with torch.no_grad():
        rows = encoder(encoder.collate([encoder.preprocess(p) for row in shots for p in row]))
        logits = policy(
            torch.as_tensor(packed), torch.as_tensor(np.concatenate(mropes, axis=1)), mask, rows,
            torch.as_tensor(np.flatnonzero(packed == image_id)),
        )  # fmt: skip
    model = family("qwen3_5").load(path).eval()
    start = 0
    for ids, row in zip(sequences, shots):
        expected = alone(model, processor, ids, row)
        torch.testing.assert_close(logits[start : start + len(ids)], expected, rtol=0, atol=1e-5)
        start += len(ids)
    # The same row with the DeltaNet layers run over the whole window at once (state carried from
    # one sequence into the next): the later sequences read otherwise, by far more than the tolerance.
    (block,) = linear_attention_layers(policy.lm)
    block.forward = lambda hidden_states, attention_mask=None, **kwargs: type(block).forward(block, hidden_states, **kwargs)
    with torch.no_grad():
        carried = policy(
            torch.as_tensor(packed), torch.as_tensor(np.concatenate(mropes, axis=1)), mask, rows,
            torch.as_tensor(np.flatnonzero(packed == image_id)),
        )  # fmt: skip
    first = len(sequences[0])
    torch.testing.assert_close(carried[:first], logits[:first], rtol=0, atol=1e-5)
    assert (carried[first:] - logits[first:]).abs().max() > 1e-3


def test_under_cp_a_window_runs_each_segment_from_its_first_token_wherever_it_lives():
    """CP=2 over a packed micro-batch of a 10-token and a 5-token sequence (padded to 16, chunks
    of 4): rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2. Each rank runs each of its segments
    from the segment's first token (on any rank) to its own last token of it, and keeps its own."""
    layout = Layout(cp=2)
    segment = np.array([0] * 10 + [1] * 5 + [-1])
    position = np.concatenate([np.arange(10), np.arange(5), [0]])
    windows = [np.concatenate([np.arange(a, b) for a, b in layout.cp_window(15, r)]) for r in range(2)]
    key_pos, key_seg = np.concatenate([position[w] for w in windows]), np.concatenate([segment[w] for w in windows])
    gathered = np.concatenate(windows)  # the packed token of each gathered key
    runs = {}
    for rank, window in enumerate(windows):
        pieces = Pieces.build(key_pos, key_seg, rank * 8, rank * 8 + 8, "cpu")
        runs[rank] = [(gathered[i.numpy()].tolist(), k.tolist()) for i, k in zip(pieces.index, pieces.keep, strict=True)]
        kept = np.concatenate([gathered[i.numpy()][k.numpy()] for i, k in zip(pieces.index, pieces.keep, strict=True)])
        assert kept[pieces.order.numpy()].tolist() == window.tolist()  # the kept outputs, in window order
    # rank 0: sequence 0's first chunk; sequence 1 from its first two tokens on rank 1; its padding
    assert runs[0] == [([0, 1, 2, 3], [0, 1, 2, 3]), ([10, 11, 12, 13, 14], [2, 3, 4]), ([15], [0])]
    # rank 1: sequence 0 from its start on rank 0; sequence 1's first two tokens
    assert runs[1] == [(list(range(10)), [4, 5, 6, 7, 8, 9]), ([10, 11], [0, 1])]
