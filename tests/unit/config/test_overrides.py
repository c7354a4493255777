import copy
from pathlib import Path

import pytest

from tests.helpers.sample_configs import ClusterStore, DiskStore, Run, Source, Teacher
from vlrl.config import ConfigError, apply_overrides


def _get(cfg, path):
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize(
    "override, path, expected",
    [
        ("steps=50", "steps", 50),
        ("seed=-3", "seed", -3),
        ("optim.lr=1e-3", "optim.lr", 1e-3),
        ("optim.lr=2", "optim.lr", 2.0),
        ("debug=true", "debug", True),
        ("debug=False", "debug", False),
        ("debug=YES", "debug", True),
        ("debug=no", "debug", False),
        ("debug=1", "debug", True),
        ("debug=0", "debug", False),
        ("resume=ckpt/step_10", "resume", "ckpt/step_10"),
        ("resume=a=b", "resume", "a=b"),
        ("resume=none", "resume", None),
        ("resume=NULL", "resume", None),
        ("optim.warmup_steps=50", "optim.warmup_steps", 50),
        ("optim.warmup_steps=none", "optim.warmup_steps", None),
        ("eval_every=null", "eval_every", None),
        ("optim.schedule=cosine", "optim.schedule", "cosine"),
        ("optim.milestones=[10, 20]", "optim.milestones", [10, 20]),
        ("optim.milestones=10, 20", "optim.milestones", [10, 20]),
        ("optim.milestones=", "optim.milestones", []),
        ("optim.betas=0.8,0.9", "optim.betas", (0.8, 0.9)),
        ("optim.betas=[0.8, 0.9]", "optim.betas", (0.8, 0.9)),
        ("tags=smoke,gui", "tags", ("smoke", "gui")),
        ('tags=["a,b"]', "tags", ("a,b",)),
        ('shares={"browser": 0.25, "desktop": 1}', "shares", {"browser": 0.25, "desktop": 1}),
        ("store.root=/data/store", "store.root", Path("/data/store")),
        ("store.chunk_rows=2048", "store.chunk_rows", 2048),
    ],
)
def test_each_type_parses(override, path, expected):
    cfg = apply_overrides(Run.Config(), [override])
    value = _get(cfg, path)
    assert value == expected
    assert type(value) is type(expected)


def test_the_original_is_not_mutated():
    original = Run.Config(sources=[Source.Config(name="web")])
    before = copy.deepcopy(original)
    changed = apply_overrides(original, ["steps=70", "store=ClusterStore", "optim.milestones=1,2"])
    assert original == before
    assert changed is not original and changed.sources[0] is not original.sources[0]
    assert changed.steps == 70 and isinstance(original.store, DiskStore.Config)


def test_a_union_member_is_selected_by_name_then_set():
    cfg = apply_overrides(Run.Config(), ["store=ClusterStore", "store.namespace=eval", "store.max_inflight=16"])
    assert cfg.store == ClusterStore.Config(namespace="eval", max_inflight=16)
    assert apply_overrides(Run.Config(), ["store=ClusterStore.Config"]).store == ClusterStore.Config()


def test_selecting_the_current_config_keeps_its_values():
    cfg = Run.Config(store=ClusterStore.Config(namespace="kept"))
    assert apply_overrides(cfg, ["store=ClusterStore"]).store.namespace == "kept"
    assert apply_overrides(cfg, ["store=DiskStore"]).store == DiskStore.Config()


def test_an_optional_config_is_selected_and_cleared():
    assert apply_overrides(Run.Config(teacher=Teacher.Config(model="t")), ["teacher=none"]).teacher is None
    cfg = apply_overrides(Run.Config(teacher=Teacher.Config(model="t")), ["teacher.model=ckpt/big"])
    assert cfg.teacher.model == "ckpt/big"


