"""Can a tiny model build copy a value out of the goal? A text-only probe, in minutes on a CPU.

    python examples/probe_copying.py                                   # tiny Qwen2-VL, rope_theta 10, lr 1e-2
    python examples/probe_copying.py --family qwen3_vl --rope-theta 100 --lr 1e-3

Form filling fails when the policy types a name it memorised instead of the one the goal names
(``docs/lab/training-runs.md``, "what limits form filling"). This probe isolates that skill
from the rest of the task: the prompt is a fill-form goal, a stretch of numbers standing in for the screenshots
and earlier turns, and the field to fill; the answer is the ``type`` reply with that field's
value. It trains the tiny model's language tower on these sequences (likelihood of the answer
only, batches of 16, AdamW) and prints, as JSON, the share of held-out name pairs whose value it
then copies exactly (greedy). Names of held-out pairs never occur together in training, so a
policy that memorises cannot pass.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from harnesses.desktop.words import CONSENTS, DOMAINS, FIRST_NAMES, LAST_NAMES, vocabulary
from vlrl.models import TinyModel

HELD_OUT_PAIRS = 40
"""Name pairs (of 168) kept out of training."""
BATCH = 16


def sequence(pair: tuple[str, str], rng: random.Random, filler: int) -> tuple[str, str, str]:
    """(prompt, answer, value): a goal naming a name and an email, filler, the field to fill."""
    first, last = pair
    name, email = f"{first} {last}", f"{first.lower()}@{rng.choice(DOMAINS)}"
    goal = f'Fill in the form: name "{name}", email "{email}", tick only "{rng.choice(CONSENTS)}", then click Submit.'
    pad = " ".join(str(rng.randrange(300)) for _ in range(rng.randrange(filler // 2, filler)))
    is_name = rng.random() < 0.5
    field, value = ("Name", name) if is_name else ("Email", email)
    prompt = f"<|im_start|>user\n{goal}\n{pad} {field}<|im_end|>\n<|im_start|>assistant\n"
    return prompt, '{"action": "type", "text": "' + value + '"}<|im_end|>', value


def split_pairs(rng: random.Random) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(held out, train): every (first, last) name pair in one or the other."""
    pairs = [(first, last) for first in FIRST_NAMES for last in LAST_NAMES]
    rng.shuffle(pairs)
    return pairs[:HELD_OUT_PAIRS], pairs[HELD_OUT_PAIRS:]


def probe(tiny: TinyModel, *, lr: float, steps: int, filler: int, evaluate: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = tiny.build(Path(folder) / "model")
        model = AutoModelForImageTextToText.from_pretrained(path)
        tokenizer = AutoProcessor.from_pretrained(path).tokenizer
    rng = random.Random(seed)
    held_out, train = split_pairs(rng)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    start = time.monotonic()
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        for prompt, answer, _ in (sequence(rng.choice(train), rng, filler) for _ in range(BATCH)):
            prompt_ids, answer_ids = tokenizer(prompt)["input_ids"], tokenizer(answer)["input_ids"]
            labels = [-100] * len(prompt_ids) + answer_ids
            out = model(input_ids=torch.tensor([prompt_ids + answer_ids]), labels=torch.tensor([labels]))
            (out.loss / BATCH).backward()
        optimizer.step()
    model.eval()
    test_rng, copied = random.Random(123), 0
    with torch.no_grad():
        for i in range(evaluate):
            prompt, _, value = sequence(held_out[i % len(held_out)], test_rng, filler)
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            out = model.generate(input_ids=ids, max_new_tokens=24, do_sample=False)
            copied += f'"text": "{value}"' in tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    return {
        "family": tiny.family,
        "rope_theta": tiny.rope_theta,
        "lr": lr,
        "steps": steps,
        "held_out": evaluate,
        "copied": copied / evaluate if evaluate else 0.0,
        "wall_s": round(time.monotonic() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="qwen2_vl", help="tiny model family (TinyModel.family)")
    parser.add_argument("--rope-theta", type=float, default=10.0, help="M-RoPE base (TinyModel.rope_theta)")
    parser.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate")
    parser.add_argument("--steps", type=int, default=400, help="optimizer steps of 16 sequences")
    parser.add_argument("--filler", type=int, default=60, help="most filler tokens between goal and field")
    parser.add_argument("--evaluate", type=int, default=60, help="held-out sequences to score")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tiny = TinyModel(family=args.family, rope_theta=args.rope_theta, words=vocabulary())
    tiny.check()
    print(json.dumps(probe(tiny, lr=args.lr, steps=args.steps, filler=args.filler, evaluate=args.evaluate, seed=args.seed)))


if __name__ == "__main__":
    main()
