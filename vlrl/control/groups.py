"""What every group-lifecycle step checks first: the records really are one group."""

from __future__ import annotations

from collections.abc import Sequence

from vlrl.store.records import SeqMeta


class GroupError(ValueError):
    """Records that do not form one group: empty, mixed group ids, or a key twice."""


def group_id_of(metas: Sequence[SeqMeta]) -> str:
    """The group id shared by ``metas``; a clear error when they are not one group."""
    if not metas:
        raise GroupError("a group needs at least one SeqMeta, got none")
    ids = sorted({m.group_id for m in metas})
    if len(ids) != 1:
        raise GroupError(f"a group has one group_id; these records have {ids}")
    keys = [m.key for m in metas]
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise GroupError(f"group {ids[0]!r}: keys {twice} appear more than once")
    return ids[0]
