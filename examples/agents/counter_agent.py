"""A multi-turn screenshot agent that imports nothing of vlrl: only ``openai``, the standard
library and Pillow.

Its own little task: a 160x120 screen reads "NOW n / GOAL g", with a green "+" and a red "-"
button placed by the seed; the goal is 2 or 3 clicks away. Each turn the agent sends the
screenshot (and the whole conversation so far) through the OpenAI chat API, reads
``click(x, y)`` from the reply, and clicks; it has 4 turns to make NOW equal GOAL. It prints its
reward last: ``{"reward": 1, "success": true}`` when it did.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python counter_agent.py --seed 3

``counter_teacher.py`` is a scripted policy for it in a few lines; ``vlrl train
examples/train_own_agent.py:counter`` warm-starts a policy on this program's runs against that
teacher, then trains it with RL (docs/train-your-agent.md).
"""

import argparse
import base64
import io
import json
import os
import random
import re

from openai import OpenAI
from PIL import Image, ImageDraw

WIDTH, HEIGHT = 160, 120
BUTTON_W, BUTTON_H = 42, 28
TURNS = 4
ACTION = re.compile(r"click\(\s*(\d+)\s*,\s*(\d+)\s*\)")


class Counter:
    def __init__(self, seed):
        rng = random.Random(seed)
        self.now = rng.randrange(3, 7)
        self.goal = self.now + rng.choice([-1, 1]) * rng.choice([2, 3])
        while True:  # two buttons that do not overlap, below the text
            plus = (rng.randrange(0, WIDTH - BUTTON_W), rng.randrange(24, HEIGHT - BUTTON_H))
            minus = (rng.randrange(0, WIDTH - BUTTON_W), rng.randrange(24, HEIGHT - BUTTON_H))
            if abs(plus[0] - minus[0]) >= BUTTON_W or abs(plus[1] - minus[1]) >= BUTTON_H:
                break
        self.buttons = {"+": plus, "-": minus}

    def button_at(self, x, y):
        for label, (left, top) in self.buttons.items():
            if left <= x < left + BUTTON_W and top <= y < top + BUTTON_H:
                return label
        return None

    def click(self, x, y):
        label = self.button_at(x, y)
        self.now += {"+": 1, "-": -1}.get(label, 0)

    def screenshot(self):
        image = Image.new("RGB", (WIDTH, HEIGHT), (235, 235, 235))
        draw = ImageDraw.Draw(image)
        draw.text((6, 6), f"NOW {self.now} / GOAL {self.goal}", fill=(0, 0, 0))
        for label, colour in (("+", (40, 170, 60)), ("-", (210, 50, 50))):
            left, top = self.buttons[label]
            draw.rectangle([left, top, left + BUTTON_W - 1, top + BUTTON_H - 1], fill=colour)
            draw.text((left + BUTTON_W // 2 - 3, top + BUTTON_H // 2 - 6), label, fill=(255, 255, 255))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def play(seed):
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
    model = os.environ.get("VLRL_MODEL", "policy")
    game = Counter(seed)
    messages = [{"role": "system", "content": "You are a GUI agent. Answer with one action: click(x, y)."}]
    note = "Click + or - until NOW equals GOAL."
    for _ in range(TURNS):
        screen = {"type": "image_url", "image_url": {"url": game.screenshot()}}
        messages.append({"role": "user", "content": [screen, {"type": "text", "text": note}]})
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=24).choices[0].message.content
        messages.append({"role": "assistant", "content": reply or ""})
        match = ACTION.search(reply or "")
        if match is None:
            note = "Invalid action; answer click(x, y)."
            continue
        game.click(int(match[1]), int(match[2]))
        if game.now == game.goal:
            return 1.0
        note = "Not there yet."
    return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=int(os.environ.get("VLRL_SEED", "0")))
    args = parser.parse_args()
    reward = play(args.seed)
    print(json.dumps({"reward": reward, "success": reward > 0}))


if __name__ == "__main__":
    main()
