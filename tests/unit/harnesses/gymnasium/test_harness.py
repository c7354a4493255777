"""Gymnasium envs as vlrl harnesses: small real envs of each observation and action kind, and the
round trip vlrl desktop -> Gymnasium -> vlrl, pass the harness contract; actions map as
documented and the rest is refused by name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from harnesses.desktop import DesktopHarness
from harnesses.gymnasium import GymnasiumHarness
from vlrl.harness import Action, ActionError, HarnessError, check_harness
from vlrl.harness.registry import run_contract

CELL = 16


class Grid(gym.Env):
    """Walk to the goal on a 4x4 grid drawn as a 64x64 image; the goal is drawn from the seed."""

    metadata = {"render_modes": []}
    MOVES = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}

    def __init__(self):
        self.observation_space = spaces.Box(0, 255, (4 * CELL, 4 * CELL, 3), np.uint8)
        self.action_space = spaces.Discrete(4)

    def get_action_meanings(self):
        return ["LEFT", "DOWN", "RIGHT", "UP"]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agent = (0, 0)
        self.goal = tuple(int(v) for v in self.np_random.integers(1, 4, size=2))
        return self._image(), {}

    def step(self, action):
        dx, dy = self.MOVES[int(action)]
        self.agent = (min(max(self.agent[0] + dx, 0), 3), min(max(self.agent[1] + dy, 0), 3))
        solved = self.agent == self.goal
        return self._image(), float(solved), solved, False, {"is_success": solved}

    def _image(self):
        image = np.zeros(self.observation_space.shape, np.uint8)
        for (x, y), colour in ((self.goal, (0, 200, 0)), (self.agent, (200, 0, 0))):
            image[y * CELL : (y + 1) * CELL, x * CELL : (x + 1) * CELL] = colour
        return image


class Target(gym.Env):
    """Click the white square: a Dict observation with a mission, a Box(2,) action in pixels."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Dict(
            {
                "pixels": spaces.Box(0, 255, (48, 64, 3), np.uint8),
                "mission": spaces.Text(64, charset="click the square"),
            }
        )
        self.action_space = spaces.Box(np.zeros(2, np.float32), np.array([63, 47], np.float32))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.corner = tuple(int(v) for v in self.np_random.integers(0, 40, size=2))
        return self._obs(), {}

    def step(self, action):
        x, y = (float(v) for v in action)
        hit = self.corner[0] <= x < self.corner[0] + 8 and self.corner[1] <= y < self.corner[1] + 8
        return self._obs(), float(hit), hit, False, {"success": hit, "point": [x, y]}

    def _obs(self):
        pixels = np.zeros((48, 64, 3), np.uint8)
        pixels[self.corner[1] : self.corner[1] + 8, self.corner[0] : self.corner[0] + 8] = 255
        return {"pixels": pixels, "mission": "click the square"}


