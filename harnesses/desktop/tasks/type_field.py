"""type-field: focus the named text field among a few and type the given text into it."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import centred, decoys, place_window
from harnesses.desktop.tasks.base import Task, fill
from harnesses.desktop.widgets import Label, TextField
from harnesses.desktop.words import APPS, FIELDS, VALUES


class TypeField(Task):
    name = "type-field"

    def build(self, rng: random.Random, distractors: int) -> str:
        m = self.scene.metrics
        labels = rng.sample(FIELDS, 1 + decoys(rng, distractors, 0, 3))
        self.value = rng.choice(VALUES) + (str(rng.randint(1, 99)) if rng.random() < 0.3 else "")
        caption_w = max(m.text_w(f"{label}:") for label in labels)
        field_w = max(10 * m.f, m.text_w(self.value) + 2 * m.pad + m.f)
        w, h = caption_w + m.gap + field_w, len(labels) * (m.row + m.gap) - m.gap
        window = place_window(rng, self.scene, rng.choice(APPS), w, h)
        x, y = centred(window, w, h)
        self.fields = []
        for i, label in enumerate(labels):
            top = y + i * (m.row + m.gap)
            window.add(Label(f"{label}:", Rect(x, top, caption_w, m.row)))
            self.fields.append(window.add(TextField(label, Rect(x + caption_w + m.gap, top, field_w, m.row))))
        self.target = rng.choice(self.fields)
        return f'Type "{self.value}" into the {self.target.label} field.'

    def solved(self) -> bool:
        return self.target.text == self.value and not any(f.text for f in self.fields if f is not self.target)

    def oracle(self) -> Action:
        for field in self.fields:
            step = fill(self.scene, field, self.value if field is self.target else "")
            if step is not None:
                return step
        return Action.done()
