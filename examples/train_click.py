"""Train a GUI agent end to end: the tiny Qwen2-VL learns to click the named button.

    vlrl train examples/train_click.py                # the README's main job (2 CPU cores, < 15 min)
    vlrl train examples/train_click.py:small          # a 2-step smoke run (CI)
    vlrl train examples/train_click.py:mixed          # desktop + browser sources, per-source batch shares
    vlrl train examples/train_click.py:lora           # the main job's warm start, then RL on LoRA adapters
    vlrl train examples/train_click.py --resume       # continue an interrupted run from its last checkpoint
    vlrl plot runs/train_click                        # the plots and annotated episodes, on demand

The policy is an untrained tiny Qwen2-VL (hidden size 64, 2 layers; built offline, random
weights). A supervised warm start on oracle demonstrations teaches it the reply format and a first
notion of where buttons are; GRPO then trains it on its own rollouts: groups of 8 episodes per
task, pass-rate sampling, group-relative advantages, one optimizer step and one weight push per
batch. The task is the simplest desktop family, click-target, at 160x120 with no decoy buttons
(one button in a window at a random place on a random-coloured desktop): the policy must find it
in the screenshot and click inside it; clicking the window's close box fails the episode.
"""

from vlrl.recipes import (
    AgentBehaviour,
    DataSource,
    EnvSettings,
    Evaluation,
    HostBudget,
    LoRA,
    TrainJob,
    WarmStart,
    base_recipe,
    ci_size,
)


def click_source(**overrides) -> DataSource:
    """click-target on a 160x120 desktop without decoys: one turn, one click."""
    return DataSource(
        name="desktop-click",
        codebase="desktop",
        agent=AgentBehaviour(max_turns=1, max_tokens=40, temperature=1.0, prompt_template="gui-agent-short"),
        env=EnvSettings(width=160, height=120, tasks=["click-target"], params={"distractors": 0}),
        group_size=8,
        **overrides,
    )


def recipe() -> TrainJob.Config:
    """The main job: ``base_recipe`` on click-target (warm start on 512 demonstrations, then GRPO)."""
    return base_recipe([click_source()], run_dir="runs/train_click")


def lora() -> TrainJob.Config:
    """The main job with an RL stage that trains LoRA adapters in place of every weight: the same
    full-weight warm start, then rank-8 adapters (the LLM is 64 wide) on every linear layer of the
    LLM, the vision tower and the merger, everything else frozen, at twice the main job's learning
    rate (a step moves each adapted weight about 0.4 lr here, where full fine-tuning moves it lr)."""
    config = base_recipe([click_source()], run_dir="runs/train_click_lora")
    config.warm_start.lora = False
    config.lora = LoRA.Config(
        rank=8, alpha=16, tower_modules=("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"), merger_modules=("mlp.0", "mlp.2")
    )
    config.optim.lr = 2e-3
    return config


def small() -> TrainJob.Config:
    """A smoke run of every stage at CI size: 2 warm-start steps, 2 RL steps."""
    config = ci_size(recipe(), "runs/train_click_small", demonstrations=16, group_size=4)
    config.warm_start.sequences_per_step = 8
    config.eval = Evaluation(episodes=4, every=1, screenshots=1, constant_grid=(2, 2))  # ci_size's baseline grid
    config.checkpoint_every = 1
    return config


def mixed() -> TrainJob.Config:
    """Two harness codebases in one run: desktop click-target and the browser form-fill app, each
    in its own env pool (budget shares) and with its share of every batch (batch shares 3:1)."""
    config = recipe()
    config.run_dir = "runs/train_mixed"
    config.micro_batches.max_tokens_per_micro_batch = 2048  # 320x240 pages, 2 turns
    config.pool.budget = HostBudget(total_hosts=4, shares={"loop": 1, "desktop": 2, "browser": 1})
    config.sources[0].batch_share = 3
    config.sources.append(
        DataSource(
            name="web-forms",
            codebase="browser",
            agent=AgentBehaviour(max_turns=2, max_tokens=40),
            env=EnvSettings(tasks=["form-fill"]),
            group_size=4,
            batch_share=1,
        )
    )
    return config


def mixed_small() -> TrainJob.Config:
    """``mixed`` at CI size: 2 RL steps of 4 groups (3 desktop, 1 browser), a 1-step warm start."""
    config = mixed()
    config.run_dir = "runs/train_mixed_small"
    config.warm_start = WarmStart(episodes=2, steps=1, sequences_per_step=4, lr=1e-2, point_grid=7)
    for source in config.sources:
        source.group_size = 2
    config.driver.groups_per_batch = 4
    config.advantage.sampler.include_min = True
    config.advantage.drop_zero_advantage = False
    config.steps = 2
    config.eval = Evaluation(episodes=2, every=0, screenshots=1, chance=False)
    config.checkpoint_every = 0
    return config
