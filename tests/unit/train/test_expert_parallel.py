"""Expert parallelism's bookkeeping (``train.expert_parallel``): the dispatch plan's order and
splits, the arrival's reordering, and, with the all-to-alls played by hand between simulated EP
ranks, that dispatch -> experts -> combine gives every token the rows a single rank computes."""

from __future__ import annotations

import pytest
import torch

from vlrl.train.expert_parallel import Arrival, Dispatch


def test_the_plan_sorts_rows_by_expert_stably_and_splits_them_by_rank():
    ids = torch.tensor([[3, 0], [1, 3], [0, 2], [3, 1]])  # (S=4, k=2), 4 experts
    plan = Dispatch.build(ids, 4)
    assert plan.token.tolist() == [0, 2, 1, 3, 2, 0, 1, 3]
    assert plan.slot.tolist() == [1, 0, 0, 1, 1, 0, 1, 0]
    assert ids[plan.token, plan.slot].tolist() == [0, 0, 1, 1, 2, 3, 3, 3]  # the rows' experts, in order
    assert plan.expert_counts == [2, 2, 1, 3]
    assert plan.send_splits(2) == [4, 4]  # experts 0-1 to EP rank 0, 2-3 to EP rank 1
    assert plan.send_splits(4) == [2, 2, 1, 3]
    assert plan.send_splits(1) == [8]


def test_an_expert_id_beyond_the_layer_is_refused():
    with pytest.raises(ValueError, match="expert ids up to 5; the layer has 4 experts"):
        Dispatch.build(torch.tensor([[5, 0]]), 4)


def test_arrivals_grouped_by_source_are_reordered_by_local_expert():
    # rows from source 0: 2 for local expert 0, 1 for expert 1; from source 1: 0 and 2
    arrival = Arrival.build(torch.tensor([[2, 1], [0, 2]]))
    assert arrival.recv_splits == [3, 2]
    assert arrival.expert_counts == [2, 3]
    assert arrival.order.tolist() == [0, 1, 2, 3, 4]  # wire: e0 e0 e1 | e1 e1
    arrival = Arrival.build(torch.tensor([[1, 2], [3, 0], [1, 1]]))
    # wire rows 0: s0e0, 1-2: s0e1, 3-5: s1e0, 6: s2e0, 7: s2e1
    assert arrival.order.tolist() == [0, 3, 4, 5, 6, 1, 2, 7]
    assert arrival.expert_counts == [5, 3]


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_dispatch_and_combine_between_simulated_ranks_equal_one_rank(ep):
    """Each simulated rank's experts are a scaling by a factor of their own; the all-to-alls are
    concatenations of the senders' splits, as ``all_to_all_single`` delivers them."""
    torch.manual_seed(0)
    experts, top_k, hidden = 4, 2, 3
    scale = torch.arange(1.0, experts + 1)  # expert e multiplies its rows by e + 1
    tokens = [torch.randn(n, hidden) for n in (5, 7, 0, 3)[:ep]]  # at ep=2 both send: a reordering to undo
    ids = [torch.stack([torch.randperm(experts)[:top_k] for _ in t]) if len(t) else torch.zeros(0, top_k, dtype=torch.long) for t in tokens]
    plans = [Dispatch.build(i, experts) for i in ids]
    sent = [[rows for rows in t.index_select(0, p.token).split(p.send_splits(ep))] for t, p in zip(tokens, plans, strict=True)]
    local = experts // ep
    back = [[] for _ in range(ep)]  # back[source][dest]: rows dest returns to source
    for dest in range(ep):
        arrivals = torch.tensor([p.expert_counts[dest * local : (dest + 1) * local] for p in plans])  # (ep, E/ep)
        arrival = Arrival.build(arrivals)
        received = torch.cat([sent[source][dest] for source in range(ep)])
        by_expert = arrival.by_expert(received)
        done = torch.cat([chunk * scale[dest * local + j] for j, chunk in enumerate(by_expert.split(arrival.expert_counts))])
        for source, rows in enumerate(arrival.by_source(done).split(arrival.recv_splits)):
            back[source].append(rows)
    for rank in range(ep):
        rows = torch.cat(back[rank])  # grouped by dest = expert order: the plan's own order
        out = torch.zeros_like(tokens[rank]).index_add(0, plans[rank].token, rows)
        want = sum(tokens[rank] * scale[ids[rank][:, j], None] for j in range(top_k)) if len(tokens[rank]) else tokens[rank]
        torch.testing.assert_close(out, want)
