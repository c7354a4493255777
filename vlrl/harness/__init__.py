"""The harness contract shared by every harness codebase: typed actions, observations, the
gymnasium-shaped ``Harness`` base class, registration by id, and the checker."""

from vlrl.harness.actions import ACTION_KINDS, NAMED_KEYS, Action, ActionKind
from vlrl.harness.base import Harness, StepResult
from vlrl.harness.checker import HarnessContractError, check_harness
from vlrl.harness.errors import ActionError, HarnessError
from vlrl.harness.observation import Element, Observation
from vlrl.harness.registry import make, register, registered, resolve
from vlrl.harness.settings import int_setting, task_names

__all__ = [
    "ACTION_KINDS",
    "NAMED_KEYS",
    "Action",
    "ActionError",
    "ActionKind",
    "Element",
    "Harness",
    "HarnessContractError",
    "HarnessError",
    "Observation",
    "StepResult",
    "check_harness",
    "int_setting",
    "make",
    "register",
    "registered",
    "resolve",
    "task_names",
]
