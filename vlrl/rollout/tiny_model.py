"""A tiny Qwen2-VL (tokenizer, processor and random weights) built offline, for tests and demos.

Nothing is downloaded: a byte-level BPE tokenizer is trained on a small built-in corpus of
GUI-agent text, and the model is a randomly initialised ``Qwen2VLForConditionalGeneration`` of
~285K parameters with the real architecture (vision tower, patch merger, M-RoPE). The folder it
writes loads like any Qwen2-VL checkpoint (``from_pretrained``), so every code path that serves
or trains a real one runs on it in seconds on a CPU. Same ``seed``, same files.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
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

# Qwen2-VL's template, minus video: images become <|vision_start|><|image_pad|><|vision_end|> and
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


def build_tiny_qwen2vl(
    path: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 1024,
    min_pixels: int = 56 * 56,
    max_pixels: int = 224 * 224,
    rope_theta: float = 1e6,
) -> Path:
    """Write a tiny Qwen2-VL checkpoint (model + processor) to ``path`` and return it.

    ``vocab_size`` is the BPE target; the model's vocabulary is the trained tokenizer's size
    (a small corpus may stop short of the target). ``min_pixels``/``max_pixels`` bound the
    resized image as in ``PatchRule``; the defaults map a 320x240 screen to 54 tokens.
    ``rope_theta`` is the M-RoPE base: Qwen2-VL's 1e6 turns the tiny head's (16 dims) width
    section by ~1e-4 rad per column, too little to tell image columns apart; a model meant to
    learn where things are on screen wants a small base (10).
    """
    path = Path(path)
    tokenizer = _train_tokenizer(vocab_size)
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=CHAT_TEMPLATE,
    )
    token_id = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            # The M-RoPE sections (temporal, height, width) must sum to head_dim / 2 = 8.
            rope_parameters={"rope_type": "default", "rope_theta": float(rope_theta), "mrope_section": [2, 3, 3]},
            bos_token_id=token_id("<|endoftext|>"),
            eos_token_id=token_id("<|im_end|>"),
            pad_token_id=token_id("<|endoftext|>"),
        ),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2),
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
    )
    with torch.random.fork_rng():  # seed the weights without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def _train_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def _corpus() -> list[str]:
    """GUI-agent text: action words, numbers as coordinates, JSON tool calls, chat turns."""
    words = _WORDS.split()
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
    coordinates = itertools.product(range(0, 400, 7), range(0, 300, 11))
    lines += [f"{x} {y}, {x}{y} [{x}, {y}] ({x},{y})" for x, y in coordinates]
    lines += [f"{verb} the {thing} button" for verb, thing in itertools.product(words[:12], words[12:40])]
    lines += list(_JSON_SNIPPETS) * 20
    lines += [f"<|im_start|>user\n{line}<|im_end|>\n<|im_start|>assistant\n" for line in lines[:200]]
    return lines
