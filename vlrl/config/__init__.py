"""Typed configs, recipes and ``--set`` overrides: one schema, validated at load time.

A component declares a nested ``@dataclass(kw_only=True, slots=True) class Config`` with a
docstring under each field and a ``build()`` that constructs the component; a run is a recipe
function returning the top-level config (see ``recipe``).
"""

from vlrl.config.overrides import apply_overrides
from vlrl.config.recipe import RecipeError, load_recipe
from vlrl.config.render import render
from vlrl.config.schema import (
    ConfigError,
    Constraint,
    Ge,
    Gt,
    Le,
    Lt,
    NonEmpty,
    config_name,
    field_docs,
    field_types,
    is_config,
    validate,
)
from vlrl.config.sources import AgentBehaviour, Branching, DataSource, EnvSettings, ExternalAgent, Replay

__all__ = [
    "AgentBehaviour",
    "DataSource",
    "EnvSettings",
    "Branching",
    "ExternalAgent",
    "Replay",
    "ConfigError",
    "Constraint",
    "Ge",
    "Gt",
    "Le",
    "Lt",
    "NonEmpty",
    "RecipeError",
    "apply_overrides",
    "config_name",
    "field_docs",
    "field_types",
    "is_config",
    "load_recipe",
    "render",
    "validate",
]
