"""The mismatch guard on the real trainer (one gloo rank, float64): rollout logprobs recorded with
another image than the one the store holds drift on that turn, the step's metrics show it, and a
warning names the sequence, the turn and the images; aligned sequences stay at float noise.

Issue 56's case: 4 of 16 records' engine logprobs were taken with another episode's screenshot. At
lag 0 (the trainer holds the weights that sampled them) the guard judges each turn on the engine's
noise (``train.mismatch.lag0_threshold``), so it warns once for each of the 4 and names every image
of the turn; the same records aligned warn 0 times. Under the one bound of before (1.0 at any lag)
the 4 records' turns, 0.1-1.4 nats off, mostly passed unseen."""

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

from vlrl.bench.trainer_workload import make_workload, reference_token_logprobs
from tests.integration.train.test_trainer_parallel import LOSS, trainer_config
from vlrl.models import family_of
from vlrl.pack import Layout

MISALIGNED = 4
"""Records of the 16 whose rollout saw another episode's second screenshot."""


def _rank_main(rank: int, model_path: str, runs: list[tuple[str, int, float]], rdzv: str, out_file: str) -> None:
    """For each ``(work file, lag, mismatch_warn)``: one step's forward and backward with the trainer
    holding the version ``lag`` after the records'; its metrics and the guard's warnings."""
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=0, world_size=1, timeout=timedelta(seconds=120))
    results = []
    try:
        for work_file, lag, lagged_warn in runs:
            warnings: list[str] = []
            handler = logging.Handler()
            handler.emit = lambda record, warnings=warnings: warnings.append(record.getMessage())  # type: ignore[method-assign]
            logging.getLogger("vlrl.train.mismatch").addHandler(handler)
            with open(work_file, "rb") as f:
                work = pickle.load(f)
            config = trainer_config(replace(LOSS, mismatch_warn=lagged_warn))
            trainer = config.build(model_path=model_path, store=work.store(), layout=Layout(1))
            metrics = trainer.forward_backward(work.metas, None, work.metas[0].policy_version + lag)
            trainer.close()
            logging.getLogger("vlrl.train.mismatch").removeHandler(handler)
            results.append((metrics, warnings))
    finally:
        dist.destroy_process_group()
    with open(out_file, "wb") as f:
        pickle.dump(results, f)


def _exact(work, model, processor, misaligned: set[str]):
    """``work`` with rollout logprobs exactly the model's (make_workload adds noise), taken for the
    keys in ``misaligned`` with the second screenshot of a record of another group."""
    for meta in work.metas:
        row = work.rows[meta.key]
        shots = [work.images[image.store_key] for image in meta.images]
        if meta.key in misaligned:  # another group's record whose second screenshot has this one's size
            other = next(
                m for m in work.metas
                if m.group_id != meta.group_id and work.images[m.images[1].store_key].shape == shots[1].shape
            )  # fmt: skip
            shots[1] = work.images[other.images[1].store_key]
        exact = reference_token_logprobs(model, processor, row["token_ids"], shots)
        row["logprobs"] = np.where(row["loss_mask"], exact, 0).astype(np.float32)
    return work


def test_misaligned_images_warn_once_a_record_at_lag_0_and_aligned_ones_never(tiny_path, tmp_path):
    processor = AutoProcessor.from_pretrained(tiny_path)
    model = family_of(tiny_path).load(tiny_path, dtype=torch.float64)
    clean = _exact(make_workload(tiny_path, groups=4, members=4), model, processor, set())
    chosen = {m.key for m in clean.metas if m.sample_index == 1}  # one a group, 4 of 16
    assert len(clean.metas) == 16 and len(chosen) == MISALIGNED
    bad = _exact(make_workload(tiny_path, groups=4, members=4), model, processor, chosen)
    runs = []
    for name, work in (("clean", clean), ("bad", bad)):
        (tmp_path / f"{name}.pkl").write_bytes(pickle.dumps(work))
        runs.append((str(tmp_path / f"{name}.pkl"), 0, LOSS.mismatch_warn))  # lag 0, the default bounds
    out = tmp_path / "out.pkl"
    mp.spawn(_rank_main, args=(str(tiny_path), runs, str(tmp_path / "rdzv"), str(out)), nprocs=1)
    (clean_metrics, clean_warnings), (metrics, warnings) = pickle.loads(out.read_bytes())

    assert clean_warnings == [] and clean_metrics["mismatch_warned_sequences"] == 0
    assert clean_metrics["logprob_mismatch_lag0_turn_max"] < 1e-3
    assert clean_metrics["lag0_tokens"] == clean_metrics["tokens"] and clean_metrics["lagged_tokens"] == 0

    assert len(warnings) == MISALIGNED and metrics["mismatch_warned_sequences"] == MISALIGNED
    for meta in (m for m in bad.metas if m.key in chosen):
        (warning,) = [w for w in warnings if f"sequence {meta.key} " in w]
        assert "turn 0 (lag 0)" in warning
        assert all(image.content_hash[:12] in warning for image in meta.images)  # both images its turn showed
    assert metrics["logprob_mismatch_lag0_turn_max"] > 0.01
    assert 0 < metrics["logprob_mismatch"] < metrics["logprob_mismatch_turn_max"]  # the aligned records add ~0


def test_lagged_turns_are_judged_on_the_drift_bound_and_lag_0_on_the_engine_s_noise(tiny_path, tmp_path):
    """The same misaligned records with the trainer one version ahead of them: their gap could be
    the policy's own step, so ``mismatch_warn`` judges them (here set past any gap: no warning),
    where at lag 0 the engine's noise does (a warning for each)."""
    processor = AutoProcessor.from_pretrained(tiny_path)
    model = family_of(tiny_path).load(tiny_path, dtype=torch.float64)
    work = make_workload(tiny_path, groups=4, members=2)
    work = _exact(work, model, processor, {m.key for m in work.metas if m.sample_index == 1})
    (tmp_path / "w.pkl").write_bytes(pickle.dumps(work))
    runs = [(str(tmp_path / "w.pkl"), 1, 1e9), (str(tmp_path / "w.pkl"), 0, 1e9)]
    out = tmp_path / "out.pkl"
    mp.spawn(_rank_main, args=(str(tiny_path), runs, str(tmp_path / "rdzv"), str(out)), nprocs=1)
    (lagged, lagged_warnings), (same, same_warnings) = pickle.loads(out.read_bytes())
    assert lagged["lag0_tokens"] == 0 and lagged["lagged_tokens"] == lagged["tokens"]
    assert lagged["logprob_mismatch_lagged_turn_max"] > 0.01 and lagged_warnings == []
    assert same["lagged_tokens"] == 0 and len(same_warnings) == same["mismatch_warned_sequences"] == 4
