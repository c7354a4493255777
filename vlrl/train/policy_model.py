"""``PolicyModel``: a Hugging Face vision-language model of any registered family (``vlrl.models``:
Qwen2-VL, Qwen2.5-VL, Qwen3-VL) trained over DP x CP x TP on packed windows.

The vision tower runs through the encoder plug-in path (``StepEncoder``: planned, lazily
fetched, all-to-all'd), so any ``VisionEncoder`` whose rows fit the LLM trains the same way. The
LLM backbone is the model's own modules, called layer by layer on one CP window:

1. token embeddings of the window, sequence-sharded over TP (``(1, W/tp, H)`` per rank);
2. the received image rows spliced in at this rank's image-token positions;
3. 3-D M-RoPE cos/sin for the window's positions (``vlrl.train.mrope``);
4. each decoder layer with the ``vlrl_packed`` attention (segment-masked, causal in packed
   order, keys/values gathered over CP; ``packed_attention``), or a linear-attention block run
   segment by segment in sequence order (its inputs gathered over CP; ``linear_attention``);
5. final norm and LM head; logits come back sequence-sharded with the whole vocabulary.

Parallelism uses PyTorch's engines: DTensor ``parallelize_module`` with the torchtitan plan
(``train.tensor_parallel``: norms ``SequenceParallel``; q/k/v, gate/up column-wise; o/down
row-wise back to sequence shards; a linear-attention block's heads split; embeddings row-wise;
LM head column-wise, then redistributed from vocab shards to sequence shards; LoRA adapters
split as their layers are), and FSDP2 ``fully_shard`` of
every layer, the embeddings, the final norm and the head over the flattened DP x CP mesh with
summed (not averaged) gradients. Under expert parallelism (``layout.ep``) each sparse layer's
experts are split over the EP group first (a DTensor ``Shard(0)`` over the expert mesh's ``ep``
dimension) and FSDP2-sharded on their own over ``edp``, the ranks holding the same experts
(``train.parallel``); ``full_state_dict`` gathers them whole. The encoder is replicated and its
gradients are summed over the world (``sync_encoder_grads``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_module, distribute_tensor
from transformers import AutoProcessor, PreTrainedModel

from encoders.protocol import VisionEncoder
from encoders.spec import STATE_PREFIX
from vlrl.models import family_of
from vlrl.train import linear_attention
from vlrl.train.linear_attention import reset_at_segment_borders
from vlrl.train.moe import balance_loss, route_through_trainer
from vlrl.train.packed_attention import ATTENTION_NAME, PackedMask
from vlrl.train.parallel import Parallel
from vlrl.train.tensor_parallel import parallelize_language_model

ENCODER_PREFIX = "model.visual."
"""Where a checkpoint of every supported family keeps the vision tower's weights."""


