from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.sample_configs import AdamW, ClusterStore, DiskStore, Run, Source, Teacher
from vlrl.config import ConfigError, Ge, Gt, Le, Lt, NonEmpty, config_name, field_docs, validate
from vlrl.config.schema import config_doc


def test_defaults_and_a_full_tree_validate():
    cfg = Run.Config(
        store=ClusterStore.Config(namespace="eval", shards=2, max_inflight=2),
        optim=AdamW.Config(lr=1, warmup_steps=10, milestones=[50, 100]),  # an int is a fine float
        sources=[Source.Config(name="web", weight=3)],
        teacher=Teacher.Config(model="ckpt/teacher"),
        tags=("a", "b"),
        shares={"browser": 0.5, "desktop": 0.5},
        eval_every=None,
    )
    assert validate(cfg) is cfg
    assert validate(Run.Config()).steps == 100


def _set(cfg, path, value):
    *parents, name = path.split(".")
    for part in parents:
        cfg = getattr(cfg, part)
    setattr(cfg, name, value)


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("steps", True, "config field 'steps': got True (bool); expected an integer >= 1"),
        ("steps", 0, "config field 'steps': got 0 (int); expected an integer >= 1"),
        ("steps", 2.0, "config field 'steps': got 2.0 (float); expected an integer >= 1"),
        ("seed", "3", "config field 'seed': got '3' (str); expected an integer"),
        ("debug", 1, "config field 'debug': got 1 (int); expected a boolean"),
        ("optim.lr", 0.0, "config field 'optim.lr': got 0.0 (float); expected a number > 0"),
        ("optim.lr", False, "config field 'optim.lr': got False (bool); expected a number > 0"),
        ("optim.clip", 11, "config field 'optim.clip': got 11 (int); expected a number > 0 and <= 10"),
        (
            "optim.schedule",
            "linear",
            "config field 'optim.schedule': got 'linear' (str); expected one of 'constant', 'cosine'",
        ),
        (
            "optim.warmup_steps",
            -1,
            "config field 'optim.warmup_steps': got -1 (int); expected an integer >= 0 or None",
        ),
        ("optim.betas", (0.9,), "config field 'optim.betas': got (0.9,) (tuple); expected tuple[float, float]"),
        (
            "optim.betas",
            [0.9, 0.95],
            "config field 'optim.betas': got [0.9, 0.95] (list); expected tuple[float, float]",
        ),
        ("optim.milestones", [1, "2"], "config field 'optim.milestones[1]': got '2' (str); expected an integer"),
        ("tags", ("a", 1), "config field 'tags[1]': got 1 (int); expected a string"),
        ("shares", {"web": "half"}, "config field 'shares['web']': got 'half' (str); expected a number"),
        ("shares", {1: 0.5}, "config field 'shares[1]': got 1 (int); expected a string"),
        ("resume", 5, "config field 'resume': got 5 (int); expected a string or None"),
        ("store.root", "/tmp/x", "config field 'store.root': got '/tmp/x' (str); expected Path"),
        ("store.chunk_rows", -1, "config field 'store.chunk_rows': got -1 (int); expected an integer >= 1"),
        (
            "store",
            AdamW.Config(),
            "config field 'store': got AdamW.Config; expected DiskStore.Config or ClusterStore.Config",
        ),
        (
            "store",
            ClusterStore.Config(namespace=""),
            "config field 'store.namespace': got '' (str); expected a string of length >= 1",
        ),
        ("optim", None, "config field 'optim': got None (NoneType); expected AdamW.Config"),
        ("teacher", Teacher.Config(model=3), "config field 'teacher.model': got 3 (int); expected a string"),
        (
            "sources",
            [Source.Config(name="web"), Source.Config(name="os", weight=1000)],
            "config field 'sources[1].weight': got 1000 (int); expected a number > 0 and < 1000",
        ),
    ],
)
def test_a_wrong_value_names_path_value_and_expectation(path, value, message):
    cfg = Run.Config()
    _set(cfg, path, value)
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    assert str(caught.value) == message
    assert caught.value.path == message.removeprefix("config field '").split("': got")[0]


def test_error_attributes():
    with pytest.raises(ConfigError) as caught:
        validate(DiskStore.Config(chunk_rows=0))
    assert (caught.value.path, caught.value.value, caught.value.expected) == ("chunk_rows", 0, "an integer >= 1")
    assert isinstance(caught.value, ValueError)


def test_check_errors_carry_the_full_path():
    nested = Run.Config(store=ClusterStore.Config(shards=4, max_inflight=2))
    message = r"^config field 'store.max_inflight': got 2 \(int\); expected at least shards \(4\)$"
    with pytest.raises(ConfigError, match=message):
        validate(nested)
    top = Run.Config(steps=5, eval_every=10)
    with pytest.raises(ConfigError) as caught:
        validate(top)
    assert str(caught.value) == "config field 'eval_every': got 10 (int); expected at most steps (5), or None"


def test_field_types_are_checked_before_check_runs():
    # check() compares ints; a string must be reported as a type error, not crash inside check().
    with pytest.raises(ConfigError, match="'store.max_inflight': got 'many'"):
        validate(Run.Config(store=ClusterStore.Config(max_inflight="many")))


def test_validate_takes_a_config_instance():
    with pytest.raises(TypeError, match="dataclass config instance"):
        validate(Run.Config)
    with pytest.raises(TypeError, match="dataclass config instance"):
        validate({"steps": 1})


@dataclass(kw_only=True, slots=True)
class _Unsupported:
    ids: Sequence[int] = ()
    """A type validate() cannot check item by item."""


def test_an_unsupported_annotation_is_a_programming_error():
    with pytest.raises(TypeError, match=r"'ids': cannot check Sequence\[int\]; use list, tuple or dict"):
        validate(_Unsupported())


@pytest.mark.parametrize(
    "rule, good, bad, text",
    [
        (Ge(1), 1, 0, ">= 1"),
        (Gt(0), 0.1, 0, "> 0"),
        (Le(2), 2, 3, "<= 2"),
        (Lt(2), 1, 2, "< 2"),
        (NonEmpty(), [0], [], "of length >= 1"),
    ],
)
def test_constraints(rule, good, bad, text):
    assert rule.holds(good) and not rule.holds(bad)
    assert str(rule) == text


def test_field_docs_reads_the_string_under_each_field():
    assert field_docs(DiskStore.Config) == {
        "root": "Directory holding the chunk files.",
        "chunk_rows": "Rows per chunk file.\n\nSmaller chunks make range reads tighter.",
    }
    assert set(field_docs(Run.Config)) == {
        "store", "optim", "sources", "teacher", "steps", "eval_every", "seed", "debug", "tags", "shares", "resume",
    }


@dataclass(kw_only=True, slots=True)
class _Base:
    size: int = 1
    """Size from the base."""

    undocumented: int = 0


@dataclass(kw_only=True, slots=True)
class _Derived(_Base):
    name: str = ""
    """Name from the subclass."""


def test_field_docs_include_bases_and_skip_undocumented_fields():
    assert field_docs(_Derived) == {"size": "Size from the base.", "name": "Name from the subclass."}


def test_config_doc_and_name():
    assert config_doc(DiskStore.Config) == "Payloads in files under one directory."
    assert config_doc(ClusterStore.Config) == ""  # not the signature dataclass() writes into __doc__
    assert config_name(ClusterStore.Config) == "ClusterStore"
    assert config_name(_Base) == "_Base"


def test_paths_are_accepted_for_path_fields():
    validate(DiskStore.Config(root=Path("relative/dir")))
