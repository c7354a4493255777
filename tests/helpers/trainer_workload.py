"""The single-process reference of a trainer step on ``vlrl.bench.trainer_workload``'s batch: a
plain Hugging Face forward of each sequence on its own (no packing, no parallelism) and the same
loss over global denominators."""

from __future__ import annotations

import torch
from transformers import AutoProcessor

from vlrl.bench.trainer_workload import Workload, reference_token_logprobs, vision_inputs
from vlrl.models import family_of
from vlrl.train.loss import Normaliser, PolicyLoss
from vlrl.train.token_logprobs import token_logprobs_and_entropy


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
        output = model(**vision_inputs(model, processor, row["token_ids"], pixels), output_router_logits=moe is not None)
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

