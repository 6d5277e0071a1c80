"""The one configuration loader: precedence (defaults < file < flags < --set), error messages that
name the field, the flag and the allowed values, the hash of a resolved config, and the
EvalConfig / QuickstartConfig models the CLI builds through it."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

from shopping_companion.benchmark.run_config import EvalConfig, QuickstartConfig
from shopping_companion.config import config_hash, dump_yaml, load_model
from shopping_companion.errors import ConfigError, ShopCompError


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["a", "b"] = "a"
    n: int = 1


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: Inner = Inner()
    x: float = 0.0
    name: str = "d"


def test_precedence_defaults_file_flags_set(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("inner: {kind: b, n: 5}\nx: 1.5\nname: file\n")
    assert load_model(Outer, None) == Outer()
    got = load_model(Outer, f, ["inner.n=7"], {"inner.n": 6, "x": 2.5, "name": None})
    assert (got.inner.kind, got.inner.n, got.x, got.name) == ("b", 7, 2.5, "file")  # None flags do not override
    assert load_model(Outer, f, [], {"inner.n": 6}).inner.n == 6


def test_errors_name_the_field_its_flag_and_the_allowed_values(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_model(Outer, None, ["inner.kind=c"], names={"inner.kind": "--kind"})
    assert "inner.kind (--kind)" in str(e.value) and "'a' or 'b'" in str(e.value) and "got 'c'" in str(e.value)
    with pytest.raises(ConfigError, match=r"inner\.q: unknown field; allowed: kind, n"):
        load_model(Outer, None, ["inner.q=1"])
    f = tmp_path / "bad.yaml"
    f.write_text("x: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_model(Outer, f)
    f.write_text("x: nope\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: x: .*got 'nope'"):
        load_model(Outer, f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_model(Outer, tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="expected 'dotted.key=value'"):
        load_model(Outer, None, ["novalue"])
    assert issubclass(ConfigError, ShopCompError) and ConfigError.exit_code == 2


def test_config_hash_is_canonical_and_changes_with_any_value(tmp_path):
    a = load_model(Outer, {"x": 1, "inner": {"n": 2}})
    b = load_model(Outer, {"inner": {"n": 2}, "x": 1.0})
    assert config_hash(a) == config_hash(b) and len(config_hash(a)) == 16
    assert config_hash(a) != config_hash(a.model_copy(update={"x": 1.0000001}))
    dump_yaml(a, tmp_path / "r.yaml", header="hello\nworld")
    text = (tmp_path / "r.yaml").read_text()
    assert text.startswith("# hello\n# world\n") and load_model(Outer, tmp_path / "r.yaml") == a


def test_eval_config_groups_and_identity():
    base = {"bench": {"path": "b"}, "output": {"name": "r"}}
    cfg = load_model(EvalConfig, base, ["strategies=oracle,two_stage:low", "pass_k=1,2", "trials=2"])
    assert cfg.strategies == ["oracle", "two_stage:low"] and cfg.pass_k == [1, 2]
    assert cfg.output.run_dir.as_posix() == "runs/r"
    ident = cfg.identity()
    # what a resume may change is not in the identity; what changes results is
    other = load_model(EvalConfig, base, ["concurrency=64", "backend.max_retries=9", "trials=4", "bench.limit=3"])
    assert other.identity() == cfg.identity()
    for change in (
        "backend.sampling.temperature=0.1",
        "env.max_turns=5",
        "seed=3",
        "simulator=llm",
        "judge.kind=llm",
        "judge.model=j",
    ):
        changed = load_model(EvalConfig, base, [change] + (["judge.model=j"] if change == "judge.kind=llm" else []))
        assert changed.identity() != ident, change
    for bad, msg in (
        (["strategies=sideways"], "strategies"),
        (["backend.kind=openai"], "backend.model is required"),
        (["judge.kind=llm"], "judge.model is required"),
        (["pass_k=0"], "pass_k"),
        (["output.name=../x"], "output.name"),
        (["trials=0"], "trials"),
        # a k above trials has no task with k trials (its pass^k row would be empty); the
        # whole-model check's message names its keys, with no "(top level)" before it
        (["pass_k=1,3", "trials=2"], r"^pass_k: values must be in 1\.\.trials \(2\); got \[1, 3\]"),
    ):
        with pytest.raises(ConfigError, match=msg):
            load_model(EvalConfig, base, bad)
    with pytest.raises(ConfigError, match=r"bench: required"):
        load_model(EvalConfig, {"output": {"name": "r"}})


def test_quickstart_config_fills_in_the_eval_and_keeps_its_synthesis_defaults():
    qs = load_model(QuickstartConfig, None, ["synth.n_tasks=10", "eval.concurrency=2"])
    assert (qs.synth.n_tasks, qs.synth.sessions_per_user, qs.synth.allow_shortfall, qs.synth.seed) == (10, 42, True, 0)
    ev = qs.eval_config()
    assert ev.bench.path.as_posix() == "runs/quickstart/bench" and ev.output.name == "quickstart"
    assert ev.resume.archive_stale and ev.concurrency == 2
    with pytest.raises(ConfigError, match=r"^eval\.backend\.kind: Input should be"):
        load_model(QuickstartConfig, None, ["eval.backend.kind=nope"])
    with pytest.raises(ConfigError, match="synth"):
        load_model(QuickstartConfig, None, ["synth.n_tasks=0"])


# --------------------------------------------------------------------------- hostile input (break test of issue 16)


@pytest.mark.parametrize(
    "content,msg",
    [
        (b"bench: {path: b}\noutput: {name: \xff\xfe}\n", r"is not UTF-8 text \(byte 0xff at position 32\)"),
        (b"a: " + b"[" * 40000 + b"]" * 40000, "nested too deeply to read"),
        (b"output: {name: a}\noutput: {name: b}\n", "at line 2, column 1: found duplicate key 'output'"),
        (b"seed: " + b"9" * 5000 + b"\n", "a value cannot be read"),
        (b"x: [1\n", r"is not valid YAML at line 2, column 1: expected ',' or '\]'"),
    ],
)
def test_hostile_config_files_are_config_errors(tmp_path, content, msg):
    f = tmp_path / "run.yaml"
    f.write_bytes(content)
    with pytest.raises(ConfigError, match=msg):
        load_model(EvalConfig, f)
    with pytest.raises(ConfigError, match="is a directory"):
        load_model(EvalConfig, tmp_path)


def test_hostile_overrides_are_config_errors():
    base = {"bench": {"path": "b"}, "output": {"name": "r"}}
    with pytest.raises(ConfigError, match=r"override 'seed=9999.*\.\.\.': the value: a value cannot be read"):
        load_model(EvalConfig, base, ["seed=" + "9" * 5000])
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_model(EvalConfig, base, ["seed=" + "[" * 40000 + "]" * 40000])


def test_values_that_would_be_ignored_or_cannot_be_sent_are_refused():
    base = {"bench": {"path": "b"}, "output": {"name": "r"}}
    for change, msg in (
        ("env.mode=oracle", r"env: mode is set by strategies \(--strategies\)"),
        ("env.hint=high", "hint is set by strategies"),
        ("env.simulator=llm", r"simulator is set by simulator \(--simulator\)"),
        ("env.simulator_seed=3", r"simulator_seed is set by seed \(--seed\)"),
        ("backend.sampling.temperature=.inf", "backend.sampling.temperature: Input should be a finite number"),
        ("env.prompt_chars_per_token=.nan", "finite number"),
        ("backend.base_url=not-a-url", "backend.base_url: must be an http:// or https:// URL with a host"),
        ("judge.base_url=ftp://x", "judge.base_url: must be an http://"),
    ):
        with pytest.raises(ConfigError, match=msg):
            load_model(EvalConfig, base, [change])
    assert load_model(EvalConfig, base, ["output.name=qwen3-4b@step100"]).output.name == "qwen3-4b@step100"


def test_quickstart_errors_name_the_section_key():
    for change, msg in (
        ("eval.trials=0", r"^eval\.trials: Input should be greater than or equal to 1"),
        ("name=..", r"^name: must be one directory name"),
        ("synth.bogus=1", r"^synth\.bogus: unknown field; allowed: abilities, addon_preferences, "),
    ):
        with pytest.raises(ConfigError, match=msg):
            load_model(QuickstartConfig, None, [change])


def test_a_refused_resume_names_the_nested_field_that_changed(tmp_path):
    from shopping_companion.errors import RunIdentityError
    from shopping_companion.runs import check_identity

    results = tmp_path / "results.jsonl"
    old = {"config_sha256": "a", "config": {"backend": {"sampling": {"temperature": 0.6}}, "seed": 0}, "policy": "p"}
    check_identity(results, old)
    results.write_text("{}\n")
    new = {"config_sha256": "b", "config": {"backend": {"sampling": {"temperature": 0.7}}, "seed": 0}, "policy": "p"}
    with pytest.raises(RunIdentityError) as e:
        check_identity(results, new)
    msg = str(e.value)
    assert "config.backend.sampling.temperature: 0.6 → 0.7; config_sha256: 'a' → 'b'" in msg
    assert "'seed'" not in msg and len(msg) < 400


def test_a_config_yaml_that_is_a_directory_is_named_and_nothing_is_left_behind(tmp_path):
    (tmp_path / "config.yaml").mkdir()
    with pytest.raises(ConfigError, match="config.yaml is a directory"):
        dump_yaml(Outer(), tmp_path / "config.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
