"""Held-out evaluation: the policy's success on task seeds no training group or demonstration uses.

Evaluation episodes are ordinary Agent Loops on the Harness Pool (same engines, same store),
sampled at ``temperature`` (0: greedy), on seeds ``seed, seed + 1, ...`` of every source. Chance
level and the other baselines are measured with scripted policies (``baselines``). A few episodes
are drawn as annotated screenshots (``annotate``): each turn's screen with a marker where the
policy clicked, read back from the store (the decoded reply, parsed by the source's parser),
before the evaluation's keys are deleted.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from vlrl.config import ConfigError, DataSource, Ge
from vlrl.harness import Action
from vlrl.job.progress import Progress
from vlrl.mm import PatchRule, delete_sequences
from vlrl.mm.image_rows import read_images
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.tenant import lost_writers
from vlrl.records import LOSS_MASK, TOKEN_IDS, SeqMeta
from vlrl.rollout.external import rollout_tenant
from vlrl.rollout.parsers import PARSERS, ParseError, ScreenMap

EVAL_SEED_BASE = 1_000_000


@dataclass(kw_only=True, slots=True)
class Evaluation:
    """When and on what the policy is evaluated."""

    episodes: Annotated[int, Ge(1)] = 64
    """Held-out episodes per data source (seeds ``seed .. seed + episodes - 1``)."""

    every: Annotated[int, Ge(0)] = 10
    """RL steps between evaluations (0: only before and after training)."""

    seed: Annotated[int, Ge(0)] = EVAL_SEED_BASE
    """First held-out task seed."""

    temperature: Annotated[float, Ge(0)] = 0.0
    """Sampling temperature of evaluation episodes (0: greedy)."""

    screenshots: Annotated[int, Ge(0)] = 4
    """Annotated episodes saved per source at the first and the last evaluation."""

    chance: bool = True
    """Also measure the baselines on the same seeds, once per run (``job.baselines``): uniformly
    random clicks, the best constant point clicked every turn, and the harness's oracle."""

    constant_grid: tuple[int, int] = (8, 6)
    """Columns and rows of the grid of screen points the best constant point is chosen from (every
    point is played on every held-out seed: ``cols * rows`` scripted episodes a seed)."""

    def check(self) -> None:
        if len(self.constant_grid) != 2 or min(self.constant_grid) < 1:
            raise ConfigError("constant_grid", self.constant_grid, "two whole numbers of at least 1: (columns, rows)")


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """One evaluation episode as reports list it (``vlrl eval``'s per-episode table)."""

    source: str
    seed: int
    task: str
    """Task family the harness drew ('' when it does not say)."""
    success: bool
    reward: float
    turns: int
    response_tokens: int
    finish: str
    """Why it ended (``SeqMeta.finish``), or 'failed' when no episode came back."""
    error: str = ""
    """For a failed episode: its status and the first line of its error, whole."""
    replies: tuple[str, ...] = ()
    """The policy's decoded reply of every turn (when ``evaluate`` was asked for them), in the
    model's coordinates (in the ``qwen25vl`` format: pixels of the image the model saw, resized to
    whole patches)."""
    actions: tuple[str, ...] = ()
    """Each reply as the harness got it, in screen pixels (``click (100, 22)``, as the annotated
    pictures mark it), or ``invalid reply (...)``."""


@dataclass(slots=True)
class SourceScore:
    episodes: int = 0
    failed: int = 0
    success: float = 0.0
    reward: float = 0.0
    turns: float = 0.0
    response_tokens: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "success": self.success,
            "reward": self.reward,
            "turns": self.turns,
            "response_tokens": self.response_tokens,
            "episodes": self.episodes,
            "failed": self.failed,
        }


@dataclass(slots=True)
class EvalResult:
    sources: dict[str, SourceScore] = field(default_factory=dict)
    screenshots: list[Path] = field(default_factory=list)
    episodes: list[EpisodeRecord] = field(default_factory=list)

    @property
    def success(self) -> float:
        """Success over all evaluated episodes (sources weighted by their episodes)."""
        n = sum(s.episodes - s.failed for s in self.sources.values())
        return sum(s.success * (s.episodes - s.failed) for s in self.sources.values()) / max(n, 1)

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """Success overall, every per-source figure, and success per source and task family
        (``eval/SOURCE/tasks/TASK/success``)."""
        out: dict[str, float] = {f"{prefix}/success": self.success}
        for name, score in self.sources.items():
            for key, value in score.as_dict().items():
                out[f"{prefix}/{name}/{key}"] = value
        by_task: dict[str, list[bool]] = defaultdict(list)
        for e in self.episodes:
            if e.finish != "failed":
                by_task[f"{prefix}/{e.source}/tasks/{e.task or '(unnamed)'}/success"].append(e.success)
        return {**out, **{key: float(np.mean(wins)) for key, wins in sorted(by_task.items())}}


