"""``Trainer``: one rank's policy update, fed by the packer and the encoder path.

A step, on every rank alike (``step``)::

    plan micro-batches from metadata      (MicroBatchPlanner, same plan everywhere)
    encode the step's images once         (StepEncoder: plan, lazy fetch, encode)
    for each micro-batch:                 (pre-pass: windows -> inputs; global loss denominators)
        embeddings  <- all-to-all         (EncodedStep.embeddings)
        logits      <- PolicyModel        (TP + CP + FSDP)
        loss share  -> backward           (PolicyLoss over global counts)
    encoder backward once, encoder grads summed over the world
    clip by the global grad norm, optimizer step

Non-finite losses and gradient norms stop every rank together with the micro-batch named.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from encoders.protocol import VisionEncoder
from encoders.spec import ENCODER_DIR, STATE_PREFIX, EncoderSpec, ResolvedEncoder
from vlrl.atomic import fsync
from vlrl.config import ConfigError, Ge
from vlrl.models import family_of
from vlrl.pack import Layout, MicroBatchPlanner, PackedWindow, new_tp_group, packer_for_rank
from vlrl.pack.packed import PAD_SEGMENT_ID
from vlrl.pack.packer import PackError
from vlrl.records import FIELDS, SeqMeta, pad_value
from vlrl.store import StoreError
from vlrl.train.checkpoint_io import ADAPTER_DIR, TRAINER_FILE, load_sharded, load_trainer_file, save_hf_folder, save_trainer_file
from vlrl.train.encode_step import StepEncoder
from vlrl.train.lora import LoRA
from vlrl.train.loss import LossOutput, NonFiniteLossError, Normaliser, PolicyLoss
from vlrl.train.token_logprobs import token_logprobs_and_entropy
from vlrl.train.mismatch import LAG0_FLOOR, mismatch_metrics, mismatch_sums, turn_gaps, warn_mismatched
from vlrl.train.mrope import sequence_mrope
from vlrl.train.optimizer import Optimizer
from vlrl.train.packed_attention import PackedMask
from vlrl.train.parallel import Parallel
from vlrl.train.policy_model import PolicyModel
from vlrl.train.stale_tokens import cut_stale, token_versions
from vlrl.train.step_images import step_images
from vlrl.train.targets import MicroBatchInputs, micro_batch_inputs

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@dataclass(kw_only=True, slots=True)
class RankModel:
    """What every trainer rank loads and computes with: the fields ``Trainer.Config`` and
    ``TrainerGroup.Config`` (the ``trainer`` section of ``vlrl train``) share."""

    dtype: Literal["float32", "float64", "bfloat16"] = "float32"
    """Parameter and compute dtype."""
    encode_chunk_tokens: Annotated[int, Ge(1)] = 16384
    """Most image rows per encoder forward; the next chunk's pixels load meanwhile."""
    encoder: EncoderSpec | None = None
    """A plug-in vision encoder trained in place of the checkpoint's tower (None: the tower);
    the engines must use the same one (``EmbeddedEngine.Config.encoder``)."""
    reference: str | None = None
    """The frozen reference of the KL penalty (``loss.kl_coef > 0``), a checkpoint folder;
    None: the weights this trainer was built from (in ``vlrl train``, the warm-start
    checkpoint, or the base model without one), kept across resumes."""

    def check(self) -> None:
        if self.reference is not None and self.encoder is not None:
            raise ConfigError(
                "reference", self.reference,
                "None with a plug-in encoder: the reference is then the starting weights, encoder included",
            )  # fmt: skip

    def resolved_encoder(self, model_path: str) -> ResolvedEncoder | None:
        """``encoder`` resolved and checked against ``model_path``'s patch rule and width, in
        this process (where a recipe registered it); None for the checkpoint's tower."""
        return None if self.encoder is None else self.encoder.resolve_for(model_path)


