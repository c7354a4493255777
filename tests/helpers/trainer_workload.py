"""A small packed multi-turn VLM batch for trainer tests, and its single-process reference.

Sequences look like GUI-agent trajectories: text, ``<|vision_start|>`` + image tokens +
``<|vision_end|>``, more text, a second screenshot (group members share the first one), a
response. Rollout logprobs are the reference model's own plus noise, so ratios sit near 1 and
most tokens carry gradient. The reference is a plain Hugging Face forward of each sequence on
its own (no packing, no parallelism) and the same loss over global denominators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoProcessor

from tests.helpers.records import seq_meta
from vlrl.mm import patch_rule_of, store_image
from vlrl.models import family_of
from vlrl.records import PIXELS, SeqMeta
from vlrl.store import LocalStore, PayloadStore
from vlrl.train.loss import Normaliser, PolicyLoss
from vlrl.train.token_logprobs import token_logprobs_and_entropy

SIZES = [(56, 84), (112, 112), (84, 168), (140, 56)]


@dataclass
class Workload:
    metas: list[SeqMeta]
    rows: dict[str, dict[str, np.ndarray]]
    images: dict[str, np.ndarray]  # store key -> pixels

    def store(self, store: PayloadStore | None = None) -> PayloadStore:
        """``store`` (a fresh ``LocalStore`` by default) holding every image and row."""
        store = LocalStore() if store is None else store
        for pixels in self.images.values():
            store_image(store, pixels, holder="workload")
        for key, fields in self.rows.items():
            store.put(key, fields)
        return store


def make_workload(model_path, *, groups: int = 2, members: int = 3, seed: int = 0) -> Workload:
    processor = AutoProcessor.from_pretrained(model_path)
    model = family_of(model_path).load(model_path, dtype=torch.float64)
    rule = patch_rule_of(processor)
    tok = processor.tokenizer.convert_tokens_to_ids
    image_id, start_id, end_id = tok("<|image_pad|>"), tok("<|vision_start|>"), tok("<|vision_end|>")
    rng = np.random.default_rng(seed)
    scratch = LocalStore()
    images: dict[str, np.ndarray] = {}

    def screenshot(k: int):
        h, w = SIZES[k % len(SIZES)]
        pixels = np.random.default_rng(500 + k).integers(0, 256, (h, w, 3), dtype=np.uint8)
        meta = store_image(scratch, pixels, holder="workload", rule=rule)
        images[meta.store_key] = pixels
        return meta

    metas, rows = [], {}
    for g in range(groups):
        first = screenshot(10 * g)
        for m in range(members):
            shots = [first, screenshot(10 * g + 1 + m)]
            ids, offsets = [], []
            for index, shot in enumerate(shots):
                ids += rng.integers(20, 200, int(rng.integers(3, 9))).tolist() + [start_id]
                offsets.append((len(ids), index))
                ids += [image_id] * shot.num_tokens + [end_id]
            prompt = len(ids)
            ids += rng.integers(20, 200, int(rng.integers(6, 20))).tolist()
            tokens = np.array(ids, np.int32)
            mask = np.zeros(len(ids), bool)
            mask[prompt:] = True
            key = f"train/g{g}m{m}"
            logprobs = reference_token_logprobs(model, processor, tokens, [images[s.store_key] for s in shots])
            rows[key] = {
                "token_ids": tokens,
                "logprobs": np.where(mask, logprobs + rng.normal(0, 0.05, len(ids)), 0).astype(np.float32),
                "loss_mask": mask,
                "advantages": np.where(mask, rng.normal(0, 1), 0).astype(np.float32),
            }
            metas.append(seq_meta(
                key, len(ids), group_id=f"g{g}", sample_index=m, turns=2, num_response_tokens=int(mask.sum()),
                images=tuple(shots), image_offsets=tuple(offsets),
            ))  # fmt: skip
    return Workload(metas, rows, images)


def _vision(model, processor, tokens: np.ndarray, pixels: list[np.ndarray]) -> dict:
    ids = torch.as_tensor(tokens, dtype=torch.long)[None]
    processed = processor.image_processor(images=pixels, return_tensors="pt")
    return {
        "input_ids": ids,
        "pixel_values": processed["pixel_values"].to(model.dtype),
        "image_grid_thw": processed["image_grid_thw"],
        "mm_token_type_ids": (ids == model.config.image_token_id).int(),
    }


def reference_token_logprobs(model, processor, tokens: np.ndarray, pixels: list[np.ndarray]) -> np.ndarray:
    """``log p(token t | tokens < t)`` with 0 at t = 0: ``(T,)``, as the rollout records them."""
    with torch.no_grad():
        logits = model(**_vision(model, processor, tokens, pixels)).logits[0]
    out = torch.log_softmax(logits[:-1].double(), -1).gather(1, torch.as_tensor(tokens[1:], dtype=torch.long)[:, None])[:, 0]
    return np.concatenate([[0.0], out.numpy()])


def reference_step(
    model_path,
    work: Workload,
    loss_config: PolicyLoss.Config,
    *,
    lr: float,
    betas: tuple[float, float],
    max_grad_norm: float,
    kl_reference=None,
    adapt=None,
) -> tuple[float, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Loss, every parameter's gradient, and the weights after clipping and one AdamW step, each
    sequence forwarded on its own; ``kl_reference``: the checkpoint whose logprobs the KL term
    compares against; ``adapt``: called on the loaded model first (LoRA adapters put in)."""
    processor = AutoProcessor.from_pretrained(model_path)
    model = family_of(model_path).load(model_path, dtype=torch.float64)
    if adapt is not None:
        adapt(model)
    reference = None if kl_reference is None else family_of(kl_reference).load(kl_reference, dtype=torch.float64)
    loss_fn = loss_config.build()
    counts = [int(work.rows[m.key]["loss_mask"][1:].sum()) for m in work.metas]
    normaliser = Normaliser(tokens=sum(counts), sequences=sum(n > 0 for n in counts))
    total = torch.zeros((), dtype=torch.float64)
    text = model.config.get_text_config()
    moe = (text.num_experts, text.num_experts_per_tok) if hasattr(text, "num_experts") else None
    router_aux_coef = loss_config.router_aux_coef
    if router_aux_coef is None:
        router_aux_coef = getattr(text, "router_aux_loss_coef", 0.0)
    for meta, n in zip(work.metas, counts, strict=True):
        row = work.rows[meta.key]
        pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
        output = model(**_vision(model, processor, row["token_ids"], pixels), output_router_logits=moe is not None)
        logits = output.logits[0, :-1]  # (T-1, V)
        targets = torch.as_tensor(row["token_ids"][1:], dtype=torch.long)
        logprobs, entropy = token_logprobs_and_entropy(logits, targets)
        ref_logprobs = None
        if reference is not None:
            ref_logprobs = torch.as_tensor(reference_token_logprobs(reference, processor, row["token_ids"], pixels)[1:])
        mask = torch.as_tensor(row["loss_mask"][1:])
        out = loss_fn(
            logprobs,
            old_logprobs=torch.as_tensor(row["logprobs"][1:]),
            advantages=torch.as_tensor(row["advantages"][1:]),
            loss_mask=mask,
            seq_loss_tokens=torch.full(mask.shape, float(n), dtype=torch.float64) * mask,
            normaliser=normaliser,
            ref_logprobs=ref_logprobs,
            entropy=entropy,
        )
        total = total + out.loss
        if moe is not None:
            aux = balance_of_one_sequence(output.router_logits, *moe)
            torch.testing.assert_close(aux.float(), output.aux_loss.float(), rtol=1e-5, atol=0)  # the family's own formula
            total = total + router_aux_coef * aux / normaliser.sequences
    total.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    params = [p for p in model.parameters() if p.grad is not None]
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=0.0).step()
    weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
    return total.item(), grads, weights


def balance_of_one_sequence(router_logits, experts: int, top_k: int) -> torch.Tensor:
    """transformers' ``load_balancing_loss_func`` on one sequence's router logits (one ``(T, E)``
    per sparse layer), written out in float64 (transformers sums in float32)."""
    probs = [torch.softmax(logits.double(), dim=-1) for logits in router_logits]
    rows = len(probs) * probs[0].shape[0]
    picks = sum(torch.nn.functional.one_hot(torch.topk(p, top_k, dim=-1).indices, experts).sum((0, 1)) for p in probs) / rows
    mean_probs = sum(p.sum(0) for p in probs) / rows
    return experts * (picks * mean_probs).sum()


__all__ = ["PIXELS", "Workload", "make_workload", "reference_step"]