@dataclass(frozen=True, slots=True)
class Annotator:
    """What drawing an episode needs: the tokenizer that decodes replies and the patch rule."""

    tokenizer: Any
    patch_rule: PatchRule

    def screen_map(self, width: int, height: int) -> ScreenMap:
        _, grid_h, grid_w = self.patch_rule.grid(width, height)
        size = self.patch_rule.patch_size
        return ScreenMap(width, height, grid_w * size, grid_h * size)


async def evaluate(
    pool: HarnessPool,
    store: Any,
    sources: list[DataSource],
    config: Evaluation,
    *,
    tag: str,
    annotator: Annotator | None = None,
    screenshot_dir: Path | None = None,
    replies: bool = False,
    progress: Progress | None = None,
) -> EvalResult:
    """Play ``config.episodes`` held-out episodes per source; score them, draw a few, delete their
    keys. ``replies`` (with an ``annotator`` to decode them) lists every turn's reply per episode;
    ``progress`` is advanced once per finished episode (the caller opened its phase)."""
    jobs, owners = [], []
    for source in sources:
        # held-out episodes are played from reset, one each: a branching source's trees are training's
        evaluated = replace(source, agent=replace(source.agent, temperature=config.temperature), branching=None)
        for k in range(config.episodes):
            seed = config.seed + k
            loop = rollout_tenant(evaluated, seed, f"eval-{tag}/{source.name}/{seed}", 0)
            kwargs = {"codebase": source.env_pool, "env_settings": source.env.as_kwargs(), "tenant_id": f"eval-{tag}/{source.name}/{seed}"}
            jobs.append((loop, kwargs))
            owners.append((source.name, seed))
    outcomes = await _run(pool, jobs, progress)
    store.take_back(lost_writers(outcomes))  # what runs wrote before their loop host died
    result = EvalResult({source.name: SourceScore() for source in sources})
    per_source: dict[str, list[list[SeqMeta]]] = defaultdict(list)
    played: dict[int, list[SeqMeta]] = {}
    for (name, seed), outcome in zip(owners, outcomes):
        score = result.sources[name]
        score.episodes += 1
        if outcome.status != "ok" or not outcome.value:
            score.failed += 1
            error = (outcome.error or "no episode came back").splitlines()[0]
            result.episodes.append(EpisodeRecord(name, seed, "", False, 0.0, 0, 0, "failed", f"{outcome.status}: {error}"))
            continue
        per_source[name].append(outcome.value)
        played[len(result.episodes)] = outcome.value
        result.episodes.append(_record(name, seed, outcome.value))
    for name, trajectories in per_source.items():
        score, n = result.sources[name], len(trajectories)
        score.success = sum(metas[0].success for metas in trajectories) / n
        score.reward = sum(metas[0].reward for metas in trajectories) / n
        score.turns = sum(sum(m.turns for m in metas) for metas in trajectories) / n
        score.response_tokens = sum(sum(m.num_response_tokens for m in metas) for metas in trajectories) / n
    metas = [meta for trajectories in per_source.values() for metas in trajectories for meta in metas]
    try:
        if replies and annotator is not None:
            formats = {source.name: source.agent.action_format for source in sources}
            result.episodes = await asyncio.to_thread(_with_replies, result.episodes, played, store, annotator, formats)
        if annotator is not None and screenshot_dir is not None and config.screenshots:
            screenshot_dir.mkdir(parents=True, exist_ok=True)
            for name, trajectories in per_source.items():
                source = next(s for s in sources if s.name == name)
                for metas_ in trajectories[: config.screenshots]:
                    image = await asyncio.to_thread(annotate, store, metas_[0], annotator, source.agent.action_format)
                    path = screenshot_dir / f"{tag}-{_slug(metas_[0].group_id)}.png"
                    image.save(path)
                    result.screenshots.append(path)
    finally:
        delete_sequences(store, metas)
    return result


async def _run(pool: HarnessPool, jobs: list[tuple[Any, dict[str, Any]]], progress: Progress | None) -> list[Any]:
    if progress is None:
        return await pool.run_many(jobs)
    return await asyncio.gather(*(progress.counted(pool.run(tenant, **kwargs)) for tenant, kwargs in jobs))


