"""The main job (``train_click.py``) on GPU nodes: vLLM serves the rollouts, the trainer runs on CUDA.

    pip install -e '.[vllm]'                                   # on every GPU node (vLLM is CUDA-only)
    vlrl train examples/train_click_vllm.py:vllm
    vlrl train examples/train_click_vllm.py:vllm --set ray.address=auto --set replicas=4

Everything but the engine and the trainer's device is ``train_click.py``'s recipe: each engine
replica is a ``VLLMEngine`` on one GPU, and the trainer's rank takes a GPU of its own, so the run
needs ``replicas + 1`` GPUs. Weights still go trainer -> engines through the Ray object store
after every step; each replica stages them in ``/dev/shm`` for its vLLM workers.
"""

from pathlib import Path

from vlrl.config import load_recipe
from vlrl.job.train_job import TrainJob
from vlrl.rollout.engine import VLLMEngine

MAIN_JOB = Path(__file__).with_name("train_click.py")


def vllm() -> TrainJob.Config:
    """``train_click.py:recipe`` with vLLM engines (one GPU each) and the trainer on a GPU."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_click_vllm"
    config.engine = VLLMEngine.Config(
        gpus=1,
        gpu_memory_utilization=0.5,
        max_model_len=4096,
        max_num_seqs=64,
        max_images_per_prompt=1,  # click-target: one screenshot per prompt
    )
    config.trainer.gpus_per_worker = 1
    return config
