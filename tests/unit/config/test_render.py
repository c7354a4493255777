from tests.helpers.sample_configs import ClusterStore, Run, Source
from vlrl.config import ConfigError, apply_overrides, render


def test_every_field_has_its_value_type_and_docstring():
    text = render(Run.Config(store=ClusterStore.Config(), sources=[Source.Config(name="web")]))
    lines = text.splitlines()
    assert lines[0] == "# Run.Config"
    block = "\n".join(
        [
            "# Where payloads live; swap with store=ClusterStore.",
            "store = ClusterStore  # DiskStore.Config | ClusterStore.Config",
            "  # Stores with one namespace are one store.",
            "  store.namespace = 'vlrl'  # str (of length >= 1)",
        ]
    )
    assert block in text
    assert "  optim.clip = 1.0  # float (> 0, <= 10)" in lines
    assert "  optim.schedule = 'constant'  # 'constant' | 'cosine'" in lines
    assert "eval_every = 10  # int (>= 1) | None" in lines
    assert "  sources[0]: Source  # Source.Config" in lines
    assert "    sources[0].weight = 1.0  # float (> 0, < 1000)" in lines
    assert "    # Share of each batch, relative to the other sources." in lines


def test_multi_line_docstrings_and_config_docstrings():
    text = render(Run.Config())
    assert "  # Payloads in files under one directory.\n" in text
    doc = "  # Rows per chunk file.\n  #\n  # Smaller chunks make range reads tighter.\n"
    assert doc + "  store.chunk_rows = 512" in text
    assert "  store.root = '/tmp/vlrl-store'  # Path" in text


def test_every_rendered_assignment_is_a_key_that_set_accepts():
    cfg = Run.Config(sources=[Source.Config(name="web")])
    lines = [line.strip() for line in render(cfg).splitlines()]
    paths = [line.split(" = ")[0] for line in lines if " = " in line and not line.startswith("#")]
    assert "sources[0].weight" in paths and "sources[0]" not in paths
    for path in paths:
        try:
            apply_overrides(cfg, [f"{path}=?"])
        except ConfigError as error:
            assert not error.got.startswith("unknown key"), error


def test_a_key_is_printed_as_set_never_its_value():
    from vlrl.rollout.server.app import OpenAIServer

    shown = render(OpenAIServer.Config(model_path="m", api_key="sk-very-secret"))
    assert "sk-very-secret" not in shown and "api_key = <set, not shown>" in shown
    assert "api_key = None" in render(OpenAIServer.Config(model_path="m"))
    assert "default_max_tokens = 256" in shown  # other fields as they are
