"""Checkpoint folders made by transformers' own classes, not by ``vlrl.models.tiny``: what a user
hands ``vlrl serve --model`` or ``model_path=`` after ``save_pretrained`` of a Qwen2.5-VL or
Qwen3-VL model of their own.

Each folder holds a random tiny model of the family's transformers class, the family's own
processor class over a byte-level BPE tokenizer trained here on a few lines, and a chat template
in the family's shape (Qwen2.5-VL's adds the default system turn; Qwen3-VL's does not). Nothing is
downloaded and nothing comes from vlrl's tiny builder, so a test on these folders fails where vlrl
leans on something only its own builder writes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

FAMILIES = ("qwen2_5_vl", "qwen3_vl")
"""Families ``build_hf_checkpoint`` writes, by their ``model_type``."""

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

MIN_PIXELS, MAX_PIXELS = 56 * 56, 224 * 224

# Qwen2-VL / Qwen2.5-VL's released template, image and text parts (video and vision ids dropped):
# a default system turn, each image as <|vision_start|><|image_pad|><|vision_end|>.
QWEN2_5_VL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3-VL-Instruct's released template without tools and reasoning: no default system turn, a
# system message's text parts joined, images rendered as in Qwen2.5-VL.
QWEN3_VL_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages[0].content is string %}{{- messages[0].content }}"
    "{%- else %}{%- for content in messages[0].content %}"
    "{%- if 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\n' }}"
    "{%- if message.content is string %}{{- message.content }}"
    "{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

_CORPUS = (
    "You are a helpful assistant.",
    "click the OK button, then type hello world and press enter",
    '{"name": "computer", "arguments": {"action": "click", "coordinate": [120, 45]}}',
    "<tool_call>\n{\"action\": \"left_click\", \"coordinate\": [160, 120]}\n</tool_call>",
    "click(start_box='(100,200)') scroll down drag Cancel Submit Next Back 0 1 2 3 4 5 6 7 8 9",
)


def build_hf_checkpoint(family: str, path: str | Path, *, seed: int = 0) -> Path:
    """Write a random tiny ``family`` checkpoint (``qwen2_5_vl`` or ``qwen3_vl``) to ``path``
    with transformers' own model, config and processor classes; return ``path``."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: expected one of {FAMILIES}")
    path = Path(path)
    template = QWEN2_5_VL_TEMPLATE if family == "qwen2_5_vl" else QWEN3_VL_TEMPLATE
    tokenizer = _tokenizer(template)
    token = tokenizer.convert_tokens_to_ids
    rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}  # sums to head_dim / 2
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=token("<|endoftext|>"),
        eos_token_id=token("<|im_end|>"),
        pad_token_id=token("<|endoftext|>"),
    )
    ids = dict(
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
    )
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    if family == "qwen2_5_vl":
        config = Qwen2_5_VLConfig(
            text_config={**text, "rope_parameters": rope},
            vision_config={**vision, "window_size": 56, "fullatt_block_indexes": [1]},
            **ids,
        )
        images = Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
        processor = Qwen2_5_VLProcessor(
            image_processor=images, tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(), chat_template=template
        )
        model_class = Qwen2_5_VLForConditionalGeneration
    else:
        config = Qwen3VLConfig(
            text_config={**text, "head_dim": 16, "rope_parameters": {**rope, "mrope_interleaved": True}},
            vision_config={**vision, "deepstack_visual_indexes": [0], "patch_size": 16, "num_position_embeddings": 64},
            **ids,
        )
        # As Qwen3-VL's preprocessor_config.json: the bounds as ``size``, pixels normalised to [-1, 1].
        images = Qwen2VLImageProcessor(
            patch_size=16,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
            size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        )
        processor = Qwen3VLProcessor(
            image_processor=images, tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(), chat_template=template
        )
        model_class = Qwen3VLForConditionalGeneration
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.eos_token_id = text["eos_token_id"]
    model.generation_config.pad_token_id = text["pad_token_id"]
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def _tokenizer(chat_template: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE over the Qwen special tokens, trained on ``_CORPUS``."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
        model_max_length=4096,
    )
