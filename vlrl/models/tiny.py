"""Tiny checkpoints of every model family (tokenizer, processor, random weights), built offline.

Nothing is downloaded: a byte-level BPE tokenizer is trained on a small built-in corpus of
GUI-agent text, and the model is a randomly initialised model of the family's own transformers
class (vision tower, patch merger, M-RoPE; DeepStack for Qwen3-VL) of a few hundred thousand
parameters. The folder it writes loads like any checkpoint of the family (``from_pretrained``),
so every code path that serves or trains a real one runs on it in seconds on a CPU. Same
``seed``, same files. Each family module gives its tiny config (``ModelFamily.tiny_config``);
this module does the rest.
"""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from vlrl.config import ConfigError, Ge, Gt

if TYPE_CHECKING:
    from vlrl.models.family import ModelFamily

@dataclass(kw_only=True, slots=True)
class TinyModel:
    """How ``model_path='tiny'`` is built: an untrained tiny model of one family, offline."""

    family: str = "qwen2_vl"
    """Model family of the tiny build: a registered family (``qwen2_vl``, ``qwen2_5_vl``,
    ``qwen3_vl``, ``qwen3_vl_moe``: 4 experts, 2 per token; ``qwen3_5``: gated DeltaNet layers,
    every fourth and the last layer full attention, heads of at least 32)."""

    seed: Annotated[int, Ge(0)] = 0
    """Seed of the random initial weights."""

    min_pixels: Annotated[int, Ge(28 * 28)] = 56 * 56
    """Smallest image area the processor resizes a screenshot to."""

    max_pixels: Annotated[int, Ge(28 * 28)] = 224 * 224
    """Largest image area the processor resizes a screenshot to (fewer image tokens below it)."""

    rope_theta: Annotated[float, Gt(0)] = 1e6
    """Base of the language model's M-RoPE (1e6 is the real models'). With a tiny head (16
    dimensions, sections of 2/3/3 frequencies), a base of 1e6 turns the width section of M-RoPE
    by about 1e-4 rad per column, so the LLM cannot tell image columns apart; a small base (10)
    gives every section angles of order 0.1-1 rad per position. The weights are random either way."""

    head_dim: Literal[16, 32, 64] = 16
    """Dimensions of one attention head of the language model. vLLM's CPU attention serves 32
    and up (it fails at the first request on 16), so a tiny policy for a CPU vLLM engine needs
    32; the default stays 16 because the main job learns worse with 32 at the same width
    (half the heads; measured in ``docs/vllm.md``)."""

    hidden_size: Annotated[int, Ge(32)] | None = None
    """Width of the language model: a multiple of 2 x ``head_dim`` (at least two heads, so
    tensor parallelism of 2 splits them; half as many KV heads, at least two); the MLP is twice
    as wide. None: the family's tiny width (64; 128 for ``qwen3_5``, four of its 32-wide heads).
    The capacity a task needs is one of the things a learning curve can be limited by
    (``docs/lab/training-runs.md``, select-menu)."""

    rate_scale: Annotated[float, Gt(0)] | None = None
    """What the run's learning rates (``warm_start.lr``, ``optim.lr``) are multiplied by while it
    trains this tiny build. None: the family's measured scale (1; 0.5 for ``qwen3_5``, whose
    hybrid build stalls at the example recipes' warm-start rate of 1e-2). The job prints the
    rates it uses, and ``train/lr`` in the metrics is the rate of each step."""

    layers: Annotated[int, Ge(1)] = 2
    """Decoder layers of the language model."""

    vision_hidden_size: Annotated[int, Ge(16)] = 32
    """Width of the vision tower: a multiple of 16 (heads of 16 dimensions)."""

    vision_depth: Annotated[int, Ge(1)] = 2
    """Blocks of the vision tower."""

    words: tuple[str, ...] = ()
    """Words the tokenizer learns whole (each as written and lower-cased, with and without a
    leading space), as a real model's tokenizer holds the words of its language: a task's labels
    and names. Without them the built-in corpus leaves most task words split into bytes, so
    copying a name out of the goal means copying every byte of it. Letters only."""

    def check(self) -> None:
        from vlrl.models.registry import registered

        if self.family not in registered():
            raise ConfigError("family", self.family, f"a registered model family, one of {registered()}")
        if self.width() % (2 * self.head_dim):
            raise ConfigError(
                "hidden_size", self.width(), f"a multiple of {2 * self.head_dim} (at least two heads of head_dim={self.head_dim})"
            )
        if self.vision_hidden_size % 16:
            raise ConfigError("vision_hidden_size", self.vision_hidden_size, "a multiple of 16 (heads of 16 dimensions)")
        wrong = next((w for w in self.words if not (isinstance(w, str) and w.isascii() and w.isalpha())), None)
        if wrong is not None:
            raise ConfigError("words", wrong, "words of ASCII letters only (split names such as 'mail.io' into 'mail', 'io')")

    def width(self) -> int:
        """``hidden_size``, or the family's tiny width."""
        from vlrl.models.registry import family

        return self.hidden_size if self.hidden_size is not None else family(self.family).tiny_width

    def resolved_rate_scale(self) -> float:
        """``rate_scale``, or the family's measured scale."""
        from vlrl.models.registry import family

        return self.rate_scale if self.rate_scale is not None else family(self.family).tiny_rate_scale
    def build(self, path: Path) -> Path:
        from vlrl.models.registry import family

        if path.exists():
            shutil.rmtree(path)
        return build_tiny(
            family(self.family),
            path,
            seed=self.seed,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
            rope_theta=self.rope_theta,
            head_dim=self.head_dim,
            hidden_size=self.width(),
            layers=self.layers,
            vision_hidden_size=self.vision_hidden_size,
            vision_depth=self.vision_depth,
            words=self.words,
        )


SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
)

# The Qwen-VL template, minus video: images become <|vision_start|><|image_pad|><|vision_end|> and
# the processor expands the one <|image_pad|> to the image's token count.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_WORDS = (
    "click double_click right_click move drag scroll type key wait done fail press hold release "
    "button OK Cancel Submit submit Apply Close Open Save Delete Next Back Search Login Logout "
    "Yes No menu file edit view window tab link text field input checkbox radio select option "
    "dropdown slider icon dialog page screen browser desktop terminal email password username "
    "name arguments action coordinate x y dx dy left right up down top bottom enter escape "
    "the a an to of on in at and or with for from this that is are then first next "
    "goal task observe think answer user assistant system tool function call result error "
    "You are a helpful assistant."
)
_JSON_SNIPPETS = (
    '{"name": "computer", "arguments": {"action": "click", "coordinate": [120, 45]}}',
    '{"name": "computer", "arguments": {"action": "type", "text": "hello world"}}',
    '{"name": "computer", "arguments": {"action": "key", "keys": ["ctrl", "c"]}}',
    '{"name": "computer", "arguments": {"action": "scroll", "coordinate": [160, 120], "dy": -3}}',
    '{"name": "computer", "arguments": {"action": "drag", "start": [10, 20], "end": [300, 200]}}',
    '{"name": "computer", "arguments": {"action": "done"}}',
    "<tool_call>\n{\"name\": \"computer\", \"arguments\": {\"action\": \"wait\"}}\n</tool_call>",
)