class Trainer:
    @dataclass(kw_only=True, slots=True)
    class Config(RankModel):
        """The policy update of one rank: model, optimizer, loss and micro-batching."""

        optim: Optimizer.Config = field(default_factory=Optimizer.Config)
        """AdamW and its learning-rate schedule (over the ``steps`` the trainer is built with)."""
        loss: PolicyLoss.Config = field(default_factory=PolicyLoss.Config)
        """The policy-gradient loss."""
        micro_batches: MicroBatchPlanner.Config = field(default_factory=MicroBatchPlanner.Config)
        """How a step's sequences are packed into micro-batches per DP rank."""
        lora: LoRA.Config = field(default_factory=LoRA.Config)
        """Low-rank adapters in place of full fine-tuning (``lora.rank > 0``)."""

        def build(
            self, *, model_path: str, store: Any, layout: Layout, encoder: VisionEncoder | None = None, steps: int = 0
        ) -> Trainer:
            """``model_path``: the Hugging Face checkpoint folder (any family of ``vlrl.models``) the policy starts from
            (the job's policy, or a checkpoint's ``hf/``). ``encoder``: ``self.encoder``'s instance
            when the caller built it (a Ray rank builds the driver's ``resolved_encoder``); None
            builds it here. ``steps``: the stage's optimizer steps, over which ``optim.schedule`` runs.
            Checks the layout against the model and LoRA against the layout first (a training job's
            ranks skip this: its run plan checked them, ``vlrl.job.run_plan``)."""
            try:
                family_of(model_path).check_layout(layout, model_path)
            except ConfigError as error:
                raise error.under("layout") from None
            if self.lora.enabled:
                self.lora.check_fits(layout, self.encoder)
            return Trainer(self, model_path=model_path, store=store, layout=layout, encoder=encoder, steps=steps)

    def __init__(
        self,
        config: Trainer.Config,
        *,
        model_path: str,
        store: Any,
        layout: Layout,
        encoder: VisionEncoder | None = None,
        steps: int = 0,
    ) -> None:
        """As ``Config.build`` without its checks of the layout and LoRA: for ranks whose settings
        were checked before they started (a training job's run plan)."""
        self.config = config
        self.steps = steps
        self.model_path = model_path
        self.store = store
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.parallel = Parallel.init(layout, self.device.type)
        if encoder is None and config.encoder is not None:
            encoder = config.resolved_encoder(model_path).build(model_path)
        self.model = PolicyModel.load(model_path, dtype=DTYPES[config.dtype], encoder=encoder).to(self.device)
        self.reference = self._reference() if config.loss.kl_coef > 0 else None
        self.lora = None
        if config.lora.enabled:
            try:
                self.lora = config.lora.build(self.model.model)
            except ConfigError as error:
                raise error.under("lora") from None
        self._base_pushed = False
        self.model.parallelize(self.parallel)
        self.loss_fn = config.loss.build()
        self._router_aux_coef = config.loss.router_aux_coef
        if self._router_aux_coef is None:
            self._router_aux_coef = float(getattr(self.model.model.config.text_config, "router_aux_loss_coef", 0.0))
        self.planner = config.micro_batches.build()
        self.optimizer = config.optim.build(
            [{"params": self.model.backbone_parameters()}, {"params": self.model.encoder_parameters()}]
        )
        self.step_count = 0
        self._tp_group = new_tp_group(layout)
        self._encoder = StepEncoder(
            self.model.encoder, store, layout, self.parallel.rank, chunk_tokens=config.encode_chunk_tokens
        )
        self._ref_encoder = None
        if self.reference is not None:
            self._ref_encoder = StepEncoder(
                self.reference.encoder, store, layout, self.parallel.rank, chunk_tokens=config.encode_chunk_tokens
            )

    def _reference(self) -> PolicyModel:
        """The frozen KL reference, sharded as the policy: the named checkpoint, or a copy of the
        starting weights (taken before any step or checkpoint load)."""
        if self.config.reference is None:
            reference = copy.deepcopy(self.model)
        else:
            reference = PolicyModel.load(self.config.reference, dtype=DTYPES[self.config.dtype]).to(self.device)
        reference.requires_grad_(False)
        reference.eval()
        reference.parallelize(self.parallel)
        return reference

    @property
    def layout(self) -> Layout:
        return self.parallel.layout

    # ---- the step

    def step(
        self, metas: Sequence[SeqMeta], min_version: int | None = None, policy_version: int | None = None
    ) -> dict[str, float]:
        """One optimizer step on the sequences ``metas`` (payloads in the store); the returned
        metrics are the same on every rank. Tokens sampled by a policy version older than
        ``min_version`` carry no loss (``stale_tokens``); ``policy_version``, the version of the
        weights the trainer holds, splits the mismatch guard by lag (``train.mismatch``). Collective."""
        start = time.perf_counter()
        metrics = self.forward_backward(metas, min_version, policy_version)
        metrics["lr"] = self.lr_at(self.step_count)
        metrics["grad_norm"] = self.apply_gradients()
        metrics["step"] = self.step_count
        metrics["step_s"] = time.perf_counter() - start
        metrics["tokens_per_s"] = metrics["real_tokens"] / metrics["step_s"]
        return metrics

    def forward_backward(
        self, metas: Sequence[SeqMeta], min_version: int | None = None, policy_version: int | None = None
    ) -> dict[str, float]:
        """The step's loss and gradients (summed over ranks, encoder included), not yet applied."""
        by_key = {m.key: m for m in metas}
        plan = self.planner.plan(metas, self.layout.dp)
        dp, cp, tp = self.parallel.coords
        tables = {m.key: sequence_mrope(m, self.model.merge_size) for m in metas}
        fields = self.config.loss.payload_fields()
        packer = packer_for_rank(
            self.parallel.rank,
            store=self.store,
            layout=self.layout,
            plan=plan,
            metas=metas,
            tp_group=self._tp_group,
            fields=fields,
        )
        inputs = []
        for i, mb in enumerate(plan.ranks[dp]):
            window, failure = None, None
            try:
                window = packer.get(i) if mb.num_tokens else _pad_window(self.layout, fields)
            except Exception as error:
                failure = error
            self._agree_inputs_read(failure, f"micro-batch {i}")
            inputs.append(micro_batch_inputs(
                cut_stale(window, mb, by_key, min_version), mb, self.layout, cp, tp, tables,
                image_token_id=self.model.image_token_id, cp_group=self.parallel.cp_group,
                replay_routing=self.config.loss.routing_replay == "rollout",
            ))  # fmt: skip
            del window
        images = step_images(plan, self.layout, by_key)
        encoded = ref_encoded = failure = None
        try:  # pixels are read here, on a background thread; no collective runs before ``embeddings``
            encoded = self._encoder.encode(images)
            if self._ref_encoder is not None:
                with torch.no_grad():
                    ref_encoded = self._ref_encoder.encode(images)
        except Exception as error:
            failure = error
        self._agree_inputs_read(failure, "the step's images")
        normaliser = self._normaliser(inputs)
        sums: dict[str, torch.Tensor] = {}
        for i, mb_inputs in enumerate(inputs):
            ref_rows = None
            if ref_encoded is not None:
                with torch.no_grad():
                    ref_rows = ref_encoded.embeddings(i)
            where = f"micro-batch {i} of DP rank {dp} (rank {self.parallel.rank})"
            out = self._micro_batch(
                mb_inputs, encoded.embeddings(i), normaliser, ref_rows, plan.ranks[dp][i].keys, by_key, where, policy_version
            )
            self._check_finite(out.loss.detach(), where)
            out.loss.backward()
            for name, value in out.metrics.items():
                sums[name] = torch.maximum(sums[name], value) if name.endswith("_max") and name in sums else sums.get(name, 0) + value
            sums["loss"] = sums.get("loss", 0) + out.loss.detach().double()
        encoded.backward()
        self.model.sync_encoder_grads()
        metrics = self._reduce(sums)
        metrics.update(
            real_tokens=sum(mb.num_tokens for batches in plan.ranks for mb in batches),
            micro_batches=plan.num_micro_batches,
            encoded_images=self._sum(encoded.stats.images),
            stale_tokens=0 if min_version is None else sum(m.stale_tokens(min_version) for m in metas),
        )
        return metrics

    def _agree_inputs_read(self, failure: BaseException | None, what: str) -> None:
        """Every rank learns whether any rank failed to read ``what`` from the store, before the
        next collective, so that all stop together instead of waiting on one that stopped. A lost
        payload (a store error) raises ``StepInputsLost`` on every rank, before any gradient was
        computed: the caller may take the lost groups out and run the step again."""
        code = 0 if failure is None else 1 if _payload_lost(failure) else 2
        flag = torch.tensor([float(code)], dtype=torch.float64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        worst = int(flag.item())
        if worst == 1:
            cause = f"{type(failure).__name__}: {failure}" if failure is not None else "on another rank"
            raise StepInputsLost(f"rank {self.parallel.rank}: payload of {what} lost ({cause})") from failure
        if worst == 2:
            if failure is not None:
                raise failure
            raise RuntimeError(f"rank {self.parallel.rank}: another rank failed reading {what}; its error is in its log")

    def _sum(self, value: float) -> float:
        total = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(total)
        return total.item()

    def _micro_batch(
        self,
        inputs: MicroBatchInputs,
        image_rows: torch.Tensor,
        normaliser: Normaliser,
        ref_rows: torch.Tensor | None,
        keys: Sequence[str],
        metas: Mapping[str, SeqMeta],
        where: str,
        policy_version: int | None = None,
    ):
        if image_rows.shape[0] != len(inputs.image_index):
            raise ValueError(
                f"rank {self.parallel.rank}: received {image_rows.shape[0]} image embedding rows for"
                f" {len(inputs.image_index)} image-token positions"
            )
        mask = PackedMask.build(inputs.positions, inputs.segment_ids, self.parallel.cp_group, self.device, self.model.recurrent)
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.device)  # noqa: E731
        routing = None if inputs.routing is None else as_tensor(inputs.routing)
        logits = self.model(
            as_tensor(inputs.token_ids), as_tensor(inputs.mrope), mask, image_rows, as_tensor(inputs.image_index), routing
        )  # (S, V)
        targets = as_tensor(inputs.target_ids)
        sampled = inputs.sampled_distribution(self.device)
        logprobs, entropy = token_logprobs_and_entropy(logits, targets, **sampled)
        ref_logprobs = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logits = self.reference(
                    as_tensor(inputs.token_ids), as_tensor(inputs.mrope), mask, ref_rows, as_tensor(inputs.image_index)
                )
                ref_logprobs, _ = token_logprobs_and_entropy(ref_logits, targets, **sampled)
                del ref_logits
        out = self.loss_fn(
            logprobs,
            old_logprobs=None if inputs.logprobs is None else as_tensor(inputs.logprobs),
            advantages=None if inputs.advantages is None else as_tensor(inputs.advantages),
            loss_mask=as_tensor(inputs.loss_mask),
            seq_loss_tokens=as_tensor(inputs.seq_loss_tokens),
            normaliser=normaliser,
            teacher_logprobs=None if inputs.teacher_logprobs is None else as_tensor(inputs.teacher_logprobs),
            ref_logprobs=ref_logprobs,
            entropy=entropy,
        )
        balance = self.model.balance_loss(inputs.shard_segments, len(keys))
        if balance is not None:  # a mixture of experts: its load-balancing term, a mean over sequences
            share = balance / max(normaliser.sequences, 1)
            out = LossOutput(out.loss + self._router_aux_coef * share, {**out.metrics, "router_aux": share.detach().double()})
        if inputs.logprobs is not None and self.config.loss.kind != "sft":  # the guard of train.mismatch
            on = inputs.loss_mask
            gap = np.abs(logprobs.detach().double().cpu().numpy() - inputs.logprobs)[on]  # (loss tokens,)
            full_gap = np.zeros(len(on))
            full_gap[on] = gap
            turns = turn_gaps(
                full_gap, inputs.shard_segments, inputs.turn_ids, inputs.turn_first_image, inputs.turn_images,
                keys, metas, None if policy_version is None else _lags(inputs, keys, metas, policy_version),
            )  # fmt: skip
            loss = self.config.loss
            warned = 0
            if loss.mismatch_warn is not None:
                lag0 = loss.mismatch_warn_lag0 if loss.mismatch_warn_lag0 is not None else LAG0_FLOOR
                warned = warn_mismatched(turns, lag0, loss.mismatch_warn, where)
            sums = {**mismatch_sums(gap, turns), "mismatch_warned_sequences": float(warned)}
            out.metrics.update({name: torch.tensor(v, dtype=torch.float64) for name, v in sums.items()})
        return out

    def _normaliser(self, inputs: list[MicroBatchInputs]) -> Normaliser:
        """The step's loss tokens and sequences, summed over every rank's shards (a sequence
        split over CP/TP ranks adds 1/n per token, so it counts once)."""
        counts = torch.tensor(
            [sum(float(x.loss_mask.sum()) for x in inputs),
             sum(float((x.loss_mask / np.maximum(x.seq_loss_tokens, 1)).sum()) for x in inputs)],
            dtype=torch.float64,
        )  # fmt: skip
        dist.all_reduce(counts)
        return Normaliser(tokens=int(round(counts[0].item())), sequences=int(round(counts[1].item())))

    def _check_finite(self, loss: torch.Tensor, where: str) -> None:
        """Every rank stops together if any rank's loss is not finite."""
        bad = torch.tensor([0.0 if torch.isfinite(loss).all() else 1.0], dtype=torch.float64)
        dist.all_reduce(bad)
        if bad.item():
            raise NonFiniteLossError(loss.item(), where if not torch.isfinite(loss).all() else f"another rank (seen at {where})")

    def apply_gradients(self) -> float:
        """Clip by the global gradient norm, take the optimizer step, clear the gradients; returns
        the norm before clipping."""
        norm = self._clip_gradients()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step_count)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step_count += 1
        return norm

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based)."""
        return self.config.optim.lr_at(step, self.steps)

    def _clip_gradients(self) -> float:
        # DTensor and plain apart, and DTensors by mesh (expert parallelism's experts live on a mesh of their own)
        groups = [*_by_mesh(self.model.backbone_parameters()), *_by_mesh(self.model.encoder_parameters())]
        squared = torch.zeros((), dtype=torch.float64, device=self.device)
        for params in groups:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            squared = squared + norm.double() ** 2
        total = squared.sqrt()
        if not torch.isfinite(total):
            raise NonFiniteLossError(total.item(), f"gradient norm after step {self.step_count} (rank {self.parallel.rank})")
        for params in groups:
            torch.nn.utils.clip_grads_with_norm_(params, self.config.optim.max_grad_norm, total)
        return float(total)

    def _reduce(self, sums: Mapping[str, torch.Tensor]) -> dict[str, float]:
        names = sorted(sums)
        summed = torch.stack([torch.as_tensor(sums[n], dtype=torch.float64) for n in names if not n.endswith("_max")])
        dist.all_reduce(summed)
        out = dict(zip([n for n in names if not n.endswith("_max")], summed.tolist(), strict=True))
        for name in names:
            if name.endswith("_max"):
                value = torch.as_tensor(sums[name], dtype=torch.float64).clone()
                dist.all_reduce(value, op=dist.ReduceOp.MAX)
                out[name] = value.item()
        if "logprob_mismatch_sum" in out:
            mismatch_metrics(out)
        tokens = max(out.get("tokens", 0.0), 1.0)
        for name in ("pg_loss_sum", "approx_kl_sum", "entropy_sum", "opd_kl_sum", "ref_kl_sum", "tis_weight_sum"):
            if name in out:
                out[name.removesuffix("_sum")] = out.pop(name) / tokens
        if "tis_truncated" in out:
            out["tis_truncated_frac"] = out.pop("tis_truncated") / tokens
        if "clipped_low" in out:
            out["clip_frac"] = (out.pop("clipped_low") + out.pop("clipped_high")) / tokens
        return out

    # ---- weights

    def full_weights(self) -> dict[str, torch.Tensor] | None:
        """Every weight, unsharded, on rank 0 (None on the others); under LoRA the adapters merged
        in, under the checkpoint's own names. Collective."""
        weights = self._gathered()
        if weights is None or self.lora is None:
            return weights
        return self.lora.merged_state(weights)

    def push_state(self, merged: bool = False) -> dict[str, torch.Tensor] | None:
        """What a weight push carries, on rank 0 (None on the others): every weight, or under
        LoRA the adapters and ``lora.full_modules`` (``vlrl.models.adapters``), plus, on this
        trainer's first push, every other weight (the base the adapters sit on: an engine built from
        the job's model serves this trainer's, though it was resumed or built on a warm start);
        ``merged``: every weight with the adapters merged in, for an engine that does not apply
        adapters. Collective."""
        if self.lora is None or merged:
            return self.full_weights()
        state = self._gathered(self.lora.pushed if self._base_pushed else None)
        self._base_pushed = True
        if state is None:
            return None
        return {**dict(self.lora.base_state(state.items())), **dict(self.lora.adapter_state(state.items()))}

    def _gathered(self, keep: Callable[[str], bool] | None = None) -> dict[str, torch.Tensor] | None:
        """The model's weights (those whose name ``keep`` accepts), unsharded, on rank 0. Collective."""
        weights = {}
        for name, value in self.model.full_state_dict(keep):
            if self.parallel.is_logger:
                weights[name] = value.to("cpu", copy=True)
        return weights if self.parallel.is_logger else None

    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """A checkpoint: sharded model + optimizer (exact resume, any rank count of the same
        layout), and on rank 0 a Hugging Face folder (safetensors weights) plus ``extra`` state
        (the driver's and sampler's). A plug-in encoder's weights go to ``hf/encoder/`` (its
        ``save_pretrained``), where a trainer or engine built from ``hf/`` finds them; the
        model's weights keep the checkpoint's own, untrained tower. Each file vlrl writes goes in
        atomically (``vlrl.atomic``), so a crash never leaves a torn one. Collective."""
        path = Path(path)
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path / "sharded"))
        weights = self._gathered()
        if weights is not None and self.lora is not None:
            self.lora.save_adapter(path / ADAPTER_DIR, weights, base_model=self.model_path)
            weights = self.lora.merged_state(weights)
        if weights is not None:
            fsync(path / "sharded")  # DCP renames its .metadata into place last, but leaves the rename unsynced
            hf = path / "hf"
            hf.mkdir(parents=True, exist_ok=True)
            if not self.model.owns_tower:
                weights = {k: v for k, v in weights.items() if not k.startswith(STATE_PREFIX)}
                weights.update(self.model.tower_state())
                self.model.encoder.save_pretrained(hf / ENCODER_DIR)
            save_hf_folder(hf, weights, family_of(self.model_path), source=self.model_path)
            save_trainer_file(path / TRAINER_FILE, self.step_count, extra or {})
        dist.barrier()
        return path

    def load(self, path: str | Path) -> dict[str, Any]:
        """Resume from ``save``'s folder; returns the ``extra`` state. Collective."""
        path = Path(path)
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        state = {"model": model_state, "optim": optim_state}
        load_sharded(state, path / "sharded")
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        meta = load_trainer_file(path / TRAINER_FILE)
        self.step_count = int(meta["step"])
        return meta["extra"]

    def close(self) -> None:
        self._encoder.close()
        if self._ref_encoder is not None:
            self._ref_encoder.close()


