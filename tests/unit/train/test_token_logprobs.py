"""``token_logprobs_and_entropy``: the whole-vocabulary numbers and gradients of log_softmax, in
any chunking and dtype, and those of the tempered top-p nucleus the engine sampled from."""

from __future__ import annotations

import pytest
import torch

from vlrl.train.token_logprobs import token_logprobs_and_entropy

F64 = torch.float64


def _reference(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    logp = (logits.double() / temperature).log_softmax(-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_and_entropy_match_log_softmax_values_and_grads(chunk_size, temperature):
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(7, 11, generator=gen, dtype=F64) * 3).requires_grad_()
    targets = torch.randint(0, 11, (7,), generator=gen)
    got = token_logprobs_and_entropy(logits, targets, temperature, chunk_size=chunk_size)
    expected = _reference(logits, targets, temperature)
    torch.testing.assert_close(got, expected)
    g_lp, g_h = torch.randn(7, generator=gen, dtype=F64), torch.randn(7, generator=gen, dtype=F64)
    grad = torch.autograd.grad(got[0] @ g_lp + got[1] @ g_h, logits)[0]
    expected_grad = torch.autograd.grad(expected[0] @ g_lp + expected[1] @ g_h, logits)[0]
    torch.testing.assert_close(grad, expected_grad)


def test_token_logprobs_and_entropy_compute_bf16_logits_in_float32():
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(5, 40, generator=gen) * 4).bfloat16().requires_grad_()
    targets = torch.randint(0, 40, (5,), generator=gen)
    logp, entropy = token_logprobs_and_entropy(logits, targets, chunk_size=2)
    assert logp.dtype == entropy.dtype == torch.float32
    ref_logp, ref_entropy = _reference(logits.detach(), targets, 1.0)
    torch.testing.assert_close((logp.double(), entropy.double()), (ref_logp, ref_entropy), rtol=1e-5, atol=1e-5)
    (logp.sum() + entropy.sum()).backward()
    assert logits.grad.dtype == torch.bfloat16


def test_token_logprobs_and_entropy_refuse_bad_shapes():
    with pytest.raises(ValueError, match="expected \\(W, V\\) and \\(W,\\)"):
        token_logprobs_and_entropy(torch.zeros(4, 3), torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="temperature=0"):
        token_logprobs_and_entropy(torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64), 0.0)


def _nucleus_reference(logits: torch.Tensor, targets: torch.Tensor, temperature: torch.Tensor, kept: torch.Tensor):
    """Row by row: softmax(z / T) on the k largest logits (the whole row for k = 0), renormalised."""
    logps, entropies = [], []
    for z, y, t, k in zip(logits.double(), targets, temperature.double(), kept):
        z = z / t
        inside = torch.zeros_like(z, dtype=torch.bool)
        inside[z.argsort(descending=True)[: int(k) or len(z)]] = True
        logp = z[inside].log_softmax(-1)
        logps.append(logp[inside[:y].sum()])  # y's place among the kept logits
        entropies.append(-(logp.exp() * logp).sum())
    return torch.stack(logps), torch.stack(entropies)


@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_logprobs_entropy_and_grads_are_those_of_the_tempered_nucleus(chunk_size):
    gen = torch.Generator().manual_seed(2)
    logits = (torch.randn(9, 13, generator=gen, dtype=F64) * 3).requires_grad_()
    kept = torch.tensor([3, 0, 1, 5, 13, 2, 7, 4, 6])
    order = logits.detach().argsort(-1, descending=True)
    targets = order[torch.arange(9), torch.maximum(kept - 1, torch.zeros_like(kept))]  # the nucleus's last (or top) token
    targets[1] = order[1, -1]  # no nucleus: any token, here the least likely
    temperature = torch.tensor([0.7, 0.7, 1.0, 1.3, 0.7, 0.5, 0.7, 1.0, 0.9], dtype=F64)
    got = token_logprobs_and_entropy(logits, targets, temperature, kept, chunk_size=chunk_size)
    expected = _nucleus_reference(logits, targets, temperature, kept)
    torch.testing.assert_close(got, expected)
    g_lp, g_h = torch.randn(9, generator=gen, dtype=F64), torch.randn(9, generator=gen, dtype=F64)
    grad = torch.autograd.grad(got[0] @ g_lp + got[1] @ g_h, logits)[0]
    expected_grad = torch.autograd.grad(expected[0] @ g_lp + expected[1] @ g_h, logits)[0]
    torch.testing.assert_close(grad, expected_grad)
    outside = torch.ones_like(grad, dtype=torch.bool).scatter_(1, order[:, :6], False)
    assert (grad[0][outside[0]] == 0).all() and (grad[0] != 0).sum() == 3  # tokens outside row 0's nucleus get none


def test_a_sampled_token_just_outside_the_trainer_s_top_k_is_kept():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0]], dtype=F64)  # the engine kept 2 and drew token 2 (its logits differed)
    logp, _ = token_logprobs_and_entropy(logits, torch.tensor([2]), torch.tensor([1.0], dtype=F64), torch.tensor([2]))
    torch.testing.assert_close(logp, (logits[0, :3]).log_softmax(-1)[2:])


def test_temperature_1_and_no_nucleus_give_the_whole_vocabulary_numbers_bit_for_bit():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 17, generator=gen) * 3
    targets = torch.randint(0, 17, (6,), generator=gen)
    plain = token_logprobs_and_entropy(logits, targets)
    rows = token_logprobs_and_entropy(logits, targets, torch.ones(6), torch.zeros(6, dtype=torch.int64))
    assert torch.equal(plain[0], rows[0]) and torch.equal(plain[1], rows[1])
    logp = torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0]
    torch.testing.assert_close(plain[0], logp, rtol=0, atol=1e-6)


def test_token_logprobs_and_entropy_refuse_bad_sampling_rows():
    logits, targets = torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="temperature \\(4,\\); expected one value > 0 per row"):
        token_logprobs_and_entropy(logits, targets, torch.tensor([1.0, 0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="nucleus \\(4,\\); expected one count in \\[0, 3\\]"):
        token_logprobs_and_entropy(logits, targets, 1.0, torch.tensor([0, 4, 1, 1]))