class Pole(gym.Env):
    """A vector observation; the screen is its rgb_array rendering."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.angle = float(self.np_random.uniform(-0.5, 0.5))
        return np.array([self.angle], np.float32), {}

    def step(self, action):
        self.angle = max(-1.0, min(1.0, self.angle + (0.25 if action else -0.25)))
        return np.array([self.angle], np.float32), 1.0, abs(self.angle) >= 1.0, False, {}

    def render(self):
        frame = np.zeros((40, 80, 3), np.uint8)
        frame[:, int((self.angle + 1) * 39.5)] = 255
        return frame


class Arm(gym.Env):
    """A continuous-control action space the harness cannot map."""

    metadata = {"render_modes": []}
    observation_space = spaces.Box(0, 255, (20, 20, 3), np.uint8)
    action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((20, 20, 3), np.uint8), {}

    def step(self, action):
        return np.zeros((20, 20, 3), np.uint8), 0.0, False, False, {}


class Blind(Pole):
    """Neither image observations nor rgb_array frames."""

    metadata = {"render_modes": []}

    def __init__(self, render_mode=None):
        super().__init__(render_mode=None)


for _name, _env in (("Grid", Grid), ("Target", Target), ("Pole", Pole), ("Arm", Arm), ("Blind", Blind)):
    if f"vlrl-test/{_name}-v0" not in gym.registry:
        gym.register(f"vlrl-test/{_name}-v0", entry_point=_env, disable_env_checker=True)

CONTRACT_CASES = [
    {"env_id": "vlrl-test/Grid-v0"},
    {"env_id": "vlrl-test/Target-v0"},
    {"env_id": "vlrl-test/Pole-v0", "goal": "Keep the pole upright."},
    {"env_id": "vlrl-test/Grid-v0", "width": 128, "height": 96},
    {"env_id": "vlrl/desktop-click-target-v0"},
    {"env_id": "vlrl/desktop-v0", "width": 400, "height": 300},
]


@pytest.mark.parametrize("settings", CONTRACT_CASES, ids=lambda s: "-".join(map(str, s.values())))
def test_the_harness_contract_holds(settings):
    check_harness(lambda: GymnasiumHarness(**settings))


def test_vlrl_check_harness_gymnasium_passes():
    rules = list(run_contract("gymnasium"))
    assert {"harness class", "types", "determinism", "tasks", "order", "bounds"} <= set(rules)


def test_screens_goals_and_tasks_come_from_the_env():
    grid = GymnasiumHarness(env_id="vlrl-test/Grid-v0")
    obs, info = grid.reset(seed=0)
    assert obs.screenshot.shape == (64, 64, 3) and obs.goal == "Get the highest reward in vlrl-test/Grid-v0."
    assert grid.tasks == ("vlrl-test/Grid-v0",) and info == {"task": "vlrl-test/Grid-v0", "success": False}
    target = GymnasiumHarness(env_id="vlrl-test/Target-v0", goal="unused: the mission wins")
    assert target.reset(seed=0)[0].goal == "click the square"
    pole = GymnasiumHarness(env_id="vlrl-test/Pole-v0", width=160, height=80)
    assert pole.reset(seed=0)[0].screenshot.shape == (80, 160, 3)


@pytest.mark.parametrize(("key", "index"), [("right", 2), ("2", 2), ("up", 3), ("0", 0)])
def test_a_key_steps_the_action_it_names(key, index):
    harness = GymnasiumHarness(env_id="vlrl-test/Grid-v0")
    harness.reset(seed=5)
    raw = Grid()
    raw.reset(seed=5)
    expected = raw.step(index)[0]
    assert np.array_equal(harness.step(Action.key(key))[0].screenshot, expected)


def test_walking_to_the_goal_is_a_success():
    harness = GymnasiumHarness(env_id="vlrl-test/Grid-v0")
    harness.reset(seed=3)
    raw = Grid()
    raw.reset(seed=3)
    gx, gy = raw.goal
    for key in ["right"] * gx + ["down"] * gy:
        _, reward, terminated, _, info = harness.step(Action.key(key))
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_the_keys_setting_replaces_the_default_names():
    harness = GymnasiumHarness(env_id="vlrl-test/Grid-v0", keys={"a": 0, "d": 2})
    harness.reset(seed=0)
    harness.step(Action.key("d"))
    with pytest.raises(ActionError, match=r"among \['a', 'd'\]"):
        harness.step(Action.key("right"))


def test_a_click_maps_linearly_onto_the_box():
    harness = GymnasiumHarness(env_id="vlrl-test/Target-v0", width=128, height=96)
    harness.reset(seed=0)
    assert harness.step(Action.click(127, 95))[4]["env"]["point"] == [63.0, 47.0]
    harness.reset(seed=0)
    assert harness.step(Action.click(0, 0))[4]["env"]["point"] == [0.0, 0.0]
    obs, _ = harness.reset(seed=1)
    ys, xs = np.nonzero(obs.screenshot[:, :, 0] == 255)
    _, reward, terminated, _, info = harness.step(Action.click(int(xs.mean()), int(ys.mean())))
    assert (reward, terminated, info["success"]) == (1.0, True, True)


@pytest.mark.parametrize(
    ("env_id", "action", "message"),
    [
        ("vlrl-test/Grid-v0", Action.click(3, 3), r"a click action has no Discrete\(4\) action; it takes a key action"),
        ("vlrl-test/Grid-v0", Action.key("ctrl", "a"), r"a key action \('ctrl', 'a'\) has no Discrete\(4\)"),
        ("vlrl-test/Grid-v0", Action.key("z"), r"among \['0', '1', '2', '3', 'down', 'left', 'right', 'up'\]"),
        ("vlrl-test/Grid-v0", Action.type("go"), "a type action"),
        ("vlrl-test/Target-v0", Action.key("enter"), r"has no Box.*it takes click, and wait, done and fail"),
        ("vlrl-test/Target-v0", Action.drag(1, 1, 5, 5), "a drag action"),
    ],
)
def test_an_unmappable_action_is_refused_by_name(env_id, action, message):
    harness = GymnasiumHarness(env_id=env_id)
    harness.reset(seed=0)
    with pytest.raises(ActionError, match=message):
        harness.step(action)


def test_wait_done_and_fail_stay_in_the_harness():
    harness = GymnasiumHarness(env_id="vlrl-test/Grid-v0", max_steps=3)
    obs, _ = harness.reset(seed=0)
    waited, reward, terminated, truncated, info = harness.step(Action.wait())
    assert np.array_equal(waited.screenshot, obs.screenshot) and (reward, terminated, truncated) == (0.0, False, False)
    assert harness.step(Action.done())[2:4] == (True, False)
    with pytest.raises(HarnessError, match="episode has ended"):
        harness.step(Action.wait())
    harness.reset(seed=0)
    results = [harness.step(Action.wait()) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]


@pytest.mark.parametrize("env_id", ["vlrl/desktop-v0", "vlrl/desktop-fill-form-v0"])
@pytest.mark.parametrize("size", [{}, {"width": 640, "height": 480}])
def test_the_round_trip_oracle_solves_what_the_native_one_does(env_id, size):
    harness = GymnasiumHarness(env_id=env_id, **size)
    for seed in range(4):
        obs, _ = harness.reset(seed=seed)
        assert obs.screenshot.shape == (size.get("height", 240), size.get("width", 320), 3)
        for _ in range(20):
            _, _, terminated, truncated, info = harness.step(harness.oracle())
            if terminated or truncated:
                break
        assert info["success"] is True, (env_id, size, seed)


def test_the_round_trip_shows_the_native_screens():
    native = DesktopHarness()
    harness = GymnasiumHarness(env_id="vlrl/desktop-type-field-v0")
    native_obs, _ = native.reset(seed=4, options={"task": "type-field"})
    obs, _ = harness.reset(seed=4)
    assert np.array_equal(obs.screenshot, native_obs.screenshot) and obs.goal == native_obs.goal
    action = native.oracle()
    assert np.array_equal(harness.step(action)[0].screenshot, native.step(action)[0].screenshot)


def test_points_scale_between_the_resized_screenshot_and_the_env_screen():
    native = DesktopHarness()
    native.reset(seed=2, options={"task": "click-target"})
    click = native.oracle()
    harness = GymnasiumHarness(env_id="vlrl/desktop-click-target-v0", width=640, height=480)
    harness.reset(seed=2)
    assert harness.oracle() == Action.click(2 * click.x, 2 * click.y)
    assert harness.step(Action.click(2 * click.x + 1, 2 * click.y + 1))[4]["env"] == native.step(click)[4]


def test_oracle_is_none_for_an_env_without_one():
    harness = GymnasiumHarness(env_id="vlrl-test/Grid-v0")
    harness.reset(seed=0)
    assert harness.oracle() is None


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"env_id": ""}, ValueError, "setting env_id=''; expected a Gymnasium env id"),
        ({"env_id": "NoSuchEnv-v0"}, HarnessError, "setting env_id='NoSuchEnv-v0': Gymnasium cannot make it"),
        ({"width": 8}, ValueError, r"gymnasium harness setting width=8; expected an int in \[16, 4096\]"),
        ({"max_steps": 0}, ValueError, "setting max_steps=0"),
        ({"goal": ""}, ValueError, "setting goal=''"),
        ({"env_id": "vlrl-test/Grid-v0", "keys": {"nokey": 0}}, ValueError, "setting keys: key action: key 'nokey'"),
        ({"env_id": "vlrl-test/Grid-v0", "keys": {"a": 4}}, ValueError, r"keys\['a'\]=4; expected an action index"),
        ({"env_id": "vlrl-test/Target-v0", "keys": {"a": 0}}, ValueError, "keys needs Discrete"),
        ({"env_id": "vlrl-test/Target-v0", "image_key": "mission"}, ValueError, "image_key='mission'"),
        ({"env_id": "vlrl-test/Arm-v0"}, ValueError, r"Box\(-1.0, 1.0, \(3,\), float32\) action space; expected"),
        ({"env_id": "vlrl-test/Blind-v0"}, HarnessError, "hold no .* image and it does not render rgb_array"),
    ],
)
def test_a_bad_setting_names_the_harness_setting_and_expectation(settings, error, message):
    with pytest.raises(error, match=message):
        GymnasiumHarness(**settings)