def _record(source: str, seed: int, metas: list[SeqMeta]) -> EpisodeRecord:
    first = metas[0]
    return EpisodeRecord(
        source, seed, first.task, first.success, first.reward, sum(m.turns for m in metas),
        sum(m.num_response_tokens for m in metas), first.finish,
    )  # fmt: skip


def _with_replies(
    episodes: list[EpisodeRecord], played: dict[int, list[SeqMeta]], store: Any, annotator: Annotator, formats: dict[str, str]
) -> list[EpisodeRecord]:
    """``episodes`` with the decoded replies of every turn, read back from the store, and each
    parsed into the action the harness got, in pixels of that turn's screenshot (``played``: index
    of an episode -> its sequences; ``formats``: each source's action format)."""
    rows = store.get([m.key for metas in played.values() for m in metas], fields=[TOKEN_IDS, LOSS_MASK])
    out = list(episodes)
    for index, metas in played.items():
        replies, actions = [], []
        for m in metas:
            screens = [m.images[i] for _, i in m.image_offsets]
            for turn, answer in enumerate(_answers(rows[m.key][TOKEN_IDS], rows[m.key][LOSS_MASK])):
                reply = annotator.tokenizer.decode(answer, skip_special_tokens=True)
                replies.append(reply)
                if turn < len(screens):
                    screen = annotator.screen_map(screens[turn].width, screens[turn].height)
                    actions.append(_action(reply, formats[out[index].source], screen)[1])
        out[index] = replace(out[index], replies=tuple(replies), actions=tuple(actions))
    return out


def annotate(store: Any, meta: SeqMeta, annotator: Annotator, action_format: str) -> Any:
    """One episode as a picture: each turn's screenshot with the policy's click marked on it and
    its reply under it, and the outcome in the title."""
    from PIL import Image, ImageDraw

    row = store.get([meta.key], fields=[TOKEN_IDS, LOSS_MASK])[meta.key]
    answers = _answers(row[TOKEN_IDS], row[LOSS_MASK])
    keys = [meta.images[index].store_key for _, index in meta.image_offsets]
    pixels = read_images(store, keys)
    panels = []
    for turn, key in enumerate(keys):
        shot = pixels[key]
        height, width = shot.shape[:2]
        scale = max(1, 320 // width)
        image = Image.fromarray(shot).resize((width * scale, height * scale), Image.NEAREST)
        reply = annotator.tokenizer.decode(answers[turn], skip_special_tokens=True) if turn < len(answers) else ""
        action, note = _action(reply, action_format, annotator.screen_map(width, height))
        draw = ImageDraw.Draw(image)
        if action is not None and action.x is not None:
            x, y, r = action.x * scale, action.y * scale, 6 * scale
            colour = (0, 200, 0) if meta.success and turn == len(keys) - 1 else (230, 0, 0)
            draw.ellipse((x - r, y - r, x + r, y + r), outline=colour, width=2)
            draw.line((x - 2 * r, y, x + 2 * r, y), fill=colour, width=1)
            draw.line((x, y - 2 * r, x, y + 2 * r), fill=colour, width=1)
        panels.append((image, f"turn {turn + 1}: {note}"))
    return _compose(panels, f"{meta.group_id}: {'success' if meta.success else 'failure'} (reward {meta.reward:+.2f})")


def _answers(token_ids: np.ndarray, loss_mask: np.ndarray) -> list[list[int]]:
    """The policy's replies: the runs of loss-masked tokens, in order."""
    answers, current = [], []
    for token, generated in zip(token_ids.tolist(), loss_mask.tolist()):
        if generated:
            current.append(token)
        elif current:
            answers.append(current)
            current = []
    if current:
        answers.append(current)
    return answers


def _action(reply: str, action_format: str, screen: ScreenMap) -> tuple[Action | None, str]:
    try:
        action = PARSERS[action_format].parse(reply, screen)
    except ParseError as error:
        return None, f"invalid reply ({error.feedback[:60]})"
    if action.x is None:
        return action, action.kind
    return action, f"{action.kind} ({action.x}, {action.y})"


def _compose(panels: list[tuple[Any, str]], title: str) -> Any:
    from PIL import Image, ImageDraw

    line = 14
    width = sum(image.width for image, _ in panels) + 4 * (len(panels) + 1)
    height = max(image.height for image, _ in panels) + 3 * line + 8
    canvas = Image.new("RGB", (max(width, 240), height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    draw.text((4, 2), title, fill=(0, 0, 0))
    x = 4
    for image, caption in panels:
        canvas.paste(image, (x, line + 4))
        draw.text((x, line + 6 + image.height), caption[:70], fill=(0, 0, 0))
        x += image.width + 4
    return canvas


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