class PolicyModel(nn.Module):
    def __init__(self, model: PreTrainedModel, encoder: VisionEncoder) -> None:
        super().__init__()
        if encoder.hidden_size != model.config.text_config.hidden_size:
            raise ValueError(
                f"encoder {encoder.name!r} gives rows of width {encoder.hidden_size}; the LLM's embeddings have"
                f" {model.config.text_config.hidden_size}"
            )
        layers = len(model.model.language_model.layers)
        if not 1 <= encoder.feature_levels <= layers + 1:
            raise ValueError(
                f"encoder {encoder.name!r} has feature_levels={encoder.feature_levels}; expected 1 to"
                f" {layers + 1}: the embedding plus at most one DeepStack level per decoder layer"
            )
        self.model = model
        self.encoder = encoder
        self.lm = model.model.language_model
        self.lm.config._attn_implementation = ATTENTION_NAME
        self.routed = route_through_trainer(self.lm)  # the sparse MLPs (Qwen3-VL-MoE); none for a dense LLM
        reset_at_segment_borders(self.lm)  # the linear-attention layers (Qwen3.5); none in the other families
        self.recurrent = bool(linear_attention.linear_attention_layers(self.lm))
        """Whether the LLM has linear-attention layers (their packed masks carry ``pieces``)."""
        self.image_token_id = int(model.config.image_token_id)
        self.merge_size = int(model.config.vision_config.spatial_merge_size)
        self._parallel: Parallel | None = None

    @classmethod
    def load(cls, path: str | Path, *, dtype: torch.dtype = torch.float32, encoder: VisionEncoder | None = None) -> PolicyModel:
        """A checkpoint folder of any registered model family (``vlrl.models``); the tower is its
        own (the family's plug-in around it) unless ``encoder`` replaces it."""
        family = family_of(path)
        model = family.load(path, dtype=dtype)
        if encoder is None:
            encoder = family.tower_encoder(model, AutoProcessor.from_pretrained(str(path)))
        return cls(model, encoder.to(dtype))

    # ---- parallelism

    def parallelize(self, parallel: Parallel) -> None:
        """Apply TP (sequence parallel) and FSDP2 in place. Collective."""
        layout = parallel.layout
        if layout.tp > 1 and not layout.sequence_parallel:
            raise ValueError("the trainer runs tensor parallelism with sequence parallelism; set sequence_parallel=True")
        text = self.model.config.text_config
        heads = [("attention heads", text.num_attention_heads), ("key/value heads", text.num_key_value_heads)]
        if self.recurrent:  # the DeltaNet layers split their heads too
            heads += [("linear-attention key heads", text.linear_num_key_heads), ("linear-attention value heads", text.linear_num_value_heads)]
        for name, count in heads:
            if count % layout.tp:
                raise ValueError(f"tp={layout.tp} does not divide the model's {count} {name}")
        if layout.tp > 1:
            frozen = {name for name, param in self.named_parameters() if not param.requires_grad}
            parallelize_language_model(self.lm, self.model.lm_head, parallel.tp_mesh, experts=layout.ep == 1)
            for name, param in self.named_parameters():  # SequenceParallel's replicated norms come back
                param.requires_grad_(name not in frozen)  # trainable; LoRA's frozen ones must stay frozen
        if layout.ep > 1:
            self._apply_ep(parallel)
        if layout.dp * layout.cp > 1:
            for module in [*self.lm.layers, self.lm.embed_tokens, self.lm.norm, self.model.lm_head]:
                fully_shard(module, mesh=parallel.dp_cp_mesh, reshard_after_forward=False)
                module.set_gradient_divide_factor(1.0)  # CP and DP shares of one global loss add up
                module.set_force_sum_reduction_for_comms(True)  # SUM, not PREMUL_SUM(1.0): gloo has no PREMUL_SUM
        self._parallel = parallel

    def _apply_ep(self, parallel: Parallel) -> None:
        """Each routed block's experts split over the EP group, FSDP2 over the ranks holding the same ones."""
        experts = parallel.expert_mesh  # the family's check_layout has refused an ep that does not divide them
        for block in self.routed:
            distribute_module(block.experts, experts["ep"], _split_experts)
            block.ep_group = parallel.ep_group
            fully_shard(block.experts, mesh=experts["edp"], reshard_after_forward=False)
            block.experts.set_gradient_divide_factor(1.0)
            block.experts.set_force_sum_reduction_for_comms(True)

    # ---- forward

    def forward(
        self,
        token_ids: torch.Tensor,
        mrope: torch.Tensor,
        mask: PackedMask,
        image_rows: torch.Tensor,
        image_index: torch.Tensor,
        routing: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of this rank's shard of a CP window, ``(W / tp, vocab)``.

        ``token_ids`` ``(W,)`` and ``mrope`` ``(3, W)``: the whole CP window (every TP rank alike);
        ``image_rows`` ``(R, H * feature_levels)``: this rank's received image rows, placed at
        ``image_index`` ``(R,)`` of its shard (the rows must be in the loss graph on every rank, even
        when R = 0). Columns ``[:H]`` replace the token embeddings; DeepStack level ``k`` (columns
        ``[(k+1)H, (k+2)H)``) is added at the same positions after decoder layer ``k``, as
        ``Qwen3VLTextModel`` does (under sequence parallelism ``x`` is this rank's shard and
        ``image_index`` indexes it, so the one index serves every level). ``routing`` ``(W / tp,
        sparse layers, k)``: the rollout's expert records of the shard's tokens, which the sparse
        layers replay (``train.moe``); None: each routes by its own router."""
        if routing is not None and routing.shape[1] != len(self.routed):
            raise ValueError(f"routing replay: records of {routing.shape[1]} sparse layers; the model has {len(self.routed)}")
        for k, block in enumerate(self.routed):
            block.replay = None if routing is None else routing[:, k]
        hidden = self.encoder.hidden_size
        x = self.lm.embed_tokens(token_ids[None])  # (1, W/tp, H)
        if isinstance(x, DTensor):
            x = x.to_local()
        rows = image_rows[None].to(x.dtype)  # (1, R, H * levels)
        x = x.index_copy(1, image_index, rows[..., :hidden])  # out of place: keeps autograd exact
        blocks = range(1, self.encoder.feature_levels)
        deepstack = [rows[..., b * hidden : (b + 1) * hidden] for b in blocks]  # (1, R, H) per DeepStack level
        cos, sin = self.lm.rotary_emb(x, mrope[:, None, :])  # (3, 1, W) positions -> (1, W, head_dim)
        for k, layer in enumerate(self.lm.layers):
            x = layer(x, attention_mask=mask, position_embeddings=(cos, sin))
            if k < len(deepstack):
                x = x.index_add(1, image_index, deepstack[k])  # out of place, like the splice
        logits = self.model.lm_head(self.lm.norm(x))  # (1, W/tp, V) or, under TP, vocab shards
        if isinstance(logits, DTensor):
            logits = logits.redistribute(placements=[Shard(1)]).to_local()
        return logits[0]

    def balance_loss(self, segments: np.ndarray, num_segments: int) -> torch.Tensor | None:
        """The last forward's load-balancing loss over this rank's tokens, summed per sequence
        (``train.moe.balance_loss``; ``segments`` ``(W / tp,)``); None for a dense LLM. Collective
        over the CP and TP groups."""
        if not self.routed:
            return None
        parallel = self._parallel
        groups = () if parallel is None else (parallel.cp_group, parallel.tp_mesh.get_group() if parallel.layout.tp > 1 else None)
        return balance_loss(self.routed, segments, num_segments, groups)

    # ---- gradients and weights

    def encoder_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.encoder.parameters() if p.requires_grad]

    def backbone_parameters(self) -> list[nn.Parameter]:
        """The LLM's parameters (the checkpoint's own tower excluded even when a plug-in replaces it)."""
        skip = {id(p) for p in [*self.encoder.parameters(), *self.model.model.visual.parameters()]}
        return [p for p in self.model.parameters() if p.requires_grad and id(p) not in skip]

    @property
    def owns_tower(self) -> bool:
        """Whether the encoder is the checkpoint's own tower (its weights keep their names)."""
        return getattr(self.encoder, "tower", None) is self.model.model.visual

    def sync_encoder_grads(self) -> None:
        """Sum the encoder's gradients over all ranks: each encoded other images. One all-reduce."""
        if self._parallel is None or self._parallel.layout.world_size == 1:
            return
        params = [p for p in self.encoder_parameters()]
        if not params:  # a frozen tower (LoRA without tower adapters)
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self._parallel.world_group)
        for param, piece in zip(params, flat.split([g.numel() for g in grads]), strict=True):
            param.grad = piece.view_as(param).clone()

    def full_state_dict(self, keep: Callable[[str], bool] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every weight (whose name ``keep`` accepts) under its checkpoint name, unsharded; a plug-in
        encoder's own weights come under ``encoder.`` (``STATE_PREFIX``) instead of the unused
        tower's. Collective under TP/FSDP: every rank iterates it to the end."""
        for name, value in self.model.state_dict().items():
            if (not self.owns_tower and name.startswith(ENCODER_PREFIX)) or (keep is not None and not keep(name)):
                continue
            if isinstance(value, DTensor):
                value = value.full_tensor()
            yield name, value.detach()
        if not self.owns_tower:
            for name, value in self.encoder.state_dict().items():
                if keep is None or keep(STATE_PREFIX + name):
                    yield STATE_PREFIX + name, value.detach()

    def tower_state(self) -> dict[str, torch.Tensor]:
        """The checkpoint's own tower under its checkpoint names (replicated, never sharded): kept
        in a saved ``hf/`` folder next to a plug-in so the folder loads as the model it was."""
        return {ENCODER_PREFIX + name: value.detach() for name, value in self.model.model.visual.state_dict().items()}


def _split_experts(name: str, module: nn.Module, mesh) -> None:
    """``distribute_module``'s partition: each fused expert tensor ``(E, ...)`` split along experts."""
    for key, param in list(module.named_parameters(recurse=False)):
        module.register_parameter(key, nn.Parameter(distribute_tensor(param, mesh, [Shard(0)]), param.requires_grad))
