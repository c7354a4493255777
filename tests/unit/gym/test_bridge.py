"""vlrl harnesses as Gymnasium envs: the ids, Gymnasium's own checker, the action codec, and the
same episodes as the native harness for the same seed."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from harnesses.desktop import DesktopHarness
from vlrl.gym import KEYS, HarnessEnv, action_space, decode, encode, register_envs, screen_of
from vlrl.harness import ACTION_KINDS, Action, ActionError, Harness, Observation, register

DESKTOP_IDS = ["vlrl/desktop-v0", *(f"vlrl/desktop-{task}-v0" for task in DesktopHarness.tasks)]


def test_every_desktop_family_has_an_id():
    assert gym.spec("vlrl/desktop-v0").kwargs == {"harness": "desktop"}
    for task in DesktopHarness.tasks:
        assert gym.spec(f"vlrl/desktop-{task}-v0").kwargs == {"harness": "desktop", "task": task}
    register_envs()  # harnesses other tests registered since the import get their ids here
    assert register_envs() == []  # every id is in already: registering again adds none


class BadTasks(DesktopHarness):
    tasks = "abc"  # a string, not a tuple of names: the 'task names' rule refuses it


class ShortEpisodes(DesktopHarness):
    """Declares its own step limit as a keyword default."""

    def __init__(self, *, max_steps=4, **settings):
        super().__init__(max_steps=max_steps, **settings)


def test_specs_carry_the_harness_step_limit_and_a_later_harness_gets_its_ids_at_once():
    assert gym.spec("vlrl/desktop-v0").max_episode_steps == DesktopHarness.Config().max_steps == 10
    assert gym.spec("vlrl/desktop-click-target-v0").max_episode_steps == 10
    register("gym-late", ShortEpisodes)  # after vlrl.gym was imported, no register_envs() call
    assert gym.spec("vlrl/gym-late-click-target-v0").max_episode_steps == 4
    env = gym.make("vlrl/gym-late-v0")
    env.reset(seed=0)
    ends = [env.step(encode(Action.wait()))[3] for _ in range(4)]
    assert ends == [False, False, False, True]  # truncated at the harness's own limit, and the wrapper's
    env.close()
    register("gym-late-bad-tasks", "tests.unit.gym.test_bridge:BadTasks")  # refused on first use, as before
    assert "vlrl/gym-late-bad-tasks-v0" in gym.registry and "vlrl/gym-late-bad-tasks-a-v0" not in gym.registry


@pytest.mark.parametrize("env_id", DESKTOP_IDS)
def test_gymnasium_check_env_passes_without_a_warning(env_id):
    env = gym.make(env_id)
    assert isinstance(env.unwrapped, HarnessEnv)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("task", DesktopHarness.tasks)
@pytest.mark.parametrize("seed", [0, 7])
def test_oracle_through_gym_plays_the_native_episode(task, seed):
    native = DesktopHarness()
    obs, _ = native.reset(seed=seed, options={"task": task})
    env = gym.make(f"vlrl/desktop-{task}-v0")
    gym_obs, _ = env.reset(seed=seed)
    assert np.array_equal(gym_obs["screenshot"], obs.screenshot) and gym_obs["goal"] == obs.goal
    outcomes = []
    for _ in range(20):
        action, env_action = native.oracle(), env.unwrapped.oracle()
        assert decode(env_action) == action
        obs, reward, terminated, truncated, info = native.step(action)
        gym_obs, gym_reward, gym_terminated, gym_truncated, gym_info = env.step(env_action)
        assert np.array_equal(gym_obs["screenshot"], obs.screenshot)
        assert (gym_reward, gym_terminated, gym_truncated, gym_info) == (reward, terminated, truncated, info)
        outcomes.append(info["success"])
        if terminated or truncated:
            break
    assert outcomes[-1] is True
    env.close()


@pytest.mark.parametrize(
    "action",
    [
        Action.click(3, 4),
        Action.double_click(319, 239),
        Action.right_click(0, 0),
        Action.move(10, 20),
        Action.drag(1, 2, 300, 200),
        Action.scroll(5, 6, down=3),
        Action.scroll(5, 6, down=-50),
        Action.scroll(5, 6, right=2),
        Action.scroll(5, 6, right=-1),
        Action.type("Hello, world!\n"),
        Action.key("enter"),
        Action.key("ctrl", "shift", "a", "f5"),
        Action.wait(1.5),
        Action.done(),
        Action.done("42"),
        Action.fail("stuck"),
    ],
)
def test_every_action_kind_encodes_into_the_space_and_back(action):
    encoded = encode(action)
    assert encoded in action_space(320, 240)
    assert decode(encoded) == action


@pytest.mark.parametrize(
    ("entries", "action"),
    [
        ({"kind": 0, "point": [7, 9]}, Action.click(7, 9)),
        ({"kind": 4, "point": [1, 2], "to": [30, 40]}, Action.drag(1, 2, 30, 40)),
        ({"kind": 5, "point": [1, 2], "scroll": [0, 3]}, Action.scroll(1, 2, down=3)),
        ({"kind": 5, "point": [1, 2], "scroll": [1, 3]}, Action.scroll(1, 2, down=-3)),
        ({"kind": 5, "point": [1, 2], "scroll": [2, 1]}, Action.scroll(1, 2, right=1)),
        ({"kind": 5, "point": [1, 2], "scroll": [3, 50]}, Action.scroll(1, 2, right=-50)),
        ({"kind": 6, "text": "hi"}, Action.type("hi")),
        ({"kind": 7, "keys": [KEYS.index("ctrl"), KEYS.index("c") + 1, 0, 0]}, Action.key("ctrl", "c")),
        ({"kind": 8, "seconds": 2.0}, Action.wait(2.0)),
        ({"kind": 9, "answer": ""}, Action.done()),
        ({"kind": 10, "answer": "no"}, Action.fail("no")),
    ],
)
def test_the_entries_mean_what_the_spaces_module_documents(entries, action):
    arrays = {k: np.array(v) if isinstance(v, list) else v for k, v in entries.items()}
    assert decode({**encode(Action.wait()), **arrays}) == action
    assert ACTION_KINDS[entries["kind"]] == action.kind


def test_every_sampled_action_is_a_valid_action():
    space = action_space(320, 240)
    space.seed(0)
    kinds = set()
    for _ in range(3000):
        action = decode(space.sample())
        action.check_bounds(320, 240)
        kinds.add(action.kind)
        assert decode(encode(action)) == action
    assert len(kinds) == 11


def test_random_actions_play_through_the_env():
    env = gym.make("vlrl/desktop-v0")
    env.action_space.seed(1)
    env.reset(seed=1)
    for _ in range(50):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert isinstance(info["success"], bool)
        if terminated or truncated:
            env.reset()
    env.close()


def test_screen_of_knows_only_the_vlrl_action_space():
    assert screen_of(action_space(640, 480)) == (640, 480)
    assert screen_of(gym.spaces.Dict({"point": gym.spaces.MultiDiscrete([4, 4])})) is None
    assert screen_of(gym.spaces.Discrete(4)) is None


def test_a_diagonal_scroll_has_no_encoding():
    with pytest.raises(ActionError, match="scrolls one axis"):
        encode(Action(kind="scroll", x=1, y=1, scroll_x=1, scroll_y=1))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": 11}, r"entry 'kind': index 11; expected 0 <= index < 11"),
        ({"kind": 0, "point": np.array([1.5, 2.0])}, r"entry 'point'.*expected 2 integers"),
        ({"kind": 7, "keys": np.array([999, 0, 0, 0])}, r"entry 'keys': index 999"),
        ({"kind": 0, "point": np.array([-1, 3])}, r"x=-1"),
    ],
)
def test_a_malformed_gym_action_names_its_entry(change, message):
    with pytest.raises(ActionError, match=message):
        decode({**encode(Action.wait()), **change})


def test_a_gym_action_missing_an_entry_is_refused():
    fields = encode(Action.wait())
    del fields["seconds"]
    with pytest.raises(ActionError, match="expected a dict with the entries"):
        decode(fields)


def test_a_one_task_env_refuses_another_task():
    env = gym.make("vlrl/desktop-click-target-v0")
    with pytest.raises(ValueError, match="plays only task 'click-target'.*vlrl/desktop-v0"):
        env.reset(options={"task": "fill-form"})
    _, info = gym.make("vlrl/desktop-v0").reset(seed=0, options={"task": "fill-form"})
    assert info["task"] == "fill-form"


def test_construction_refuses_an_unknown_task_and_render_mode():
    with pytest.raises(ValueError, match="no task 'nope'"):
        HarnessEnv("desktop", task="nope")
    with pytest.raises(ValueError, match="render_mode='human'"):
        HarnessEnv("desktop", render_mode="human")


def test_render_returns_the_last_screenshot_and_settings_reach_the_harness():
    env = gym.make("vlrl/desktop-v0", render_mode="rgb_array", width=400, height=300)
    obs, _ = env.reset(seed=2)
    assert env.observation_space["screenshot"].shape == (300, 400, 3)
    frame = env.render()
    assert np.array_equal(frame, obs["screenshot"]) and frame is not obs["screenshot"]
    assert gym.make("vlrl/desktop-v0").unwrapped.render() is None


class _PageHarness(Harness):
    """A one-screen harness with a URL and an accessibility tree."""

    tasks = ("page",)

    def reset(self, *, seed=None, options=None):
        return self._obs(), {"task": "page"}

    def step(self, action):
        return self._obs(), 0.0, True, False, {"task": "page", "success": False}

    def close(self):
        pass

    @staticmethod
    def _obs():
        return Observation(
            screenshot=np.zeros((20, 30, 3), np.uint8), goal="Read", a11y_tree="[button] OK", url="http://x/"
        )


def test_info_carries_the_url_and_accessibility_tree():
    register("gym-bridge-page", _PageHarness)
    env = HarnessEnv("gym-bridge-page")
    obs, info = env.reset(seed=0)
    assert obs["screenshot"].shape == (20, 30, 3)
    assert (info["url"], info["a11y_tree"]) == ("http://x/", "[button] OK")
    assert env.step(encode(Action.wait()))[4]["url"] == "http://x/"
