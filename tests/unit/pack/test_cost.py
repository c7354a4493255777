"""CostModel: linear plus per-sequence quadratic cost, configured and validated."""

from __future__ import annotations

import numpy as np
import pytest

from vlrl.config import ConfigError, validate
from vlrl.pack.cost import CostModel


def test_cost_is_linear_plus_quadratic_per_sequence():
    model = CostModel.Config(linear=2.0, quadratic=0.5).build()
    assert model.sequence_costs([1, 4, 10]).tolist() == [2.5, 16.0, 70.0]


def test_long_sequences_do_not_overflow():
    model = CostModel.Config(linear=0, quadratic=1).build()
    assert model.sequence_costs(np.array([1 << 20], dtype=np.int32))[0] == float(1 << 40)


def test_packing_does_not_change_cost():
    """Attention never crosses sequences: a pack costs the sum of its sequences, not (sum)**2."""
    model = CostModel.Config().build()
    assert model.sequence_costs([3000, 5000]).sum() < model.sequence_costs([8000])[0]


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (CostModel.Config(linear=-1.0), "linear"),
        (CostModel.Config(quadratic=-1e-5), "quadratic"),
        (CostModel.Config(linear=0, quadratic=0), "quadratic"),
    ],
)
def test_bad_config_names_the_field(config, path):
    with pytest.raises(ConfigError, match=f"config field '{path}'"):
        validate(config)
