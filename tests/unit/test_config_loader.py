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
    cfg = load_model(EvalConfig, base, ["strategies=oracle,two_stage:low", "pass_k=1,2"])
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
    with pytest.raises(ConfigError, match="eval: backend.kind"):
        load_model(QuickstartConfig, None, ["eval.backend.kind=nope"])
    with pytest.raises(ConfigError, match="synth"):
        load_model(QuickstartConfig, None, ["synth.n_tasks=0"])
