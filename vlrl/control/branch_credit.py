"""Advantages of a branching group: the episode estimate, shared prefixes, and the branch points.

A branching source's group is trees (``rollout.branching``): each root episode played from reset,
and branches that replayed its first ``t`` turns and played on from there (``SeqMeta.branch_of =
(root, t)``). A branch's prefix sits in its prompt; the prefix's tokens are trained once, in the
root's sequence. Each turn's tokens get

    A_turn = A_prefix + weight * A_point

- ``A_prefix``, the episode estimate of the turn: the mean episode advantage (the group's
  estimator over every trajectory of the group, as for a flat group) of the trajectories that
  took this turn's move. A branch's own turns are its alone, so they get its own episode
  advantage; the root's turn ``k`` was also taken by every branch that branched after it
  (``t > k``), so it gets the mean over the root and those branches: the prefix is judged by all
  the episodes that continued it, as Tree-GRPO credits a shared node with its subtree's leaves.
- ``A_point``, the intra-subtree estimate (Tree-GRPO's): the siblings of a branch point, the root
  and its branches at ``t``, share everything before ``t``, so their rewards differ only by what
  they did from ``t`` on. The group's estimator over the siblings' rewards gives each one's
  advantage there; a branch gets it on all its turns, the root on its turns from ``t`` up to its
  next branch point (which has its own siblings). The root's turns before its first point get 0.

With GRPO the episode term is the inter-tree estimate, normalised over the whole group; the point
term has its own mean and std per point, so a point whose siblings all agree adds nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from vlrl.control.advantages import Estimator, group_advantages
from vlrl.records import SeqMeta


def branch_turn_advantages(
    metas: Sequence[SeqMeta],
    rewards: Sequence[float],
    episode: np.ndarray,
    estimator: Estimator,
    *,
    weight: float,
    eps: float,
) -> list[np.ndarray]:
    """Per sequence, ``(turns,)`` float64: each request's advantage (module docstring).
    ``rewards`` and ``episode`` (the group's episode advantages, ``(n,)``) follow ``metas``; the
    sequences of one trajectory (equal ``sample_index``) are its consecutive requests, in order."""
    members: dict[int, list[int]] = defaultdict(list)  # trajectory -> its sequences, in order
    for i, meta in enumerate(metas):
        members[meta.sample_index].append(i)
    reward_of = {index: rewards[seqs[0]] for index, seqs in members.items()}
    advantage_of = {index: float(np.mean([episode[i] for i in seqs])) for index, seqs in members.items()}
    branches: dict[int, list[tuple[int, int]]] = defaultdict(list)  # root -> (turn, branch) pairs
    for index, seqs in members.items():
        origin = metas[seqs[0]].branch_of
        if origin:
            if origin[0] not in members:
                raise ValueError(
                    f"group {metas[0].group_id!r}: trajectory {index} branched from {origin[0]}, which is not in the group"
                )
            branches[origin[0]].append((origin[1], index))
    point_advantage: dict[tuple[int, int], float] = {}  # (turn of the point, trajectory) -> A_point
    for root, pairs in branches.items():
        for turn in sorted({t for t, _ in pairs}):
            siblings = [root, *(b for t, b in pairs if t == turn)]
            values = group_advantages([reward_of[s] for s in siblings], estimator, eps=eps)
            point_advantage.update({(turn, s): float(v) for s, v in zip(siblings, values)})
    out: list[tuple[int, np.ndarray]] = []  # (sequence, its per-request advantages)
    for index, seqs in members.items():
        origin = metas[seqs[0]].branch_of
        turn = origin[1] if origin else 0  # the trajectory's first own request
        points = sorted({t for t, _ in branches.get(index, ())})
        for i in seqs:
            values = np.zeros(metas[i].turns)
            for j in range(metas[i].turns):
                if origin:
                    prefix, point = advantage_of[index], point_advantage[(origin[1], index)]
                else:
                    later = [b for t, b in branches.get(index, ()) if t > turn]
                    prefix = float(np.mean([advantage_of[index], *(advantage_of[b] for b in later)]))
                    reached = [t for t in points if t <= turn]
                    point = point_advantage[(reached[-1], index)] if reached else 0.0
                values[j] = prefix + weight * point
                turn += 1
            out.append((i, values))
    return [values for _, values in sorted(out, key=lambda pair: pair[0])]
