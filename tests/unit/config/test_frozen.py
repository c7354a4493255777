"""``vlrl.config.frozen``: a frozen copy of a config tree keeps the classes' behaviour and refuses
every change, lists and dicts included."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from vlrl.config import render
from vlrl.config.frozen import freeze, is_frozen
from vlrl.pack import Layout
from vlrl.rollout.engine import VLLMEngine
from vlrl.train.lora import LoRA
from vlrl.train.trainer import Trainer


def test_a_frozen_config_is_the_same_config_and_cannot_change():
    config = Trainer.Config(lora=LoRA.Config(rank=4))
    frozen = freeze(config)
    assert isinstance(frozen, Trainer.Config) and frozen == config and config == frozen
    assert frozen.lora.enabled and type(frozen).__qualname__ == "Trainer.Config"
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"cannot set LoRA.Config.rank"):
        frozen.lora.rank = 8
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"cannot set Trainer.Config.dtype"):
        del frozen.dtype
    assert config.lora.rank == 4 and freeze(frozen) is frozen


def test_lists_become_tuples_and_dicts_refuse_changes():
    frozen = freeze(VLLMEngine.Config(engine_args={"seed": 1}))
    with pytest.raises(TypeError, match="a frozen config's dict cannot change"):
        frozen.engine_args["seed"] = 2
    assert freeze([Layout(2)]) == (Layout(2),) and is_frozen(freeze([Layout(2)])[0])


def test_it_pickles_copies_derives_and_prints_as_the_original():
    frozen = freeze(Trainer.Config(lora=LoRA.Config(rank=4)))
    for twin in (pickle.loads(pickle.dumps(frozen)), copy.deepcopy(frozen)):
        assert twin == frozen and is_frozen(twin.lora)
    derived = dataclasses.replace(frozen.optim, lr=0.5)
    assert derived.lr == 0.5 and is_frozen(derived) and frozen.optim.lr != 0.5
    assert render(frozen) == render(Trainer.Config(lora=LoRA.Config(rank=4)))
