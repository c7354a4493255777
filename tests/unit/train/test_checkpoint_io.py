"""A checkpoint's pickles are read back without running code: a trainer file or a sharded
checkpoint that names anything but plain data is refused before anything it names runs. (DCP
reports a rank's error inside a ``CheckpointException``.)"""

from __future__ import annotations

import importlib
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from vlrl.train.checkpoint_io import METADATA_FILE, TRAINER_FILE, load_sharded, load_trainer_file, save_trainer_file

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP in one process


class WritesMarker:
    """Unpickling this runs code: it writes ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3 * (seed + 1))
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def test_the_trainer_file_round_trips(tmp_path):
    save_trainer_file(tmp_path / TRAINER_FILE, 7, {"driver": {"version": 3}, "seeds": [1, 2]})
    assert load_trainer_file(tmp_path / TRAINER_FILE) == {
        "step": 7,
        "extra": {"driver": {"version": 3}, "seeds": [1, 2]},
    }
    assert [p.name for p in tmp_path.iterdir()] == [TRAINER_FILE]


FORMATS = {  # how the file is written, and how an unchecked reader would load it
    "torch.save": (torch.save, lambda path: torch.load(path, weights_only=False)),
    "pickle": (
        lambda obj, path: path.write_bytes(pickle.dumps(obj, protocol=2)),
        lambda path: pickle.loads(path.read_bytes()),
    ),
}


@pytest.mark.parametrize("form", FORMATS)
def test_a_trainer_file_that_would_run_code_is_refused(tmp_path, form):
    write, unchecked_load = FORMATS[form]
    marker = tmp_path / "ran"
    write({"step": 1, "extra": WritesMarker(marker)}, tmp_path / TRAINER_FILE)
    with pytest.raises(pickle.UnpicklingError, match=rf"(?s){TRAINER_FILE}: .*GLOBAL exec"):
        load_trainer_file(tmp_path / TRAINER_FILE)
    assert not marker.exists()
    unchecked_load(tmp_path / TRAINER_FILE)  # the file is a real threat: unchecked, it runs
    assert marker.read_text() == "ran"


def test_a_sharded_checkpoint_round_trips(tmp_path):
    saved = _state(0)
    dcp.save(saved, checkpoint_id=str(tmp_path / "sharded"))
    loaded = _state(1)
    load_sharded(loaded, tmp_path / "sharded")
    assert all(torch.equal(loaded["model"][k], v) for k, v in saved["model"].items())
    assert loaded["optim"]["param_groups"] == saved["optim"]["param_groups"]  # the non-tensor entries
    for param, moments in saved["optim"]["state"].items():
        assert all(torch.equal(loaded["optim"]["state"][param][k], v) for k, v in moments.items())


def test_sharded_metadata_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "ran"
    dcp.save(_state(0), checkpoint_id=str(tmp_path / "sharded"))
    (tmp_path / "sharded" / METADATA_FILE).write_bytes(pickle.dumps(WritesMarker(marker)))
    with pytest.raises(CheckpointException, match=r"\.metadata: refused global builtins\.exec"):
        load_sharded(_state(1), tmp_path / "sharded")
    assert not marker.exists()
    with pytest.raises(CheckpointException, match="no attribute 'storage_meta'"):  # unchecked, it runs first
        dcp.load(_state(1), checkpoint_id=str(tmp_path / "sharded"))
    assert marker.read_text() == "ran"


@pytest.mark.parametrize(
    ("module", "name"), [("torch.distributed.checkpoint.metadata", "Metadata"), ("torch.serialization", "_get_layout")]
)
def test_sharded_metadata_may_not_rewrite_a_class_or_function(tmp_path, module, name):
    target = getattr(importlib.import_module(module), name)
    dcp.save(_state(0), checkpoint_id=str(tmp_path / "sharded"))
    # GLOBAL module.name; the state (None, {"tampered": 1}); BUILD: setattr on the global itself
    payload = f"\x80\x02c{module}\n{name}\nN}}X\x08\x00\x00\x00tamperedK\x01s\x86b.".encode("latin-1")
    (tmp_path / "sharded" / METADATA_FILE).write_bytes(payload)
    with pytest.raises(CheckpointException, match=rf"\.metadata: refused BUILD on .*{name}"):
        load_sharded(_state(1), tmp_path / "sharded")
    assert not hasattr(target, "tampered")


def test_a_sharded_entry_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "ran"
    dcp.save({"weight": torch.ones(2), "note": WritesMarker(marker)}, checkpoint_id=str(tmp_path / "sharded"))
    with pytest.raises(CheckpointException, match="(?s)UnpicklingError: sharded entry note: .*GLOBAL exec"):
        load_sharded({"weight": torch.zeros(2), "note": None}, tmp_path / "sharded")
    assert not marker.exists()
    dcp.load({"weight": torch.zeros(2), "note": None}, checkpoint_id=str(tmp_path / "sharded"))
    assert marker.read_text() == "ran"
