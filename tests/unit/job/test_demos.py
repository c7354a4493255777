"""Oracle demonstrations become training sequences like the Agent Loop's, with the reply as the
only loss tokens; episodes whose written replies no longer succeed are dropped."""

from __future__ import annotations

import asyncio

import pytest

from harnesses.desktop import DesktopHarness
from vlrl.config import AgentBehaviour, DataSource, EnvSettings
from vlrl.job.demos import DemoEpisode
from vlrl.mm import content_hash, patch_rule_of
from vlrl.mm.image_rows import read_images
from vlrl.records import ADVANTAGES
from vlrl.rollout.agent_loop import LoopRuntime
from vlrl.rollout.parsers import PARSERS
from vlrl.store import LocalStore


class _Env:
    """The env session a tenant gets, over a local harness. Like ``EnvSession``, it names the
    last screen it returned (the env host hashed it) and counts the names it gave."""

    def __init__(self, harness) -> None:
        self.harness = harness
        self.named = 0
        self._last = None

    async def reset(self, *, seed=None, options=None):
        obs, info = self.harness.reset(seed=seed, options=options)
        self._last = obs.screenshot
        return obs, info

    async def step(self, action):
        result = self.harness.step(action)
        self._last = result[0].screenshot
        return result

    def content_hash(self, screenshot):
        if screenshot is not self._last:
            return None
        self.named += 1
        return content_hash(screenshot)

    async def oracle(self):
        return self.harness.oracle()


class _Context:
    def __init__(self, runtime, harness) -> None:
        self.shared = {"runtime": runtime}
        self.harness = harness

    async def to_thread(self, fn, *args):
        return fn(*args)

    async def open_env(self):
        self.env = _Env(self.harness)
        return self.env


def _source(tasks, max_turns=4, **env) -> DataSource:
    return DataSource(
        name="demo-src",
        agent=AgentBehaviour(max_turns=max_turns, max_tokens=40),
        env=EnvSettings(width=160, height=120, tasks=tasks, params=env),
    )


@pytest.fixture()
def runtime(processor):
    return LoopRuntime(client=None, tokenizer=processor.tokenizer, patch_rule=patch_rule_of(processor), store=LocalStore())


def _run(runtime, source, seed, grid=7, grounding=0):
    harness = DesktopHarness(**source.env.as_kwargs())
    episode = DemoEpisode(source, seed=seed, point_grid=grid, grounding=grounding)
    return asyncio.run(episode.run(_Context(runtime, harness)))


def test_a_demonstration_is_one_sequence_whose_loss_tokens_are_the_written_reply(runtime, processor):
    source = _source(["click-target"], distractors=0)
    result = _run(runtime, source, seed=3)
    assert result.reason == ""
    (meta,) = result.metas
    assert meta.success and meta.reward == 1.0 and meta.turns == 1 and meta.finish == "done"
    row = runtime.store.get([meta.key])[meta.key]
    mask = row["loss_mask"]
    assert mask.sum() == meta.num_response_tokens and mask[-meta.num_response_tokens:].all()
    written = processor.tokenizer.decode(row["token_ids"][mask].tolist())
    assert written.startswith('<tool_call>{"name": "computer_use"') and written.endswith("</tool_call><|im_end|>")
    reply = processor.tokenizer.decode(row["token_ids"][mask].tolist(), skip_special_tokens=True)  # as the loop decodes
    assert row["token_ids"][-1] == processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert not row["logprobs"].any() and ADVANTAGES not in row  # the likelihood loss packs no advantages
    numbers = [int(n) for n in reply.split("[")[1].split("]")[0].split(",")]
    assert all(n % 7 == 0 for n in numbers)  # the point grid
    (item,) = meta.images
    assert read_images(runtime.store, [item.store_key])[item.store_key].shape == (120, 160, 3)
    screen = runtime.screen_map(160, 120)
    assert PARSERS["qwen25vl"].parse(reply, screen).kind == "click"


def test_multi_turn_demonstrations_carry_every_turn(runtime):
    source = _source(["type-field"], max_turns=6)
    result = _run(runtime, source, seed=5, grid=1)
    (meta,) = result.metas
    assert meta.success and meta.turns >= 2
    assert len(meta.context_lengths) == meta.turns and len(meta.image_offsets) == meta.turns


def test_every_demonstrated_screen_takes_the_name_its_env_session_gave_it(runtime):
    source = _source(["type-field"], max_turns=6)
    ctx = _Context(runtime, DesktopHarness(**source.env.as_kwargs()))
    result = asyncio.run(DemoEpisode(source, seed=5, point_grid=1).run(ctx))
    (meta,) = result.metas
    assert ctx.env.named == meta.turns >= 2  # one name asked a turn: the screen is not hashed again


def test_an_episode_the_written_replies_do_not_solve_is_dropped(runtime):
    source = _source(["click-target"], max_turns=1, distractors=0)
    result = _run(runtime, source, seed=3, grid=200)  # points rounded to 0: the click misses
    assert result.metas == () and "did not succeed" in result.reason
    assert runtime.store.stats().keys == 0


def test_grounding_demonstrations_click_the_named_element_of_each_demonstrated_screen(runtime, processor):
    source = _source(["select-menu"], distractors=0)
    harness = DesktopHarness(**source.env.as_kwargs())
    screens = [harness.reset(seed=3)[0]]
    screens.append(harness.step(harness.oracle())[0])  # the opened menu: its items are elements now
    result = _run(runtime, source, seed=3, grounding=3)
    task, *grounding = result.metas
    assert task.turns == 2 and len(grounding) == 2 + 3  # the menu bar shows two menus, the popup more
    screen = runtime.screen_map(160, 120)
    for meta in grounding:
        row = runtime.store.get([meta.key])[meta.key]
        prompt = processor.tokenizer.decode(row["token_ids"][~row["loss_mask"]].tolist(), skip_special_tokens=True)
        label = prompt.split('Click "')[1].split('".')[0]
        reply = processor.tokenizer.decode(row["token_ids"][row["loss_mask"]].tolist(), skip_special_tokens=True)
        click = PARSERS["qwen25vl"].parse(reply, screen)
        turn = int(meta.key.split("#")[1].split("/")[0])
        (element,) = [e for e in screens[turn].elements if e.label == label]
        assert meta.turns == 1 and element.contains(click.x, click.y)
    labels = [runtime.store.get([m.key])[m.key]["token_ids"].tolist() for m in grounding]
    assert len({tuple(ids) for ids in labels}) == len(grounding)  # different elements, or screens


def test_grounding_keys_are_written_only_with_a_kept_demonstration(runtime):
    source = _source(["select-menu"], max_turns=2, distractors=0)
    result = _run(runtime, source, seed=3, grid=200, grounding=3)  # rounded to 0: no click lands
    assert result.metas == () and runtime.store.stats().keys == 0


def test_a_goal_repeated_every_turn_is_in_every_turn_of_the_demonstration(runtime, processor):
    for repeat, count in ((False, 1), (True, 2)):
        source = _source(["select-menu"], distractors=0)
        source.agent.goal_every_turn = repeat
        (meta,) = _run(runtime, source, seed=3 + repeat).metas
        text = processor.tokenizer.decode(runtime.store.get([meta.key])[meta.key]["token_ids"].tolist())
        assert meta.turns == 2 and text.count('from the ') == count, text
