"""drag-slider: drag the named slider to a target value, within a tolerance, leaving the others."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import centred, decoys, place_window
from harnesses.desktop.tasks.base import Task
from harnesses.desktop.widgets import Label, Slider
from harnesses.desktop.words import SLIDERS

TITLES = ("Sound", "Display", "Mixer", "Adjust", "Controls")


class DragSlider(Task):
    name = "drag-slider"
    tolerance = 3
    """How far from the target value still counts: a pixel of a short track spans about one unit."""

    def build(self, rng: random.Random, distractors: int) -> str:
        m = self.scene.metrics
        labels = rng.sample(SLIDERS, 1 + decoys(rng, distractors, 0, 2))
        caption_w = max(m.text_w(label) for label in labels)
        value_w = m.text_w("100")
        room = self.scene.work.w - 2 * m.pad - caption_w - 3 * m.gap - value_w  # narrow screens get shorter tracks
        track_w = min(rng.randint(9, 13) * m.f, room)
        pitch = round(m.row * 1.3)
        w, h = caption_w + 2 * m.gap + track_w + m.gap + value_w, len(labels) * pitch
        window = place_window(rng, self.scene, rng.choice(TITLES), w, h)
        x, y = centred(window, w, h)
        self.sliders = []
        for i, label in enumerate(labels):
            top = y + i * pitch + (pitch - m.row) // 2
            window.add(Label(label, Rect(x, top, caption_w, m.row)))
            track = Rect(x + caption_w + 2 * m.gap, top, track_w, m.row)
            self.sliders.append(window.add(Slider(label, track, value=rng.randint(0, 100))))
        self.start = {slider: slider.value for slider in self.sliders}
        self.target = rng.choice(self.sliders)
        self.value = rng.choice([v for v in range(0, 101, 5) if abs(v - self.target.value) >= 20])
        return f"Drag the {self.target.label} slider to {self.value}."

    def _near(self, slider: Slider) -> bool:
        goal = self.value if slider is self.target else self.start[slider]
        return abs(slider.value - goal) <= self.tolerance

    def solved(self) -> bool:
        return all(self._near(slider) for slider in self.sliders)

    def oracle(self) -> Action:
        for slider in sorted(self.sliders, key=lambda s: s is self.target):  # put back moved decoys first
            if not self._near(slider):
                goal = self.value if slider is self.target else self.start[slider]
                cy = slider.rect.center[1]
                return Action.drag(slider.x_of(slider.value), cy, slider.x_of(goal), cy)
        return Action.done()
