"""LoRA: low-rank adapters on the LLM, the vision tower and its merger, built on PEFT.

An adapted linear layer computes ``y = W x + (alpha / r) * B (A dropout(x))``: the base ``W``
``(out, in)`` is frozen, ``A`` ``(r, in)`` and ``B`` ``(out, r)`` train, and PEFT starts ``B`` at
0, so step 0 is the base model. Only the adapters (and ``full_modules``, trained in full) get
gradients and optimizer state; every other weight (embeddings, norms, the LM head, the tower when
no tower or merger pattern is given) stays bit-identical. A trainer's first weight push carries
its whole base model, every later one the adapters alone (``vlrl.models.adapters``); a checkpoint
adds a PEFT adapter folder (``save_adapter``; the folder's I/O, and ``merge_adapter``, which
turns it back into a plain checkpoint folder on its base, are ``train.checkpoint_io``'s).

Where adapters go is chosen per part of the model by patterns, each a module name's dotted
suffix, as PEFT's ``target_modules`` list matches them (``q_proj``, ``attn.qkv``, ``mlp.0``),
looked for only under that part's prefixes (``PARTS``). Every pattern must name at least one
linear layer of the model, or the build fails naming the field and the layers it could have
meant.

Under tensor parallelism each adapter is split as its layer is (``train.tensor_parallel``), so a
TP rank computes its share of ``y`` with the base's own communication.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import torch
from torch import nn

from vlrl.config import ConfigError, Ge, Gt, Lt
from vlrl.models.adapters import LORA_A, LORA_B
from vlrl.train.checkpoint_io import save_adapter_folder

if TYPE_CHECKING:
    from encoders.spec import EncoderSpec
    from vlrl.pack import Layout

PARTS = {
    "llm_modules": ("model.language_model.",),
    "tower_modules": ("model.visual.blocks.",),
    "merger_modules": ("model.visual.merger.", "model.visual.deepstack_merger_list."),
}
"""Each pattern field and where (module-name prefixes, the same in every supported family) it looks."""
ADAPTER = "default"
"""PEFT's adapter name inside the trainer's modules (``...q_proj.lora_A.default.weight``)."""
INIT_SEED = 0
"""Seed of the adapters' random ``A``: the replicas of a parameter on different ranks start equal."""
_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


