"""A screenshot agent that imports nothing of vlrl: only ``openai`` and the standard library.

It plays its own little GUI task: a 160x120 screen with one coloured button at a random place
(the seed draws it); the goal names the colour; the agent sends the screenshot to the model
through the OpenAI chat API, reads ``click(x, y)`` from the reply, and gets up to three turns,
each with a fresh screenshot (a cross where it last clicked) and the whole conversation so far.
It prints its reward as the last line: ``{"reward": 1, "success": true}`` for a hit.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python click_agent.py --seed 3
    python click_agent.py --keep-screens 1     # send only the newest screenshot (memory rewrite)

Trained by vlrl unchanged: ``vlrl train examples/train_own_agent.py`` starts it per episode with
the endpoint in OPENAI_BASE_URL and the episode in VLRL_SEED (docs/train-your-agent.md).
"""

import argparse
import base64
import json
import os
import random
import re
import struct
import zlib

from openai import OpenAI

WIDTH, HEIGHT = 160, 120
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 80, 220), "yellow": (230, 200, 40)}
ACTION = re.compile(r"click\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def png_data_url(pixels):
    """``pixels``: rows of (r, g, b); a PNG written by hand, as a data URL."""
    raw = b"".join(b"\x00" + bytes(channel for pixel in row for channel in pixel) for row in pixels)

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", len(pixels[0]), len(pixels), 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(data).decode()


class ClickTask:
    def __init__(self, seed):
        rng = random.Random(seed)
        self.colour = rng.choice(sorted(COLOURS))
        self.w, self.h = 40, 20
        self.x, self.y = rng.randrange(0, WIDTH - self.w), rng.randrange(0, HEIGHT - self.h)

    def hit(self, x, y):
        return self.x <= x < self.x + self.w and self.y <= y < self.y + self.h

    def screenshot(self, last_click=None):
        pixels = [[(200, 200, 200)] * WIDTH for _ in range(HEIGHT)]
        for row in range(self.y, self.y + self.h):
            pixels[row][self.x : self.x + self.w] = [COLOURS[self.colour]] * self.w
        if last_click is not None:
            x, y = last_click
            for d in range(-3, 4):
                if 0 <= x + d < WIDTH and 0 <= y < HEIGHT:
                    pixels[y][x + d] = (0, 0, 0)
                if 0 <= y + d < HEIGHT and 0 <= x < WIDTH:
                    pixels[y + d][x] = (0, 0, 0)
        return png_data_url(pixels)


def drop_old_screens(messages, keep):
    """The conversation with only the newest ``keep`` screenshots (older ones become a note)."""
    seen = 0
    out = []
    for message in reversed(messages):
        if isinstance(message["content"], list):
            parts = []
            for part in message["content"]:
                if part["type"] == "image_url":
                    seen += 1
                    if seen > keep:
                        part = {"type": "text", "text": "(an earlier screenshot)"}
                parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return out[::-1]


def play(seed, turns=3, keep_screens=None):
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
    model = os.environ.get("VLRL_MODEL", "policy")
    task = ClickTask(seed)
    messages = [{"role": "system", "content": "You are a GUI agent. Answer with one action: click(x, y)."}]
    note, click = f"Click the {task.colour} button.", None
    for _ in range(turns):
        screen = {"type": "image_url", "image_url": {"url": task.screenshot(click)}}
        messages.append({"role": "user", "content": [screen, {"type": "text", "text": note}]})
        sent = messages if keep_screens is None else drop_old_screens(messages, keep_screens)
        reply = client.chat.completions.create(model=model, messages=sent, max_tokens=24).choices[0].message.content
        messages.append({"role": "assistant", "content": reply or ""})
        match = ACTION.search(reply or "")
        if match is None:
            note = "Invalid action; answer click(x, y)."
            continue
        click = (min(int(match[1]), WIDTH - 1), min(int(match[2]), HEIGHT - 1))
        if task.hit(*click):
            return 1.0
        note = f"You missed the {task.colour} button."
    return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=int(os.environ.get("VLRL_SEED", "0")))
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--keep-screens", type=int, default=None)
    args = parser.parse_args()
    reward = play(args.seed, args.turns, args.keep_screens)
    print(json.dumps({"reward": reward, "success": reward > 0}))


if __name__ == "__main__":
    main()
