"""Token ids of a Qwen2-VL-style multi-turn chat, built segment by segment.

The loop keeps the exact ids the policy sampled; only new prompt text is ever tokenized, and
generated text is decoded solely to parse the action. An image becomes
``<|vision_start|>`` + ``<|image_pad|>`` x (its token count from the patch rule) + ``<|vision_end|>``,
so the count comes from image metadata, never from pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlrl.mm import PatchRule

PROMPT_TEMPLATES = {
    "gui-agent": (
        "You are a GUI agent operating a computer from screenshots. Each turn you see the screen "
        "and answer with exactly one action.\n{action_format}"
    ),
}
"""System prompts by template name; ``{action_format}`` receives the parser's grammar."""

SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>")


@dataclass(frozen=True, slots=True)
class Segment:
    """New prompt ids and where their images' placeholders start (offsets within ``ids``)."""

    ids: list[int]
    image_offsets: list[int]


class ChatFormat:
    def __init__(self, tokenizer: Any, patch_rule: PatchRule, template: str, action_format: str) -> None:
        if template not in PROMPT_TEMPLATES:
            raise ValueError(f"prompt template {template!r} is unknown; expected one of {sorted(PROMPT_TEMPLATES)}")
        self._tokenizer = tokenizer
        self._rule = patch_rule
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
        unknown = [t for t, i in ids.items() if i is None or i == tokenizer.unk_token_id]
        if unknown:
            raise ValueError(f"tokenizer lacks the chat special tokens {unknown}")
        self.im_start, self.im_end = ids["<|im_start|>"], ids["<|im_end|>"]
        self.vision_start, self.vision_end, self.image_pad = (
            ids["<|vision_start|>"], ids["<|vision_end|>"], ids["<|image_pad|>"]
        )
        self._system = PROMPT_TEMPLATES[template].format(action_format=action_format)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return (self.im_end,)

    def first_turn(self, goal: str, image_size: tuple[int, int]) -> Segment:
        head = self._text("<|im_start|>system\n") + self._encode(self._system) + [self.im_end]
        head += self._text("\n<|im_start|>user\n")
        return self._user_body(head, goal, image_size)

    def next_turn(self, text: str, image_size: tuple[int, int], *, previous_ended: bool) -> Segment:
        """The user turn after a policy answer; closes the answer if it was cut by the length limit."""
        head = ([] if previous_ended else [self.im_end]) + self._text("\n<|im_start|>user\n")
        return self._user_body(head, text, image_size)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def _user_body(self, head: list[int], text: str, image_size: tuple[int, int]) -> Segment:
        offset = len(head) + 1
        tokens = self._rule.num_tokens(*image_size)
        body = [self.vision_start] + [self.image_pad] * tokens + [self.vision_end]
        tail = self._encode(text) + [self.im_end] + self._text("\n<|im_start|>assistant\n")
        return Segment(head + body + tail, [offset])

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False)) if text else []

    def _text(self, text: str) -> list[int]:
        """Text that contains chat special tokens, split so they map to their single ids."""
        out: list[int] = []
        for piece in _split_specials(text):
            out += [self._tokenizer.convert_tokens_to_ids(piece)] if piece in SPECIAL_TOKENS else self._encode(piece)
        return out


def _split_specials(text: str) -> list[str]:
    pieces, rest = [], text
    while rest:
        hits = [(rest.find(t), t) for t in SPECIAL_TOKENS if t in rest]
        if not hits:
            pieces.append(rest)
            break
        index, token = min(hits)
        if index:
            pieces.append(rest[:index])
        pieces.append(token)
        rest = rest[index + len(token) :]
    return pieces
