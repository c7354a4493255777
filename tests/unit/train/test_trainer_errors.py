"""Bad layouts and inconsistent micro-batches stop the trainer with errors naming the cause."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from vlrl.bench.trainer_workload import make_workload
from vlrl.pack import Layout, MicroBatchPlanner, cut_window
from vlrl.records import fields_for
from vlrl.train.mrope import sequence_mrope
from vlrl.train.policy_model import PolicyModel
from vlrl.train.targets import micro_batch_inputs


def test_a_layout_must_match_the_world():
    with pytest.raises(ValueError, match=r"world size 3 does not match the layout dp=2 x cp=1 x tp=2 = 4"):
        Layout(2, 1, 2).check_world(3)


def test_tp_must_divide_the_heads(tiny_path):
    model = PolicyModel.load(tiny_path)
    with pytest.raises(ValueError, match="tp=3 does not divide the model's 4 attention heads"):
        model.parallelize(SimpleNamespace(layout=Layout(1, 1, 3)))
    with pytest.raises(ValueError, match="sequence_parallel=True"):
        model.parallelize(SimpleNamespace(layout=Layout(1, 1, 2, sequence_parallel=False)))


def test_image_placements_must_sit_on_image_tokens(tiny_path):
    work = make_workload(tiny_path, groups=1, members=1)
    meta = work.metas[0]
    work.rows[meta.key]["token_ids"][meta.image_offsets[0][0] + 1] = 42  # one image token overwritten
    store = work.store()
    layout = Layout(1)
    plan = MicroBatchPlanner.Config().build().plan(work.metas, 1)
    mb = plan.ranks[0][0]
    window = cut_window(store, layout, mb, 0, {meta.key: meta}, fields_for({"policy_gradient"}))
    model = PolicyModel.load(tiny_path)
    with pytest.raises(ValueError, match="image placements cover tokens that are not the image token"):
        micro_batch_inputs(
            window, mb, layout, 0, 0, {meta.key: sequence_mrope(meta, model.merge_size)},
            image_token_id=model.image_token_id,
        )  # fmt: skip
    assert np.isfinite(window.logprobs).all()
