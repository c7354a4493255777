"""An episode's screenshots as its prompt shows them: the last ``history_images`` whole, the
older ones as ``AgentBehaviour.older_images`` says.

A long GUI episode keeping every screenshot whole pays for all of them on every turn: fifty
1080p screenshots are 130,000 image tokens under Qwen2-VL's default rule. Keeping the last few
whole and the rest shrunk to a few dozen tokens each, or replaced by a line of text, bounds the
prompt. The shrunk size comes from the model's patch rule (``mm.downscale``), so the chat's
placeholder count is exactly what the encoder produces for the shrunk pixels. Each shrunk image
is made once and keeps its content hash, so it travels to the engine once like any other.
"""

from __future__ import annotations

import numpy as np

from vlrl.config import AgentBehaviour, ConfigError
from vlrl.mm import PatchRule
from vlrl.mm.downscale import downscale, fit_size, min_tokens
from vlrl.rollout.chat import Shown
from vlrl.rollout.client import ContextImage

OLDER_STUB = "(an earlier screenshot, not shown)"
"""The line an older screenshot becomes under ``older_images='stub'``."""


class ScreenHistory:
    def __init__(self, agent: AgentBehaviour, rule: PatchRule) -> None:
        self._agent = agent
        self._rule = rule
        self.images: list[ContextImage] = []
        """Every turn's screenshot, whole."""
        self._small: dict[int, ContextImage] = {}

    def add(self, screenshot: np.ndarray, known_hash: str | None = None) -> ContextImage:
        """The screenshot of the next turn; ``known_hash``: its content hash where the caller has
        it (``EnvSession.content_hash``), so a 1080p screen is not hashed again (1 ms)."""
        image = ContextImage(known_hash, screenshot) if known_hash is not None else ContextImage.of(screenshot)
        self.images.append(image)
        return image

    def shown(self) -> tuple[list[Shown], list[ContextImage]]:
        """What each turn's message shows (``ChatFormat.context``'s ``shown``) and the images of
        the prompt, in order."""
        keep = self._agent.history_images
        first_whole = 0 if keep is None else max(0, len(self.images) - keep)
        shown: list[Shown] = []
        images: list[ContextImage] = []
        for index, image in enumerate(self.images):
            if index < first_whole and self._agent.older_images != "downscale":
                shown.append(OLDER_STUB if self._agent.older_images == "stub" else None)
                continue
            if index < first_whole:
                image = self._shrunk(index)
            shown.append((image.width, image.height))
            images.append(image)
        return shown, images

    def _shrunk(self, index: int) -> ContextImage:
        if index not in self._small:
            whole = self.images[index]
            size = fit_size(self._rule, whole.width, whole.height, self._agent.older_image_tokens)
            self._small[index] = ContextImage.of(downscale(whole.pixels, size))
        return self._small[index]


def check_older_image_tokens(agent: AgentBehaviour, rule: PatchRule, width: int, height: int, field: str) -> None:
    """Refuse a downscale budget no screenshot of this size can meet under the model's rule."""
    if agent.older_images != "downscale" or agent.history_images is None:
        return
    least = min_tokens(rule, width, height)
    if agent.older_image_tokens < least:
        raise ConfigError(
            field,
            agent.older_image_tokens,
            f"at least {least}: the fewest tokens a {width}x{height} screenshot takes under the model's patch rule"
            f" (min_pixels={rule.min_pixels})",
        )
