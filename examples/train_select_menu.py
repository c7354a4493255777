"""Train a GUI agent on a two-turn desktop task: open the named menu, choose the named item.

    vlrl train examples/train_select_menu.py               # GRPO at 1e-4: 0.23 after the warm start, 0.265 after RL
    vlrl train examples/train_select_menu.py:step_credit   # the same run with step-level credit
    vlrl train examples/train_select_menu.py:replay        # the same run with replay of hard tasks
    vlrl train examples/train_select_menu.py:branching     # the same run with branching rollouts, at equal env steps
    vlrl train examples/train_select_menu.py:long_warm_start  # 4096 demonstrations, 1000 steps: 0.44 after it
    vlrl train examples/train_select_menu.py:small         # a 2-step smoke run (CI)

The desktop harness's ``select-menu`` family at 160x120 without decoys: a window whose menu bar
holds two menus of three to five items each; the goal names a menu and one of its items, and the
reward is 1 only if that item was chosen. The oracle solves it in two turns (click the menu,
click the item); the policy gets one spare turn. A warm start on the oracle's demonstrations,
then GRPO on groups of 8, as the main job (``train_click.py``), except that the goal is restated
in every turn (``goal_every_turn``), the warm start's rate decays along a cosine (measured at
the same budget: 0.23-0.255 held-out after the warm start where the main job's settings gave
0.15), and RL runs at 1e-4, ``base_recipe``'s rate for multi-turn sources: from one warm start
(0.23), 50 GRPO steps at the main job's 1e-3 ended at 0.185, at 1e-4 at 0.265 (0.285 after
100; ``docs/lab/training-runs.md``).

``step_credit`` adds step-level credit (``advantage.step_credit``): a group's episodes start on one
screen, and those that opened the same menu see the same second screen, so their item choices
are compared with each other apart from the first click.

What limits it (``docs/lab/training-runs.md``, "what limits a two-click task"): the tiny model
learns the mechanics (it clicks the menu bar, then inside the popup) long before it learns which
menu and item the goal names. The recipe's warm start, and ones with 4x the parameters or up to 8x the
image tokens, land at 0.02-0.15, where a scripted policy that picks menu and item at random gets
0.124. With 4096 demonstrations it reaches 0.29 after 500 warm-start steps, 0.42 after 1000.
At that budget a vision tower 4x or 8x as wide (``--set tiny.vision_hidden_size=128``) reaches
0.42 in 500 steps, but 1500 steps give 0.355 (it memorises), and 2x upscaled screenshots 0.40.

``branching`` plays each group as trees: an episode's second turn is played again from the
menu it opened, so the item choices of one open menu are compared with each other.

``replay`` adds replay of hard tasks (``DataSource.replay``): a menu the group opened and chose
right only once or twice in eight is played again, and if the revisit solves nothing, the kept
success joins it, trained under truncated importance sampling against the policy that sampled it.
"""

from vlrl.control.step_credit import StepCredit
from vlrl.recipes import AgentBehaviour, Branching, DataSource, EnvSettings, Replay, TrainJob, base_recipe, ci_size


def menu_source() -> DataSource:
    """select-menu on a 160x120 desktop without decoys: two turns for the oracle, one spare."""
    return DataSource(
        name="desktop-menu",
        codebase="desktop",
        agent=AgentBehaviour(
            max_turns=3, max_tokens=40, temperature=1.0, prompt_template="gui-agent-short", goal_every_turn=True
        ),
        env=EnvSettings(width=160, height=120, tasks=["select-menu"], max_steps=3, params={"distractors": 0}),
        group_size=8,
    )


def recipe() -> TrainJob.Config:
    """The main job's settings on select-menu (warm start on 512 demonstrations, 50 GRPO steps at
    ``base_recipe``'s multi-turn rate of 1e-4), the warm start's rate decaying to a tenth."""
    config = base_recipe([menu_source()], run_dir="runs/train_select_menu")
    config.warm_start.schedule = "cosine"
    return config


def step_credit() -> TrainJob.Config:
    """``recipe`` with step-level credit on the same seeds and budget."""
    config = recipe()
    config.run_dir = "runs/train_select_menu_step_credit"
    config.advantage.step_credit = StepCredit(weight=1.0, gamma=0.95)
    return config


def replay() -> TrainJob.Config:
    """``recipe`` with replay of hard tasks on the same seeds and budget."""
    config = recipe()
    config.run_dir = "runs/train_select_menu_replay"
    config.sources[0].replay = Replay(max_pass_rate=0.25, revisits=2, cap=32, max_age=4)
    config.loss.tis_cap = 2.0
    return config


def branching() -> TrainJob.Config:
    """``recipe`` with branching rollouts (``DataSource.branching``, docs/control.md): each group
    is 4 trees, each a root episode and 2 branches restarted from one of its turns (the desktop
    forks), at the expected env steps of the 8 flat episodes; siblings are compared where they
    branched. The same flag on any multi-turn source: ``--set 'sources[0].branching=Branching'``."""
    config = recipe()
    config.run_dir = "runs/train_select_menu_branching"
    config.sources[0].branching = Branching(points=1, branches=2)
    return config


def long_warm_start() -> TrainJob.Config:
    """``recipe`` with a warm start on 8x the demonstrations and 4x the steps. Measured: 0.44
    held-out after the warm start (24 min; 0.42 with the main job's settings, whose 50 GRPO steps then
    gave 0.38, 0.375, 0.375, 0.40, 0.37, within noise of it, at the RL rate of 1e-3 it had then).
    At 1e-4, the rate it has now, 100 GRPO steps went from 0.45 to 0.415, step-level credit to
    0.46: RL holds this warm start but does not add the reading it lacks."""
    config = recipe()
    config.run_dir = "runs/train_select_menu_long_warm_start"
    config.warm_start.episodes, config.warm_start.steps = 4096, 1000
    return config


def small() -> TrainJob.Config:
    """Every stage at CI size, with step-level credit: 2 warm-start steps, 2 RL steps of 2 groups of 4."""
    return ci_size(step_credit(), "runs/train_select_menu_small", demonstrations=8, group_size=4)