def _error(overrides, cfg=None):
    with pytest.raises(ConfigError) as caught:
        apply_overrides(cfg or Run.Config(), overrides)
    return caught.value


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["step=5"],
            "config field 'step': got unknown key 'step'; expected a field of Run.Config: store, optim, sources, "
            "teacher, steps, eval_every, seed, debug, tags, shares, resume; did you mean 'steps'?",
        ),
        (
            ["optim.lrr=1"],
            "config field 'optim.lrr': got unknown key 'lrr'; expected a field of AdamW.Config: lr, betas, schedule, "
            "warmup_steps, milestones, clip; did you mean 'optim.lr'?",
        ),
        (
            ["store.namespace=eval"],  # DiskStore is selected: its keys are listed, not ClusterStore's
            "config field 'store.namespace': got unknown key 'namespace'; expected a field of DiskStore.Config: "
            "root, chunk_rows",
        ),
        (["steps=many"], "config field 'steps': got 'many'; expected an integer >= 1"),
        (["steps=1.5"], "config field 'steps': got '1.5'; expected an integer >= 1"),
        (["optim.lr=fast"], "config field 'optim.lr': got 'fast'; expected a number > 0"),
        (["debug=maybe"], "config field 'debug': got 'maybe'; expected a boolean"),
        (
            ["optim.schedule=linear"],
            "config field 'optim.schedule': got 'linear'; expected one of 'constant', 'cosine'",
        ),
        (
            ["optim.warmup_steps=soon"],
            "config field 'optim.warmup_steps': got 'soon'; expected an integer >= 0 or None",
        ),
        (["optim.betas=1,2,3"], "config field 'optim.betas': got '1,2,3'; expected tuple[float, float]"),
        (["optim.milestones=[1,"], "config field 'optim.milestones': got '[1,'; expected list[int]"),
        (["optim.milestones=1,x"], "config field 'optim.milestones': got '1,x'; expected list[int]"),
        (["shares=browser:1"], "config field 'shares': got 'browser:1'; expected dict[str, float]"),
        (
            ['optim.milestones=[1, "a"]'],  # JSON decodes; validation then names the item
            "config field 'optim.milestones[1]': got 'a' (str); expected an integer",
        ),
        (["steps=0"], "config field 'steps': got 0 (int); expected an integer >= 1"),
        (["optim.clip=20"], "config field 'optim.clip': got 20.0 (float); expected a number > 0 and <= 10"),
        (
            ["store=Clusterstore"],
            "config field 'store': got 'Clusterstore'; expected the name of a config: DiskStore, ClusterStore; "
            "did you mean 'ClusterStore'?",
        ),
        (
            ["store=cluster"],  # the start of a name, in any case, is enough for a suggestion
            "config field 'store': got 'cluster'; expected the name of a config: DiskStore, ClusterStore; "
            "did you mean 'ClusterStore'?",
        ),
        (
            ["teacher=Teacher"],
            "config field 'teacher': got 'Teacher'; expected a config with a default for every field; "
            "Teacher.Config requires model; set it in a recipe instead",
        ),
        (
            ["teacher.model=ckpt"],
            "config field 'teacher': got None (NoneType); expected a config with a field 'model'; "
            "select one first with teacher=NAME",
        ),
        (["seed.value=1"], "config field 'seed': got 0 (int); expected a config with a field 'value'"),
        (
            ["steps"],
            "config field 'steps': got 'steps'; expected an override KEY=VALUE, such as store.chunk_rows=1024",
        ),
        (
            ["store=ClusterStore", "store.max_inflight=2"],
            "config field 'store.max_inflight': got 2 (int); expected at least shards (4)",
        ),
        (["steps=5"], "config field 'eval_every': got 10 (int); expected at most steps (5), or None"),
    ],
)
def test_errors_name_path_value_and_expectation(overrides, message):
    assert str(_error(overrides)) == message


def test_unknown_key_without_a_close_match_lists_the_keys_only():
    error = _error(["zzz=1"])
    assert error.path == "zzz" and error.hint == ""
    assert "expected a field of Run.Config: store, optim" in str(error)


def test_unparseable_error_attributes():
    error = _error(["optim.lr=fast"])
    assert (error.path, error.value, error.expected) == ("optim.lr", "fast", "a number > 0")


def test_a_config_in_a_list_is_reached_by_index():
    cfg = Run.Config(sources=[Source.Config(name="web"), Source.Config(name="os")])
    assert apply_overrides(cfg, ["sources[1].weight=3"]).sources[1].weight == 3.0
    error = _error(["sources[2].weight=3"], cfg)
    assert error.path == "sources" and error.expected == "a list with an item [2]"
    error = _error(["sources[1].wieght=3"], cfg)
    assert str(error).endswith("expected a field of Source.Config: name, weight; did you mean 'sources[1].weight'?")