class StepInputsLost(RuntimeError):
    """A step's payload could not be read on some rank (a key or store shard gone); raised on
    every rank before any gradient, so the step can be run again without the lost groups."""


def _by_mesh(params: Sequence[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """The parameters with a gradient, grouped by the device mesh they are distributed over (plain
    tensors together): a norm or foreach op takes one mesh at a time."""
    groups: dict[Any, list[torch.nn.Parameter]] = {}
    for param in params:
        if param.grad is not None:
            groups.setdefault(getattr(param.grad, "device_mesh", None), []).append(param)
    return list(groups.values())


def _payload_lost(error: BaseException) -> bool:
    return isinstance(error, StoreError) or (isinstance(error, PackError) and error.payload_lost)


def _pad_window(layout: Layout, fields: tuple[str, ...]) -> PackedWindow:
    """The window of an empty micro-batch with the loss's ``fields``: pad tokens only, so the rank
    still takes part in every collective of the step (layers, CP gathers, all-to-alls) and
    contributes nothing."""
    n = layout.window_len(layout.pad_multiple)
    arrays = {name: np.full(n, pad_value(name), FIELDS[name].dtype) for name in fields}
    return PackedWindow.from_arrays(
        {
            **arrays,
            "position_ids": np.zeros(n, np.int32),
            "segment_ids": np.full(n, PAD_SEGMENT_ID, np.int32),
            "cu_seqlens": np.array([0, n], np.int32),
        },
        num_tokens=0,
        images=(),
    )


def _lags(inputs: MicroBatchInputs, keys: Sequence[str], metas: Mapping[str, SeqMeta], policy_version: int) -> np.ndarray:
    """``(S,)`` each loss target's lag: ``policy_version`` minus the version that sampled it (0 off the mask)."""
    lags = np.zeros(len(inputs.loss_mask), np.int64)
    on = inputs.loss_mask
    for seg in np.unique(inputs.shard_segments[on]):
        rows = on & (inputs.shard_segments == seg)
        lags[rows] = policy_version - token_versions(metas[keys[seg]], inputs.target_positions[rows])
    return lags
