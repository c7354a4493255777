"""Grounding demonstrations: "Click "<label>"." on a demonstrated screen, answered by a click on
the element of that label (``Observation.elements``).

A task that names what to click ("Choose "Save As" from the File menu.") needs a model that can
find a word on the screen. A pretrained VLM learnt that from grounding data; a model trained
from random weights learns it only from its task's demonstrations, where each screen teaches
one or two clicks. Every screen a demonstration passes shows several labelled elements, and each
is a one-turn sequence that teaches exactly that binding, at the cost of a short prompt.
"""

from __future__ import annotations

import random
from collections import Counter

from vlrl.harness import Action, Element
from vlrl.job.action_text import demo_answer, demo_reply
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.client import ContextImage
from vlrl.rollout.parsers import ScreenMap
from vlrl.rollout.trajectory import Trajectory

GOAL = 'Click "{label}".'


def grounding_trajectories(
    elements: tuple[Element, ...],
    image: ContextImage,
    *,
    count: int,
    rng: random.Random,
    trajectory_id: str,
    chat: ChatFormat,
    tokenizer,
    action_format: str,
    screen: ScreenMap,
    point_grid: int,
) -> list[Trajectory]:
    """Up to ``count`` one-turn trajectories on ``image``, one per element drawn from those whose
    label is unique on the screen and whose demonstrated click (after ``point_grid`` rounding)
    still lands inside it."""
    labels = Counter(e.label for e in elements)
    unique = [e for e in elements if labels[e.label] == 1]
    out: list[Trajectory] = []
    for element in rng.sample(unique, len(unique)):
        if len(out) == count:
            break
        try:
            reply, parsed = demo_reply(Action.click(*element.center), action_format, screen, grid=point_grid)
        except ValueError:  # UnwritableAction or ParseError: this format writes no clicks
            return out
        if not element.contains(parsed.x, parsed.y):
            continue
        trajectory = Trajectory(f"{trajectory_id}/ground{len(out)}")
        context = chat.context([ChatTurn(GOAL.format(label=element.label), (image.width, image.height))])
        trajectory.set_context(context, [image])
        trajectory.add_generated(demo_answer(reply, tokenizer, chat.stop_token_ids[0], f"{trajectory.trajectory_id}#0"))
        out.append(trajectory)
    return out
