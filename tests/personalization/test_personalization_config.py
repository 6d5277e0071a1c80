"""`personalize run`'s config (the `run:` section of configs/personalization/*.yaml) and `build`'s
(`build:`), read by the one loader with flags and --set on top; the command groups' help at 80
columns."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.build import load_build_config
from shopping_companion.personalization.config import DEFAULT_CONFIG, load_run_config

REPO = Path(__file__).resolve().parents[2]


def test_the_repo_configs_still_load():
    cfg = load_run_config(None, [], {"dataset": "ds", "out": "o"})  # default.yaml's run: section
    assert cfg.variants == ["baseline", "textrag", "norev", "single", "full"]
    assert cfg.memory == ["full", "none", "summary", "top1"] and (cfg.k_d, cfg.k_p, cfg.k_r) == (1, 5, 5)
    smoke = REPO / "configs" / "personalization" / "smoke.yaml"  # no run: section: the model's defaults
    cfg = load_run_config(smoke, [], {"dataset": "ds", "out": "o"})
    assert cfg.memory == ["full"] and cfg.variants[-1] == "full" and cfg.roles == "extractive"
    assert load_build_config(smoke).selection.users_per_category == 3
    assert load_build_config(None, ["selection.users_per_category=4"]).selection.users_per_category == 4
    assert DEFAULT_CONFIG.is_file()


def test_a_file_of_run_keys_then_flags_then_sets(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("dataset: ds\nout: o\nvariants: full,single\nk_p: 3\ncategories: Beauty,Video_Games\n")
    cfg = load_run_config(f, ["k_p=4"], {"k_p": 2, "memory": "all"})
    assert cfg.k_p == 4 and cfg.variants == ["full", "single"] and cfg.memory[0] == "full"
    assert cfg.categories == ["Beauty", "Video_Games"]


@pytest.mark.parametrize(
    "sets,needles",
    [
        (["k_q=1"], ["k_q: unknown field", "allowed:", "k_d, k_p, k_r"]),
        (["variants=fancy"], ["variants", "baseline"]),
        (["roles=gpt"], ["roles", "'extractive'", "'llm'"]),
        (["roles=llm"], ["model is required with roles=llm"]),
        (["k_d=0"], ["k_d", "greater than or equal to 1"]),
    ],
)
def test_bad_values_name_the_file_the_field_and_the_allowed_values(sets, needles):
    with pytest.raises(ConfigError) as e:
        load_run_config(DEFAULT_CONFIG, sets, {"dataset": "ds", "out": "o"})
    text = str(e.value)
    assert text.startswith(f"{DEFAULT_CONFIG} (run: section): ")
    for n in needles:
        assert n in text, text


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_run_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_build_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "module,commands",
    [
        ("personalize", ["build", "run", "eval"]),
        ("grpo", ["prepare", "launch"]),
        ("sft", ["collect", "stats", "export"]),
    ],
)
def test_help_reads_well_at_80_columns(module, commands):
    import importlib

    app = importlib.import_module(f"shopping_companion.cli.{module}").app
    for cmd in commands:
        r = CliRunner().invoke(app, [cmd, "-h"], terminal_width=80, env={"COLUMNS": "80"})
        assert r.exit_code == 0, r.output
        for noise in ("<bool>", "<str>", "TEXT", "INTEGER", "FLOAT"):  # click's type names as metavars
            assert noise not in r.output, (cmd, noise, r.output)
        assert all(len(line) <= 80 for line in r.output.splitlines()), r.output
