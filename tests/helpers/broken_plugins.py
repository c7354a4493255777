"""A harness that passes the construct-time rules but breaks the behaviour contract's 'order'."""

from transformers import Qwen2VLImageProcessor

from harnesses.desktop import DesktopHarness
from vlrl.models.qwen3_vl import Qwen3VL


class Endless(DesktopHarness):
    """Never terminates, not even on a ``fail`` action."""

    def step(self, action):
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, False, truncated, info


class WrongNorm(Qwen3VL):
    """A Qwen3-VL family whose tower plug-in normalises pixels with CLIP's mean and std instead of
    the checkpoint processor's 0.5: self-consistent, so only 'tower rows' can tell. It claims
    Qwen3-VL's checkpoints, so a test registers it over the built-in and puts that back."""

    def tower_encoder(self, model, processor):
        encoder = super().tower_encoder(model, processor)
        rule = encoder.config.patch_rule
        encoder.processor = Qwen2VLImageProcessor(
            patch_size=rule.patch_size, merge_size=rule.merge_size, min_pixels=rule.min_pixels, max_pixels=rule.max_pixels
        )
        return encoder
