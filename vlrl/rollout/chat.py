"""Token ids of a Qwen2-VL-style multi-turn chat, built segment by segment.

The loop keeps the exact ids the policy sampled: answers go back into the context as ids, only
user text is tokenized, and generated text is decoded solely to parse the action. An image becomes
``<|vision_start|>`` + ``<|image_pad|>`` x (its token count from the patch rule) + ``<|vision_end|>``,
so the count comes from image metadata, never from pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlrl.mm import PatchRule

PROMPT_TEMPLATES = {
    "gui-agent": (
        "You are a GUI agent operating a computer from screenshots. Each turn you see the screen "
        "and answer with exactly one action.\n{action_format}"
    ),
    "gui-agent-short": "You are a GUI agent. Answer with one action.",
}
"""System prompts by template name; ``{action_format}`` receives the parser's grammar. The short
one leaves the grammar out: for a policy that learns the action format from demonstrations, where
the grammar would be most of every sequence's tokens."""

Shown = tuple[int, int] | str | None
"""What a turn's message shows of its screenshot: it at this size, a line of text, or nothing."""

SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>")


@dataclass(frozen=True, slots=True)
class Segment:
    """Prompt ids and where their images' placeholders start (offsets within ``ids``)."""

    ids: list[int]
    image_offsets: list[int]


@dataclass(slots=True)
class ChatTurn:
    """One user turn (its text and screenshot size) and the ids the policy answered, if any yet."""

    text: str
    image_size: tuple[int, int]
    answer: list[int] | None = None
    answer_stopped: bool = True
    """Whether the answer ended with a stop token (else the chat closes it before the next turn)."""


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
        self._head = self._text("<|im_start|>system\n") + self._encode(
            PROMPT_TEMPLATES[template].format(action_format=action_format)
        ) + [self.im_end]

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return (self.im_end,)

    def context(self, turns: list[ChatTurn], shown: Sequence[Shown] | None = None) -> Segment:
        """The whole prompt: the system message, then every turn's user message and answer.

        ``shown``: per turn, the size of the screenshot its message shows, a line of text in its
        place, or None for neither (``rollout.screen_history``); None: every turn's own
        screenshot. Answers are the policy's own ids, never re-tokenized text.
        """
        ids = list(self._head)
        offsets = []
        for index, turn in enumerate(turns):
            previous = turns[index - 1] if index else None
            if previous is not None and not previous.answer_stopped:
                ids.append(self.im_end)
            ids += self._text("\n<|im_start|>user\n")
            screen = turn.image_size if shown is None else shown[index]
            if isinstance(screen, tuple):
                offsets.append(len(ids) + 1)
                tokens = self._rule.num_tokens(*screen)
                ids += [self.vision_start] + [self.image_pad] * tokens + [self.vision_end]
            elif isinstance(screen, str):
                ids += self._encode(screen + "\n")
            ids += self._encode(turn.text) + [self.im_end] + self._text("\n<|im_start|>assistant\n")
            if turn.answer is not None:
                ids += turn.answer
        return Segment(ids, offsets)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

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
