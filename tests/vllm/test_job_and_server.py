"""The main job on vLLM, and vLLM's own OpenAI server as an endpoint, end to end.

One small run of ``examples/train_click_vllm.py:small`` (a vLLM replica on CPU serves every
rollout and evaluation), sampling at temperature 0.7 and top-p 0.9, is trained once; then ``vllm serve`` of its last checkpoint's ``hf/``
folder is evaluated over HTTP (``vlrl eval --endpoint``) beside ``vlrl eval`` of the same
checkpoint on the embedded engine, on the same held-out seeds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
VLRL = [sys.executable, "-m", "vlrl.cli"]
EPISODES = 16


def run(*args: str, timeout: float = 900) -> dict:
    """A ``vlrl`` command; returns the JSON line it ends with."""
    done = subprocess.run([*VLRL, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("vllm-run") / "run"
    summary = run(
        "train", "examples/train_click_vllm.py:small", "--set", f"run_dir={run_dir}",
        # sampled as vLLM reports: the trainer scores each token by its stored temperature and nucleus
        "--set", "sources[0].agent.temperature=0.7", "--set", "sources[0].agent.top_p=0.9",
    )  # fmt: skip
    assert summary["engine"] == "vllm" and summary["steps"] == 2
    return run_dir


def test_the_main_job_trains_on_vllm_with_the_trainers_logprobs(trained):
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["engine"] == "vllm" and summary["store_keys_left"] == 0
    books = summary["groups"]
    assert books["accepted"] > 0 and books["failed"] == 0 and books["trained"] > 0
    rl = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r.get("phase") == "rl" and "train/ratio_max" in r]
    assert len(rl) == 2
    # Rollouts were sampled by the weights the trainer holds (one push per step, on policy): the
    # trainer's own forward, at each token's stored temperature and nucleus, reproduces vLLM's
    # logprob of every sampled token (ratio = 1 at 1e-4).
    for record in rl:
        assert abs(record["train/ratio_max"] - 1) < 1e-4 and record["train/approx_kl"] < 1e-6, record


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(trained):
    """``vllm serve`` (its OpenAI server, token-in route enabled) of the run's last checkpoint."""
    checkpoint = sorted((trained / "checkpoints").glob("step-*"))[-1]
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint / "hf"),
        "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
        "--limit-mm-per-prompt", '{"image": 1, "video": 0}', "--enable-scale-out",
        "--logprobs-mode", "raw_logprobs", "--generation-config", "vllm",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, f"vllm serve exited: {server.stderr.read()[-3000:]}"
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "vllm serve did not answer /v1/models in 600 s"
                time.sleep(2)
        yield url, checkpoint
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_vlrl_eval_against_vllm_serve_matches_vlrl_eval_of_the_checkpoint(vllm_server, tmp_path):
    url, checkpoint = vllm_server
    common = ["--recipe", "examples/train_click.py", "--episodes", str(EPISODES), "--no-chance"]
    served = run("eval", "--endpoint", url, *common, "--out", str(tmp_path / "served"))
    local = run("eval", str(checkpoint), *common, "--out", str(tmp_path / "local"))
    assert served["endpoint"] == url and served["episodes_played"] == local["episodes_played"] == EPISODES
    assert abs(served["success"] - local["success"]) <= max(served["success_stderr"], local["success_stderr"])
    # Greedy on the same weights in float32: the replies themselves agree (a near-tie may flip one).
    replies = [json.loads((tmp_path / name / "eval.json").read_text())["episodes"] for name in ("served", "local")]
    same = sum(a["seed"] == b["seed"] and a["replies"] == b["replies"] for a, b in zip(*replies))
    assert same >= 0.9 * EPISODES, f"{same} of {EPISODES} episodes answered alike"
