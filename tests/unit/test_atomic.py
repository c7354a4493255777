"""Atomic writes: the target is the old file or the whole new one, and no temporary file is left."""

from __future__ import annotations

import pytest

from vlrl.atomic import atomic_path, write_bytes_atomic


class WriteFailed(Exception):
    pass


def test_a_write_replaces_the_target_through_a_temporary_file_beside_it(tmp_path):
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"new")
        assert target.read_bytes() == b"old"  # nothing in place until the write is done
    assert target.read_bytes() == b"new"
    assert list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("old", [None, b"old contents"])
def test_a_write_that_raises_leaves_the_target_as_it_was_and_no_temporary_file(tmp_path, old):
    target = tmp_path / "trainer.pt"
    if old is not None:
        target.write_bytes(old)

    def write(path):
        path.write_bytes(b"half of the ")
        raise WriteFailed("disk full")

    with pytest.raises(WriteFailed), atomic_path(target) as tmp:
        write(tmp)
    assert (target.read_bytes() if target.exists() else None) == old
    assert list(tmp_path.iterdir()) == ([target] if old is not None else [])


def test_write_bytes_atomic(tmp_path):
    write_bytes_atomic(tmp_path / "a.json", b"{}")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"] and (tmp_path / "a.json").read_bytes() == b"{}"