class LoRA:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Low-rank adapters in place of full fine-tuning (``--set lora.rank=16``); rank 0: off."""

        rank: Annotated[int, Ge(0)] = 0
        """Rank ``r`` of every adapter; 0 trains (and pushes) every weight instead."""
        alpha: Annotated[float, Gt(0)] = 32.0
        """Scale numerator: the adapters' output is multiplied by ``alpha / rank``."""
        dropout: Annotated[float, Ge(0), Lt(1)] = 0.0
        """Dropout on an adapter's input during training (0: the step is deterministic)."""
        llm_modules: tuple[str, ...] | None = None
        """Linear layers of the language model that get adapters (name suffixes). None: the
        family's own (``ModelFamily.lora_llm_modules``), every attention and MLP projection the
        LLM has: on Qwen3.5 the DeltaNet layers' too (``in_proj_qkv``, ``in_proj_z``,
        ``in_proj_b``, ``in_proj_a``, ``out_proj``); on Qwen3-VL-MoE, whose experts are fused
        tensors (no linear layers), the attention's alone, and the experts and router stay
        frozen. A pattern given here must match."""
        tower_modules: tuple[str, ...] = ()
        """Linear layers of the vision tower's blocks that get adapters (``attn.qkv``, ``attn.proj``;
        the MLP's names differ by family: ``mlp.fc1``, ``mlp.up_proj``, ``mlp.linear_fc1``). Empty,
        with ``merger_modules`` empty too: the tower is frozen and gets no gradient."""
        merger_modules: tuple[str, ...] = ()
        """Linear layers of the patch merger that get adapters (``mlp.0``, ``mlp.2`` in Qwen2/2.5-VL;
        ``linear_fc1``, ``linear_fc2`` in Qwen3-VL, DeepStack mergers included)."""
        full_modules: tuple[str, ...] = ()
        """Modules trained in full beside the adapters, by exact name (PEFT's ``modules_to_save``):
        ``lm_head``, ``model.language_model.norm``. A model trained from random weights needs them:
        its frozen head and final norm cap the logits near zero, so no adapter can sharpen them."""

        @property
        def enabled(self) -> bool:
            return self.rank > 0

        @property
        def trains_tower(self) -> bool:
            return bool(self.tower_modules or self.merger_modules)

        def check(self) -> None:
            for field_name in (*PARTS, "full_modules"):
                patterns = getattr(self, field_name)
                if patterns is None:  # llm_modules: the family's
                    continue
                for pattern in patterns:
                    if not _PATTERN.fullmatch(pattern):
                        raise ConfigError(
                            field_name, patterns, "module-name suffixes such as 'q_proj' or 'attn.qkv'", got=repr(pattern)
                        )
                if len(set(patterns)) != len(patterns):
                    raise ConfigError(field_name, patterns, "each pattern once")
            if self.enabled and not (self.llm_modules is None or self.llm_modules or self.trains_tower):
                raise ConfigError("llm_modules", self.llm_modules, "at least one pattern (in llm_modules, tower_modules or merger_modules) with rank > 0")

        def check_fits(self, layout: Layout, encoder: EncoderSpec | None) -> None:
            """What LoRA needs of the rest of the trainer (its ``layout`` and plug-in ``encoder``);
            ConfigError naming the field."""
            if layout.tp > 1 and self.dropout > 0:  # the TP ranks of a column-parallel layer share one input
                raise ConfigError("lora.dropout", self.dropout, f"0 with layout.tp = {layout.tp}: TP ranks draw their own dropout masks")
            if encoder is not None:
                raise ConfigError("lora.rank", self.rank, "0 with a plug-in encoder (trainer.encoder): LoRA adapts the checkpoint's own tower")

        def build(self, model: nn.Module) -> LoRA:
            """Adapters injected into ``model`` (a family's transformers model) in place, every other
            weight frozen. ConfigError naming the field when a pattern matches no linear layer."""
            from peft import LoraConfig, inject_adapter_in_model

            targets = self.target_modules(model)
            peft_config = LoraConfig(
                r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=targets, bias="none"
            )
            modules = dict(model.named_modules())
            for name in self.full_modules:
                if name not in modules:
                    raise ConfigError("full_modules", self.full_modules, "names of modules of the model", got=repr(name))
            with torch.random.fork_rng():  # every rank (and every rebuild) draws the same A
                torch.manual_seed(INIT_SEED)
                inject_adapter_in_model(peft_config, model, adapter_name=ADAPTER)  # also freezes every other weight
            full = [f"{m}.{p}" for m in self.full_modules for p, _ in modules[m].named_parameters()]
            for name in self.full_modules:
                modules[name].requires_grad_(True)
            return LoRA(self, peft_config, targets, full)

        def check_model(self, model_path: str) -> None:
            """``target_modules`` on ``model_path``'s architecture built on the meta device (no
            weights read): a run refuses a pattern that matches nothing before it starts anything."""
            from transformers import AutoConfig

            from vlrl.models import family_of

            config = AutoConfig.from_pretrained(model_path)
            with torch.device("meta"):
                model = family_of(model_path).model_class._from_config(config)
            self.target_modules(model)
            missing = [name for name in self.full_modules if name not in dict(model.named_modules())]
            if missing:
                raise ConfigError("full_modules", self.full_modules, "names of modules of the model", got=repr(missing[0]))

        def target_modules(self, model: nn.Module) -> list[str]:
            """The names of the linear layers the patterns select, in module order (``model``: a
            registered family's transformers model)."""
            from vlrl.models import family_of_type

            linear = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
            chosen: set[str] = set()
            for field_name, prefixes in PARTS.items():
                in_part = [n for n in linear if n.startswith(prefixes)]
                patterns = getattr(self, field_name)
                if patterns is None:  # llm_modules: the family's
                    patterns = family_of_type(model.config.model_type).lora_llm_modules
                for pattern in patterns:
                    hits = [n for n in in_part if n == pattern or n.endswith("." + pattern)]
                    if not hits and getattr(self, field_name) is None:
                        continue  # the family's default: the projections this model has
                    if not hits:
                        leaves = sorted({re.sub(r"^.*?\.\d+\.|^(" + "|".join(map(re.escape, prefixes)) + ")", "", n) for n in in_part})
                        raise ConfigError(
                            field_name, getattr(self, field_name), f"suffixes of linear layers under {' or '.join(prefixes)}",
                            got=repr(pattern), hint=f"this model has {leaves}",
                        )  # fmt: skip
                    chosen.update(hits)
            return [n for n in linear if n in chosen]

    def __init__(self, config: LoRA.Config, peft_config, targets: list[str], full: list[str]) -> None:
        self.config = config
        self.peft_config = peft_config
        self.targets = targets
        self.full = full
        """The weights of ``full_modules``, under their checkpoint names."""
        self.scale = config.alpha / config.rank

    def pushed(self, name: str) -> bool:
        """Whether the trainer's weight ``name`` goes into a push after the first (the adapters and
        the fully trained modules)."""
        return ".lora_" in name or name in self.full

    # ---- weights under checkpoint names

    def adapter_state(self, state: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """The push of ``state`` (the trainer's named tensors): ``M.lora_A.weight`` = A and
        ``M.lora_B.weight`` = scale * B for every adapted module, and the fully trained modules'
        weights under their own names."""
        for name, value in state:
            if name in self.full:
                yield name, value
            elif name.endswith(f".lora_A.{ADAPTER}.weight"):
                yield name.replace(f".lora_A.{ADAPTER}.weight", LORA_A), value
            elif name.endswith(f".lora_B.{ADAPTER}.weight"):
                yield name.replace(f".lora_B.{ADAPTER}.weight", LORA_B), value * self.scale

    def base_state(self, state: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Every weight of ``state`` but the adapters, under its checkpoint name (an adapted
        module's ``M.base_layer.weight`` as ``M.weight``, its bias as ``M.bias``): the whole base
        model, which a trainer's first push carries. An engine built from another checkpoint than
        the trainer's (a run started from a full-weight warm start, or resumed) then serves the
        trainer's weights, not its own frozen ones under the trainer's adapters."""
        for name, value in state:
            if ".lora_" not in name:
                yield name.replace(".base_layer.", "."), value

    def merged_state(self, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` (the trainer's, unsharded) as a plain checkpoint of the family: every adapted
        module's weight is ``W + scale * B A``, under the names the model had before adapters."""
        merged = {}
        for name, value in state.items():
            if f".lora_A.{ADAPTER}." in name or f".lora_B.{ADAPTER}." in name:
                continue
            module, _, leaf = name.rpartition(".base_layer.")
            if not module:
                merged[name] = value
            elif leaf == "weight":
                a, b = state[f"{module}.lora_A.{ADAPTER}.weight"], state[f"{module}.lora_B.{ADAPTER}.weight"]
                merged[f"{module}.weight"] = (value.double() + self.scale * b.double() @ a.double()).to(value.dtype)
            else:
                merged[f"{module}.{leaf}"] = value
        return merged

    # ---- the PEFT folder

    def save_adapter(self, path: Path, state: Mapping[str, torch.Tensor], base_model: str) -> Path:
        """A PEFT adapter folder at ``path`` (``checkpoint_io.save_adapter_folder``) that
        ``peft.PeftModel.from_pretrained(family_model, path)`` loads; ``state``: the trainer's
        unsharded named tensors; ``base_model``: the checkpoint the adapters sit on."""
        tensors = {
            "base_model.model." + name.replace(f".{ADAPTER}.", "."): value
            for name, value in state.items()
            if f".lora_A.{ADAPTER}." in name or f".lora_B.{ADAPTER}." in name or name in self.full
        }
        settings = self.peft_config.to_dict()
        settings.update(
            base_model_name_or_path=str(base_model), target_modules=sorted(self.targets),
            modules_to_save=list(self.config.full_modules) or None,
        )  # fmt: skip
        return save_adapter_folder(path, tensors, settings)
