"""AgentLab's GenericAgent, unchanged, on one BrowserGym MiniWoB++ episode: a program for
``ExternalAgent`` (``examples/train_own_agent.py:agentlab``). It imports AgentLab and BrowserGym,
not vlrl, and needs an environment of its own (docs/train-your-agent.md says how to make one).

It sets the agent up as AgentLab's ``miniwob`` benchmark does (HTML and accessibility tree in the
prompt, the ``miniwob_all`` action set), plays as AgentLab's experiment loop does (an action the
agent could not write ends the episode), and prints the episode's reward last.

    PATH=AGENTLAB_VENV/bin:$PATH MINIWOB_URL=file://.../miniwob/html/miniwob/ AGENTLAB_MODEL=TOKENIZER_DIR \\
        OPENAI_BASE_URL=... OPENAI_API_KEY=... python agentlab_miniwob.py --seed 3
"""

import argparse
import json
import os
from copy import deepcopy

import browsergym.miniwob  # noqa: F401  (registers the browsergym/miniwob.* environments)
import gymnasium as gym
from agentlab.agents.generic_agent.agent_configs import FLAGS_GPT_4o
from agentlab.agents.generic_agent.generic_agent import GenericAgentArgs
from agentlab.llm.chat_api import OpenAIModelArgs
from browsergym.experiments.benchmark.configs import DEFAULT_HIGHLEVEL_ACTION_SET_ARGS


def play(task, seed, max_steps, max_retry, max_new_tokens):
    flags = deepcopy(FLAGS_GPT_4o)
    flags.obs.use_html = True  # what GenericAgentArgs.set_benchmark sets for MiniWoB++
    flags.action.action_set = deepcopy(DEFAULT_HIGHLEVEL_ACTION_SET_ARGS["miniwob_all"])
    model = OpenAIModelArgs(
        # AgentLab counts prompt tokens with this name's tokenizer (tiktoken's, else a Hugging Face
        # folder); offline, name the policy's folder. The endpoint answers any model name.
        model_name=os.environ.get("AGENTLAB_MODEL", os.environ.get("VLRL_MODEL", "policy")),
        max_total_tokens=8192,
        max_input_tokens=6144,
        max_new_tokens=max_new_tokens,
        temperature=1.0,
    )
    agent = GenericAgentArgs(chat_model_args=model, flags=flags, max_retry=max_retry).make_agent()
    env = gym.make(f"browsergym/miniwob.{task}", headless=True, action_mapping=agent.action_set.to_python_code)
    try:
        obs, _ = env.reset(seed=seed)
        reward = 0.0
        for _ in range(max_steps):
            action, _ = agent.get_action(agent.obs_preprocessor(obs))
            if action is None:
                break
            obs, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        return float(reward)
    finally:
        env.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="click-test")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("VLRL_SEED", "0")))
    parser.add_argument("--max-steps", type=int, default=1)
    parser.add_argument("--max-retry", type=int, default=2, help="AgentLab's requests per step when a reply does not parse")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    reward = play(args.task, args.seed, args.max_steps, args.max_retry, args.max_new_tokens)
    print(json.dumps({"reward": reward, "success": reward > 0}))


if __name__ == "__main__":
    main()
