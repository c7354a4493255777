"""Check ``VLLMEngine`` against a Hugging Face forward on a GPU (needs vLLM: pip install -e '.[vllm]').

    python scripts/gpu/check_vllm_engine.py                    # a tiny Qwen2-VL built offline
    python scripts/gpu/check_vllm_engine.py --model PATH       # or a local Qwen2-VL checkpoint

One engine replica (one GPU, through Ray) serves a prompt with a screenshot, as an Agent Loop
sends it (image pads expanded). Each line is PASS or FAIL; the exit code is 1 if any failed:

- generate: vLLM rebuilt exactly the prompt ids sent, and the sampled tokens' logprobs match
  ``log_softmax`` of an fp32 Hugging Face forward of prompt + answer (within ``--tol``);
- score: the prompt logprobs match the same forward at every position;
- cache: a reference to an image the replica never saw is a ``CacheMiss`` naming it, a
  reference to one it holds is served;
- update_weights: after pushing the full state dict with the LM head and the vision merger
  perturbed, logprobs match the forward with the new weights and moved away from the old ones,
  under the new policy version.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import ray
import torch
from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

from vlrl.mm import content_hash
from vlrl.models import build_tiny
from vlrl.rollout.engine import VLLMEngine
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart, SamplingParams, ScoreResult

failures: list[str] = []


def report(ok: bool, what: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def screen(width: int, height: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), rng.integers(0, 256, 3), dtype=np.uint8)
    pixels[height // 4 : height // 2, width // 4 : width // 2] = rng.integers(0, 256, 3)
    return pixels


def part(pixels: np.ndarray, *, send: bool = True) -> ImagePart:
    return ImagePart(content_hash(pixels), pixels.shape[1], pixels.shape[0], pixels if send else None)


def prompt_ids(processor, text: str, shot: np.ndarray) -> np.ndarray:
    """The ids an Agent Loop sends: a chat turn with the image pad expanded by the processor."""
    chat = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        f"<|vision_start|><|image_pad|><|vision_end|>{text}<|im_end|>\n<|im_start|>assistant\n"
    )
    return processor(text=[chat], images=[shot], return_tensors="np")["input_ids"][0].astype(np.int32)


def hf_logprobs(model, processor, ids: np.ndarray, shot: np.ndarray) -> torch.Tensor:
    """``log p(ids[t] | ids[:t])`` for t >= 1 from one fp32 forward: (len(ids) - 1,)."""
    tokens = torch.from_numpy(ids.astype(np.int64))[None].cuda()
    images = processor.image_processor(images=[shot], return_tensors="pt")
    with torch.inference_mode():
        logits = model(
            input_ids=tokens,
            pixel_values=images["pixel_values"].cuda(),
            image_grid_thw=images["image_grid_thw"].cuda(),
            mm_token_type_ids=(tokens == model.config.image_token_id).int(),
        ).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, tokens[0, 1:, None])[:, 0].cpu()


def close(name: str, got: np.ndarray, want: torch.Tensor, tol: float) -> float:
    gap = float(np.abs(got - want.numpy()).max()) if len(got) else float("inf")
    report(gap <= tol, f"{name}: max |vLLM - HF| logprob gap {gap:.4f} <= {tol}")
    return gap


def check(model_path: Path, args: argparse.Namespace) -> None:
    processor = AutoProcessor.from_pretrained(model_path)
    model = Qwen2VLForConditionalGeneration.from_pretrained(model_path, dtype=torch.float32).cuda().eval()
    config = VLLMEngine.Config(
        dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=2048, max_num_seqs=8, max_images_per_prompt=1, enforce_eager=True, cpus=0,
    )  # fmt: skip
    engine = config.build(model_path=str(model_path))
    shot, never = screen(320, 240, 0), screen(320, 240, 1)
    prompt = prompt_ids(processor, "Click the OK button.", shot)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)

    first = ray.get(engine.generate.remote(GenerateRequest("g0", "t", prompt, (part(shot),), greedy)))
    report(isinstance(first, GenerateResult) and len(first.token_ids) > 0, f"generate answered {first!r:.120}")
    if not isinstance(first, GenerateResult):
        return
    full = np.concatenate([prompt, first.token_ids])
    before = hf_logprobs(model, processor, full, shot)
    close("generate", first.logprobs, before[len(prompt) - 1 :], args.tol)
    report(first.policy_version == 0, f"first answer under policy version {first.policy_version} (expected 0)")

    scored = ray.get(engine.score.remote(GenerateRequest("s0", "t", full, (part(shot, send=False),))))
    report(isinstance(scored, ScoreResult), f"score answered {type(scored).__name__}")
    if isinstance(scored, ScoreResult):
        report(scored.logprobs[0] == 0, "score: position 0 is 0")
        close("score", scored.logprobs[1:], before, args.tol)

    miss = ray.get(engine.generate.remote(GenerateRequest("m0", "t", prompt, (part(never, send=False),), greedy)))
    report(isinstance(miss, CacheMiss) and miss.missing == (content_hash(never),), f"unknown image: {miss!r:.120}")
    hit = ray.get(engine.generate.remote(GenerateRequest("h0", "t", prompt, (part(shot, send=False),), greedy)))
    report(isinstance(hit, GenerateResult), f"known image by reference: {type(hit).__name__}")

    state = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    for name in ("lm_head.weight", "model.visual.merger.mlp.0.weight"):
        state[name] += args.perturb * torch.randn(state[name].shape, generator=generator)
    ray.get(engine.update_weights.remote(state, 1))
    model.load_state_dict(state)
    after = ray.get(engine.generate.remote(GenerateRequest("g1", "t", prompt, (part(shot, send=False),), greedy)))
    report(isinstance(after, GenerateResult) and after.policy_version == 1, f"after the update: {after!r:.120}")
    if isinstance(after, GenerateResult):
        tol = args.tol
        full = np.concatenate([prompt, after.token_ids])
        answer = slice(len(prompt) - 1, None)
        close("generate after update_weights", after.logprobs, hf_logprobs(model, processor, full, shot)[answer], tol)
        base = Qwen2VLForConditionalGeneration.from_pretrained(model_path, dtype=torch.float32).cuda().eval()
        moved = float(np.abs(after.logprobs - hf_logprobs(base, processor, full, shot)[answer].numpy()).max())
        report(moved > 10 * tol, f"the update moved logprobs by {moved:.4f} (> {10 * tol}) from the old weights")
    ray.kill(engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a local Qwen2-VL checkpoint (default: build a tiny one)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--tol", type=float, default=0.05, help="logprob tolerance vs fp32 HF (default: %(default)s)")
    parser.add_argument("--perturb", type=float, default=0.5, help="scale of the weight perturbation")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    args = parser.parse_args()
    ray.init(num_gpus=1, include_dashboard=False)
    try:
        with tempfile.TemporaryDirectory() as folder:
            model_path = args.model or build_tiny("qwen2_vl", Path(folder) / "tiny", rope_theta=10.0)
            check(model_path, args)
    finally:
        ray.shutdown()
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
