"""``Layout``: the training ranks as DP x CP x TP, and every question of who holds which token.

Rank order is TP fastest, then CP, then DP (as torchtitan and Megatron do), so a TP group is a
run of consecutive ranks and shares a node's fast interconnect::

    rank = (dp_rank * cp + cp_rank) * tp + tp_rank

Token placement of one packed micro-batch of length ``L`` on one DP rank:

1. **Padding.** ``L`` is padded up to a multiple of ``2 * cp`` (when ``cp > 1``), times ``tp``
   (when sequence parallelism is on), as Megatron pads. Padding is a count, never a tensor: the
   ``padded_len(L) - L`` pad positions follow the last real token, and the packer fills them
   (pad id, loss mask off) when it cuts a window.
2. **CP window.** The padded sequence is cut into ``2 * cp`` equal chunks and CP rank ``i``
   holds chunks ``i`` and ``2*cp - 1 - i`` (Llama-3's load-balanced causal split): under a causal
   mask, a query at position ``q`` attends to ``q + 1`` keys, so an early chunk is cheap and a
   late one dear; pairing chunk ``i`` with its mirror gives every CP rank the same work.
3. **TP shard.** With sequence parallelism, the CP window (its chunks concatenated in order) is
   split into ``tp`` equal contiguous shards, one per TP rank; without it, every TP rank of the
   CP rank holds the whole window.

**Expert parallelism** (``ep``, mixture-of-experts families only) splits each sparse layer's
experts over ``ep`` ranks of the DP x CP ranks, as torchtitan places EP (inside the data-parallel
ranks, CP included) and Megatron does (an EP group within the data-parallel group)::

    dp_cp = dp_rank * cp + cp_rank              # the rank's index among the DP x CP ranks
    ep_rank, edp_rank = dp_cp % ep, dp_cp // ep

so an EP group is ``ep`` consecutive DP x CP indices at one TP coordinate, and the
``dp * cp / ep`` ranks at the same ``ep_rank`` (expert data parallelism, "edp") hold the same
experts. Tokens stay where this layout puts them; only a sparse layer's routed rows travel
(``train.expert_parallel``).

The packer asks which token ranges to fetch (``cp_window``), the multimodal path asks where to
send each image embedding row (``owners``), ``train.parallel`` builds the device mesh from
``mesh_dims``; all get their answer here. ``Layout`` is also the config of the trainer's ranks
(``TrainJob.Config.layout``; ``--set layout.cp=2``): a mutable dataclass whose fields
are checked on construction and again by ``vlrl.config.validate`` after overrides.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Annotated, NamedTuple

from vlrl.config import ConfigError, Ge, validate


class Coords(NamedTuple):
    dp: int
    cp: int
    tp: int


@dataclass(slots=True)
class Layout:
    """The training ranks: ``dp x cp x tp`` of them, TP fastest, and sequence parallelism on or off.

    Positional order is the coordinate order, ``Layout(dp, cp, tp)``."""

    dp: Annotated[int, Ge(1)] = 1
    """Data-parallel replicas: each trains on its own micro-batches."""
    cp: Annotated[int, Ge(1)] = 1
    """Context-parallel ranks sharing one packed micro-batch along the sequence."""
    tp: Annotated[int, Ge(1)] = 1
    """Tensor-parallel ranks sharing every layer's weights."""
    sequence_parallel: bool = True
    """Whether TP ranks also split the sequence (each holds 1/tp of its CP window)."""
    ep: Annotated[int, Ge(1)] = 1
    """Expert-parallel ranks: each sparse layer's experts are split over ``ep`` of the DP x CP
    ranks (each holds ``experts / ep`` whole ones) and routed rows travel by all-to-all; 1: every
    rank holds every expert (FSDP-sharded). Mixture-of-experts families only."""

    def __post_init__(self) -> None:
        """A layout built in code is checked at once (one built by ``--set`` when the tree is validated)."""
        try:
            validate(self)
        except ConfigError as error:
            raise error.under("Layout") from None

    def check(self) -> None:
        if (self.dp * self.cp) % self.ep:
            raise ConfigError(
                "ep", self.ep, f"a divisor of dp x cp = {self.dp * self.cp}: expert parallelism splits the experts over DP x CP ranks"
            )

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp

    @property
    def mesh_dims(self) -> tuple[tuple[str, int], ...]:
        """The device mesh's ``(name, size)`` dimensions, slowest first: the rank order above."""
        return (("dp", self.dp), ("cp", self.cp), ("tp", self.tp))

    @property
    def expert_mesh_dims(self) -> tuple[tuple[str, int], ...]:
        """The same ranks as the experts see them, slowest first: ``(edp, ep, tp)`` (``ep_rank`` above)."""
        return (("edp", self.dp * self.cp // self.ep), ("ep", self.ep), ("tp", self.tp))

    def check_world(self, world_size: int) -> None:
        """Fail unless the job really has ``dp * cp * tp`` ranks."""
        if world_size != self.world_size:
            raise ValueError(
                f"world size {world_size} does not match the layout dp={self.dp} x cp={self.cp} x tp={self.tp}"
                f" = {self.world_size}"
            )

    # ---- ranks

    def rank(self, dp: int, cp: int, tp: int) -> int:
        """The global rank at coordinates ``(dp, cp, tp)``."""
        for name, value, size in (("dp", dp, self.dp), ("cp", cp, self.cp), ("tp", tp, self.tp)):
            _check_index(f"{name} rank", value, size)
        return (dp * self.cp + cp) * self.tp + tp

    def coords(self, rank: int) -> Coords:
        """The ``(dp, cp, tp)`` coordinates of a global rank."""
        _check_index("rank", rank, self.world_size)
        rest, tp = divmod(rank, self.tp)
        dp, cp = divmod(rest, self.cp)
        return Coords(dp, cp, tp)

    def tp_group(self, rank: int) -> list[int]:
        """Ranks that share ``rank``'s layer shards (same DP and CP coordinates)."""
        dp, cp, _ = self.coords(rank)
        return [self.rank(dp, cp, t) for t in range(self.tp)]

    def cp_group(self, rank: int) -> list[int]:
        """Ranks that share ``rank``'s packed micro-batches along the sequence (same DP and TP)."""
        dp, _, tp = self.coords(rank)
        return [self.rank(dp, c, tp) for c in range(self.cp)]

    def dp_group(self, rank: int) -> list[int]:
        """Ranks that hold the same weight shard as ``rank`` and all-reduce its gradients."""
        _, cp, tp = self.coords(rank)
        return [self.rank(d, cp, tp) for d in range(self.dp)]

    # ---- tokens

    @property
    def pad_multiple(self) -> int:
        """Packed lengths are padded to a multiple of this: ``2*cp`` chunks (cp > 1), each cut by ``tp`` (SP)."""
        return (2 * self.cp if self.cp > 1 else 1) * (self.tp if self.sequence_parallel else 1)

    def padded_len(self, total_len: int) -> int:
        """``total_len`` rounded up to ``pad_multiple``; the difference is padding at the end."""
        if not isinstance(total_len, Integral) or isinstance(total_len, bool) or total_len < 0:
            raise ValueError(f"packed length {total_len!r}; expected an int >= 0")
        return -(-int(total_len) // self.pad_multiple) * self.pad_multiple

    def window_len(self, total_len: int) -> int:
        """Tokens every CP rank holds of a packed micro-batch of ``total_len`` tokens (padding included)."""
        return self.padded_len(total_len) // self.cp

    def cp_window(self, total_len: int, cp_rank: int) -> list[tuple[int, int]]:
        """Token ranges ``[start, stop)`` of the padded micro-batch that CP rank ``cp_rank`` holds,
        in window order: chunks ``cp_rank`` and ``2*cp - 1 - cp_rank``, merged when adjacent
        (always for cp = 1, for the middle rank ``cp - 1`` otherwise). Empty for an empty micro-batch."""
        _check_index("cp rank", cp_rank, self.cp)
        padded = self.padded_len(total_len)
        if padded == 0:
            return []
        if self.cp == 1:  # both chunks, whatever their parity
            return [(0, padded)]
        chunk = padded // (2 * self.cp)  # (2*cp chunks of `chunk` tokens) == padded
        first = (cp_rank * chunk, (cp_rank + 1) * chunk)
        mirror = 2 * self.cp - 1 - cp_rank
        second = (mirror * chunk, (mirror + 1) * chunk)
        if first[1] == second[0]:
            return [(first[0], second[1])]
        return [first, second]

    def cp_pad(self, total_len: int, cp_rank: int) -> int:
        """Pad positions in CP rank ``cp_rank``'s window. They are always the window's tail: padding
        ends the packed sequence, so if the first chunk holds any, the later mirror chunk is all pad."""
        real = sum(max(0, min(stop, total_len) - start) for start, stop in self.cp_window(total_len, cp_rank))
        return self.window_len(total_len) - real

    def tp_shard(self, window_len: int, tp_rank: int) -> tuple[int, int]:
        """The range ``[start, stop)`` of a CP window that TP rank ``tp_rank`` holds: an equal
        contiguous 1/tp of it with sequence parallelism, the whole window without. ``window_len``
        must divide by ``tp`` (``window_len()`` of a padded length always does)."""
        _check_index("tp rank", tp_rank, self.tp)
        if not self.sequence_parallel:
            return (0, window_len)
        if window_len % self.tp:
            raise ValueError(
                f"CP window of {window_len} tokens does not split into tp={self.tp} equal shards;"
                f" pad the packed length with Layout.padded_len"
            )
        shard = window_len // self.tp
        return (tp_rank * shard, (tp_rank + 1) * shard)

    def owners(self, position: int, total_len: int, dp_rank: int) -> list[int]:
        """Global ranks holding token ``position`` of DP rank ``dp_rank``'s packed micro-batch of
        ``total_len`` tokens: one TP rank of the owning CP rank with sequence parallelism, all its
        TP ranks without. Pad positions (``total_len <= position < padded_len``) have owners too."""
        padded = self.padded_len(total_len)
        _check_index("packed position", position, padded)
        chunk = padded // (2 * self.cp)
        index, within = divmod(position, chunk) if self.cp > 1 else (0, position)
        if index < self.cp:  # the rank's first chunk: it opens the window
            cp_rank, local = index, within
        else:  # the mirror chunk: it follows the first one in the window
            cp_rank, local = 2 * self.cp - 1 - index, chunk + within
        if not self.sequence_parallel:
            return [self.rank(dp_rank, cp_rank, t) for t in range(self.tp)]
        shard = (padded // self.cp) // self.tp
        return [self.rank(dp_rank, cp_rank, local // shard)]


def _check_index(name: str, value: int, size: int) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or not 0 <= value < size:
        raise ValueError(f"{name} {value!r} out of range; expected an int in 0..{size - 1}")
