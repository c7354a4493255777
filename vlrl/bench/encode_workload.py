"""The encode benchmark's workload: GUI-agent trajectories as ``SeqMeta``, placed on a layout.

The workload is a GRPO step of GUI-agent trajectories. A trajectory runs on one device, drawn
from phones (1080x2400, 1440x3200), a browser viewport (1280x720), laptops (1366x768, 1440x900)
and desktops (1920x1080, 2560x1440), and holds ``1 + Poisson(3.5)`` screenshots (at most 10),
one per turn, between a prompt and per-turn text. Token counts follow UI-TARS's processor bounds
(``max_pixels = 16384*28*28``: screens keep their native resolution, so a 1440p screenshot is
4641 tokens and a laptop one 1323); the encoder cost is ``ViTCost`` of the Qwen2-VL-7B tower
(32 full-attention layers of width 1280), so the costliest screenshot is ~12x the cheapest.
Costs come in seven values, one per screen, which bounds how evenly few images can be split.
Sequences are packed by ``MicroBatchPlanner`` (65536-token micro-batches) and placed on
DP x CP x TP ranks by ``step_images``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from encoders.qwen2vl import ViTCost
from vlrl.mm import PatchRule
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.records import MMItemMeta, SeqMeta, image_store_key
from vlrl.train.step_images import StepImages, step_images

SCREENS: dict[str, tuple[tuple[int, int], float]] = {
    "phone": ((1080, 2400), 0.20),  # AndroidWorld's emulator
    "phone_qhd": ((1440, 3200), 0.05),
    "web": ((1280, 720), 0.15),  # a browser viewport (WebArena, Mind2Web)
    "laptop": ((1366, 768), 0.10),
    "laptop_hd": ((1440, 900), 0.10),
    "desktop_1080p": ((1920, 1080), 0.25),  # OSWorld
    "desktop_1440p": ((2560, 1440), 0.15),
}
"""Device name -> ((width, height), share of trajectories)."""

RULE = PatchRule(min_pixels=100 * 28 * 28, max_pixels=16384 * 28 * 28)
"""UI-TARS's processor bounds: GUI screenshots keep their native resolution."""

VIT_7B = ViTCost(
    depth=32, embed_dim=1280, mlp_ratio=4, hidden_size=3584, patch_size=14, merge_size=2, temporal_patch_size=2
)
"""Forward FLOPs of the Qwen2-VL-7B vision tower."""


def vit_7b_cost(item: MMItemMeta) -> float:
    """The planner's cost of a screenshot: ``VIT_7B`` FLOPs of its patch grid."""
    return VIT_7B(item.grid_thw)


WORLD4_LAYOUTS = ((1, 2, 2), (2, 2, 1))
"""The layouts (DP, CP, TP) the top-level figures are taken over; also the wall-time world."""


@dataclass(frozen=True, slots=True)
class Workload:
    """How trajectories become ``SeqMeta``: screen scale, patch rule, text lengths, budget."""

    rule: PatchRule = RULE
    scale: int = 1
    """Screens are ``width // scale`` x ``height // scale`` pixels."""
    prompt_tokens: int = 400
    """System prompt and task before the first screenshot."""
    turn_text: tuple[int, int] = (40, 200)
    """Observation + action text tokens after each screenshot, drawn uniformly in ``[lo, hi)``."""
    budget: int = 65536
    """``max_tokens_per_micro_batch`` of the micro-batch planner."""
    max_turns: int = 10


SCREEN_WORKLOAD = Workload()
"""Native screen resolutions under UI-TARS's bounds: the metadata figures' workload."""

WALL_WORKLOAD = Workload(
    rule=PatchRule(min_pixels=4 * 28 * 28, max_pixels=16384 * 28 * 28 // 36),
    scale=6,
    prompt_tokens=32,
    turn_text=(4, 24),
    budget=2048,
)
"""The same trajectories at 1/6 of the screen side (40..135 tokens per screenshot) for the CPU world."""


@dataclass(frozen=True, slots=True)
class Trajectory:
    screen: str
    images: tuple[int, ...]
    """Image ids, one per turn; a shared first screenshot has the same id in every group member."""
    group: int
    member: int


def draw_trajectories(
    n_images: int, seed: int, *, group_size: int = 1, share_first: bool = False, max_turns: int = 10
) -> list[Trajectory]:
    """Trajectories holding ``n_images`` image occurrences in all (the last one cut short), in
    groups of ``group_size`` on one device; with ``share_first`` a group's members start from
    the same screenshot."""
    rng = np.random.default_rng(seed)
    names = list(SCREENS)
    shares = np.array([SCREENS[n][1] for n in names])
    ids = iter(range(1 << 62))
    out: list[Trajectory] = []
    left, group = n_images, 0
    while left > 0:
        screen = names[int(rng.choice(len(names), p=shares / shares.sum()))]
        first = next(ids)  # the task's opening screen
        for member in range(group_size):
            turns = min(1 + int(rng.poisson(3.5)), max_turns, left)
            opening = first if share_first or member == 0 else next(ids)
            images = (opening, *(next(ids) for _ in range(turns - 1)))
            out.append(Trajectory(screen, images, group, member))
            left -= turns
            if left <= 0:
                break
        group += 1
    return out


def fake_item(image_id: int, screen: str, workload: Workload, salt: int = 0) -> MMItemMeta:
    """Metadata of a screenshot without pixels: the hash names the image id."""
    width, height = (side // workload.scale for side in SCREENS[screen][0])
    content_hash = f"{salt:08x}{image_id:024x}"
    meta = MMItemMeta(
        content_hash=content_hash, width=width, height=height, nbytes=width * height * 3,
        store_key=image_store_key(content_hash),
    )  # fmt: skip
    return meta.with_patch_rule(workload.rule)


def build_metas(
    trajectories: Sequence[Trajectory], workload: Workload, describe: Callable[[int, str], MMItemMeta], seed: int
) -> list[SeqMeta]:
    """``SeqMeta`` of each trajectory: prompt, then per turn a screenshot's tokens and text."""
    rng = np.random.default_rng(seed + 7919)
    lo, hi = workload.turn_text
    metas = []
    for i, traj in enumerate(trajectories):
        items = [describe(image_id, traj.screen) for image_id in traj.images]
        at, offsets, contexts, response = workload.prompt_tokens, [], [], 0
        for index, item in enumerate(items):
            offsets.append((at, index))
            text = int(rng.integers(lo, hi))
            at += item.num_tokens + text // 2
            contexts.append(at)
            response += text - text // 2
            at += text - text // 2
        metas.append(SeqMeta(
            key=f"bench/encode/{i}", group_id=f"g{traj.group}", source=traj.screen, sample_index=traj.member,
            reward=0.0, success=False, finish="done", turns=len(items), num_tokens=at,
            num_response_tokens=response, context_lengths=tuple(contexts), policy_version=0,
            images=tuple(items), image_offsets=tuple(offsets),
        ))  # fmt: skip
    return metas


def place(metas: Sequence[SeqMeta], layout: Layout, workload: Workload) -> StepImages:
    """The step's micro-batch plan for ``layout.dp`` ranks and where its image rows land."""
    plan = MicroBatchPlanner.Config(max_tokens_per_micro_batch=workload.budget).build().plan(metas, layout.dp)
    return step_images(plan, layout, {m.key: m for m in metas})
