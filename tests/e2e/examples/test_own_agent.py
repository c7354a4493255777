"""examples/train_own_agent.py: an agent program that imports only ``openai`` trains through
vlrl unchanged (DataSource.external), beside a flaky program written here that crashes, hangs or
prints garbage on one seed each: those groups leave as failed with their reasons, the books hold
without drift, and no store key is left."""

from __future__ import annotations

import sys
import textwrap

from vlrl.config import AgentBehaviour, DataSource, ExternalAgent, load_recipe
from vlrl.job.metrics_log import read_metrics

RECIPE = "examples/train_own_agent.py:small"

FLAKY = textwrap.dedent(
    '''
    import os, sys, time
    from openai import OpenAI
    seed = int(os.environ["VLRL_SEED"])
    if seed == 1:
        raise SystemExit("flaky agent: lost its browser")
    if seed == 2:
        time.sleep(600)
    reply = OpenAI().chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    print(reply.choices[0].message.content)
    print("not a reward" if seed == 3 else '{"reward": 0.25, "success": false}')
    '''
)


def test_an_openai_agent_trains_and_flaky_runs_are_counted_failures(ray_session, tmp_path):
    flaky = tmp_path / "flaky_agent.py"
    flaky.write_text(FLAKY)
    # evaluations beyond one episode, plots and TensorBoard are the canonical run's to test
    config = load_recipe(RECIPE, [f"run_dir={tmp_path / 'run'}", "eval.episodes=1", "plots=false", "tensorboard=false"])
    config.sources.append(
        DataSource(
            name="flaky",
            # only seed 2 runs into the limit; the rest must start Python on a loaded CI machine
            external=ExternalAgent(command=[sys.executable, str(flaky)], time_limit_s=60),
            agent=AgentBehaviour(max_turns=1, max_tokens=4),
            group_size=2,
        )
    )
    summary = config.build().run()
    assert summary["steps"] == 2 and summary["store_keys_left"] == 0
    books = summary["groups"]
    assert books["drift"] == [] and books["trained"] == 4
    reasons = " | ".join(books["reasons"])
    for kind in ("agent crashed", "agent hung", "reward is garbage"):
        assert kind in reasons, reasons
    assert books["failed"] == sum(books["reasons"].values()) == 3  # seeds 1, 2 and 3 of the flaky source
    rl = [r for r in read_metrics(tmp_path / "run") if r["phase"] == "rl"]
    assert all(r["batch/click-agent/groups"] == 1 and r["batch/flaky/groups"] == 1 for r in rl)
    assert all(r["train/loss"] == r["train/loss"] for r in rl)  # the traced sequences trained (a number, not NaN)


def test_a_program_warm_starts_on_its_own_runs_against_its_teacher(ray_session, tmp_path):
    """examples/train_own_agent.py:counter_small: the multi-turn counter agent plays 8 runs against
    counter_teacher.py, every won run trains the warm start, and RL follows; its baselines are
    played through the program (the teacher as its oracle)."""
    overrides = [f"run_dir={tmp_path / 'run'}", "plots=false", "tensorboard=false", "eval.chance=true", "eval.constant_grid=[2,2]"]
    summary = load_recipe("examples/train_own_agent.py:counter_small", overrides).build().run()
    records = read_metrics(tmp_path / "run")
    demos = next(r for r in records if "demos/sequences" in r)
    assert demos["demos/sequences"] == demos["demos/episodes"] == 8 and demos["demos/dropped"] == {}  # the teacher wins each
    fits = [r["train/loss"] for r in records if r["phase"] == "warm-start" and "train/loss" in r]
    assert len(fits) == 4 and fits[-1] < fits[0]  # the traces trained
    assert summary["steps"] == 2 and summary["store_keys_left"] == 0
    books = summary["groups"]
    assert books["drift"] == [] and books["failed"] == 0 and books["trained"] == 4
    counter = summary["sources"]["counter-agent"]
    assert counter["oracle"] == 1.0  # the teacher, played through the program on the held-out seeds
    assert counter["chance"] is not None and counter["constant"] is not None and summary["success_constant"] == counter["constant"]