def build_tiny(
    family: ModelFamily,
    path: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 1024,
    min_pixels: int = 56 * 56,
    max_pixels: int = 224 * 224,
    rope_theta: float = 1e6,
    head_dim: int = 16,
    hidden_size: int = 64,
    layers: int = 2,
    vision_hidden_size: int = 32,
    vision_depth: int = 2,
    words: tuple[str, ...] = (),
) -> Path:
    """Write a tiny checkpoint of ``family`` (model + processor) to ``path`` and return it.

    ``vocab_size`` is the BPE target; the model's vocabulary is the trained tokenizer's size
    (a small corpus may stop short of the target). ``min_pixels``/``max_pixels`` bound the
    resized image as in ``PatchRule``; with Qwen2-VL's 28-pixel merged patches the defaults map a
    320x240 screen to 54 tokens. ``rope_theta`` is the M-RoPE base: the real 1e6 turns the tiny
    head's (16 dims) width section by ~1e-4 rad per column, too little to tell image columns
    apart; a model meant to learn where things are on screen wants a small base (10). ``head_dim``
    is the language model's head size (vLLM's CPU attention needs at least 32);
    ``hidden_size``/``layers`` and ``vision_hidden_size``/``vision_depth`` size the two towers
    (vision heads of 16 dimensions). ``words`` become single tokens (``TinyModel.words``); the
    BPE target grows by ``WORD_VOCAB`` per word to make room for them beside the corpus's own.
    """
    path = Path(path)
    tokenizer = _train_tokenizer(vocab_size + WORD_VOCAB * len(set(words)), words)
    token_id = tokenizer.convert_tokens_to_ids
    heads = hidden_size // head_dim
    temporal = head_dim // 8  # the M-RoPE sections (temporal, height, width) sum to head_dim / 2
    height = (head_dim // 2 - temporal) // 2
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(heads // 2, min(heads, 2)),  # grouped, yet at least two for TP=2
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": float(rope_theta),
            "mrope_section": [temporal, height, head_dim // 2 - temporal - height],
        },
        bos_token_id=token_id("<|endoftext|>"),
        eos_token_id=token_id("<|im_end|>"),
        pad_token_id=token_id("<|endoftext|>"),
    )
    tokens = dict(
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
    )
    vision = dict(depth=vision_depth, hidden_size=vision_hidden_size, num_heads=vision_hidden_size // 16)
    config, processor = family.tiny_config(text, vision, tokens, tokenizer, CHAT_TEMPLATE, min_pixels, max_pixels)
    with torch.random.fork_rng():  # seed the weights without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = family.model_class(config)
    model.generation_config.eos_token_id = text["eos_token_id"]
    model.generation_config.pad_token_id = text["pad_token_id"]
    model.save_pretrained(path)
    _in_checkpoint_layout(family, path / "model.safetensors", model.state_dict())
    processor.save_pretrained(path)
    return path


def _in_checkpoint_layout(family: ModelFamily, file: Path, state: dict[str, torch.Tensor]) -> None:
    """Rewrite ``file``'s weights as the family's released checkpoints store them
    (``ModelFamily.checkpoint_tensor`` of the model's ``state``): ``save_pretrained`` of some
    transformers versions writes the in-memory layout, which transformers reads back but vLLM
    does not."""
    with safe_open(str(file), "pt") as handle:
        metadata = handle.metadata()
        weights = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    stored = {
        name: family.checkpoint_tensor(name, state[name]).contiguous() if name in state else value
        for name, value in weights.items()
    }
    if any(stored[name].shape != value.shape for name, value in weights.items()):
        save_file(stored, str(file), metadata=metadata)


WORD_VOCAB = 6
"""BPE merges budgeted per ``TinyModel.words`` entry: enough (measured on the desktop harness's
346 words) for every word variant and every coordinate the point grid writes to stay one token."""
WORD_REPEATS = 40
"""Lines per word in the corpus: frequent enough to be merged before rarer corpus pairs."""


def _train_tokenizer(vocab_size: int, words: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(words), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def _corpus(extra: tuple[str, ...] = ()) -> list[str]:
    """GUI-agent text: action words, numbers as coordinates, JSON tool calls, chat turns; then
    each ``extra`` word quoted and bare, as written and lower-cased."""
    words = _WORDS.split()
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
    coordinates = itertools.product(range(0, 400, 7), range(0, 300, 11))
    lines += [f"{x} {y}, {x}{y} [{x}, {y}] ({x},{y})" for x, y in coordinates]
    lines += [f"{verb} the {thing} button" for verb, thing in itertools.product(words[:12], words[12:40])]
    lines += list(_JSON_SNIPPETS) * 20
    lines += [f"<|im_start|>user\n{line}<|im_end|>\n<|im_start|>assistant\n" for line in lines[:200]]
    for word in sorted(set(extra)):
        lines += [f'"{word}" {word} "{word.lower()}" {word.lower()}'] * WORD_REPEATS
    return lines
