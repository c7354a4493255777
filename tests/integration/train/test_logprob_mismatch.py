"""The mismatch guard on the real trainer (one gloo rank, float64): rollout logprobs recorded with
another image than the one the store holds drift on that turn, the step's metrics show it, and a
warning names the sequence, the turn and the images; aligned sequences stay at float noise."""

from __future__ import annotations

import logging
import pickle
from dataclasses import replace
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoProcessor

from tests.helpers.trainer_workload import make_workload, reference_token_logprobs
from tests.integration.train.test_trainer_parallel import LOSS, trainer_config
from vlrl.models import family_of
from vlrl.pack import Layout


def _rank_main(rank: int, model_path: str, work_file: str, rdzv: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=0, world_size=1, timeout=timedelta(seconds=120))
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("vlrl.train.mismatch").addHandler(handler)
    with open(work_file, "rb") as f:
        work = pickle.load(f)
    try:
        config = trainer_config(replace(LOSS, mismatch_warn=0.01))
        trainer = config.build(model_path=model_path, store=work.store(), layout=Layout(1))
        metrics = trainer.forward_backward(work.metas)
        trainer.close()
    finally:
        dist.destroy_process_group()
    with open(out_file, "wb") as f:
        pickle.dump((metrics, warnings), f)


def test_a_misaligned_image_is_named_and_shows_in_the_step_s_metrics(tiny_path, tmp_path):
    work = make_workload(tiny_path, groups=1, members=2)
    processor = AutoProcessor.from_pretrained(tiny_path)
    model = family_of(tiny_path).load(tiny_path, dtype=torch.float64)
    for meta in work.metas:  # rollout logprobs exactly the model's (make_workload adds noise)
        row = work.rows[meta.key]
        shots = [work.images[image.store_key] for image in meta.images]
        if meta.sample_index == 1:  # the engine saw another second screenshot than the store holds
            shots[1] = np.random.default_rng(9).integers(0, 256, shots[1].shape, dtype=np.uint8)
        exact = reference_token_logprobs(model, processor, row["token_ids"], shots)
        row["logprobs"] = np.where(row["loss_mask"], exact, 0).astype(np.float32)
    work_file = tmp_path / "work.pkl"
    work_file.write_bytes(pickle.dumps(work))
    out = tmp_path / "out.pkl"
    mp.spawn(_rank_main, args=(str(tiny_path), str(work_file), str(tmp_path / "rdzv"), str(out)), nprocs=1)
    metrics, warnings = pickle.loads(out.read_bytes())

    misaligned = next(m for m in work.metas if m.sample_index == 1)
    (warning,) = warnings
    assert f"sequence {misaligned.key}, turn 0," in warning
    assert all(image.content_hash[:12] in warning for image in misaligned.images)
    assert metrics["logprob_mismatch_image_turn_max"] > 0.01
    assert metrics["logprob_mismatch_max"] >= metrics["logprob_mismatch_turn_max"] > 0.01
    assert 0 < metrics["logprob_mismatch"] < metrics["logprob_mismatch_turn_max"]  # the aligned sequence adds ~0
