"""Chat messages to prompt ids, and sampled ids back to text, with the model's own processor.

The server renders message-based requests with the processor's chat template, as vLLM does, then
expands each image's single ``<|image_pad|>`` to the image's token count from its size alone
(``PatchRule``), so a request whose images are all references needs no pixels to be templated.
Token-in requests skip this module: their ids are the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlrl.mm import patch_rule_of
from vlrl.rollout.server.wire import ApiError, ChatMessage, ImageInput


class ChatTemplate:
    def __init__(self, processor: Any) -> None:
        if not processor.chat_template:
            raise ValueError("the model's processor has no chat template; message-based requests need one")
        self._processor = processor
        self._tokenizer = processor.tokenizer
        self._rule = patch_rule_of(processor)
        self.image_pad = self._tokenizer.convert_tokens_to_ids(processor.image_token)

    def prompt_ids(self, messages: Sequence[ChatMessage], sizes: Sequence[tuple[int, int]]) -> np.ndarray:
        """int32 ids of the rendered chat plus the assistant's header; ``sizes`` are (width, height)."""
        return self.ids(self.render(messages), sizes)

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The chat as the template writes it, with the assistant's header; one pad per image."""
        conversation = [
            {
                "role": m.role,
                "content": [{"type": "image"} if isinstance(p, ImageInput) else {"type": "text", "text": p} for p in m.content],
            }
            for m in messages
        ]
        try:
            return self._processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        except Exception as error:  # a template raising on these messages is the request's fault
            raise ApiError(f"messages: the chat template failed on them ({error})", param="messages") from None

    def ids(self, text: str, sizes: Sequence[tuple[int, int]]) -> np.ndarray:
        """int32 ids of rendered ``text`` whose image pads, one per image, expand to each image's
        token count; ``sizes`` are (width, height) of those images, in order."""
        ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        pads = ids.count(self.image_pad)
        if pads != len(sizes):
            raise ApiError(
                f"messages: the rendered chat holds {pads} image placeholder(s) but {len(sizes)} image(s) were"
                " sent (text may not contain the image placeholder token)",
                param="messages",
            )
        counts = iter(self._rule.num_tokens(width, height) for width, height in sizes)
        out: list[int] = []
        for token in ids:
            out.extend([token] * next(counts) if token == self.image_pad else (token,))
        return np.asarray(out, dtype=np.int32)

    def stop_token_ids(self, stop: Sequence[str], *, param: str) -> tuple[int, ...]:
        """Each stop string as its single token id; a string of several tokens is refused."""
        out = []
        for i, text in enumerate(stop):
            ids = self._tokenizer.encode(text, add_special_tokens=False)
            if len(ids) != 1:
                where = f"{param}[{i}]" if len(stop) > 1 else param
                raise ApiError(
                    f"{where}: {text!r} is {len(ids)} tokens; stop strings must each be exactly one token of"
                    " this model's tokenizer (or send stop_token_ids)",
                    param=param,
                )
            out.extend(ids)
        return tuple(out)

    def text(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Each token on its own, as OpenAI's logprobs list them."""
        return [self._tokenizer.decode([int(i)]) for i in ids]
