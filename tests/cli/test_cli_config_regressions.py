"""Break-test findings of issue 17, each through the real command or the real function on real
files: a rubric factory / plug-in module that fails (exit 2, no traceback), a corrupt or missing
``kept.jsonl``, an explicit judge against a reward spec's judge, Rich emoji codes in messages, the
smoke check's module imports, ``--tokenizer`` paths, and the small wording points (help text,
"did you mean", short spec labels, ``resume`` values, negative weights). The TRL resume check runs
end to end in tests/extras/rl/test_trl_resume_config.py; here it is checked on a stored config."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.errors import ConfigError, DataDirError, DataError


def _cli(args: list[str]):
    from shopping_companion.cli import app

    return CliRunner().invoke(app, args)


def _text(res) -> str:
    return " ".join(res.output.split())


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch) -> Path:
    """A plug-in directory: a valid rubric module, a module whose factory raises, and two
    unrelated modules that fail on import (a RuntimeError and a SyntaxError)."""
    d = tmp_path / "plugins"
    d.mkdir()
    (d / "bt17_good.py").write_text(
        textwrap.dedent(
            """
            from shopping_companion.rewards.rubric import Rubric, reward

            @reward("bt17_brevity", needs=("trajectory",), replace=True)
            def brevity(ctx):
                return 1.0 / (1 + len(ctx.trajectory.steps))

            RUBRIC = Rubric([("outcome", 1.0), ("format", 1.0), (brevity, -0.5)], name="bt17")
            """
        )
    )
    (d / "bt17_factory.py").write_text("def factory():\n    raise RuntimeError('factory boom')\n")
    (d / "bt17_boom.py").write_text("raise RuntimeError('import boom')\n")
    (d / "bt17_syntax.py").write_text("def broken(:\n")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the spec's python_path goes on a copy
    for m in ("bt17_good", "bt17_factory", "bt17_boom", "bt17_syntax"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    return d


def _spec(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


# --------------------------------------------------------------------------- finding 2


@pytest.mark.parametrize(
    ("rubric", "needle"),
    [
        ("bt17_factory:factory", "rubric 'bt17_factory:factory': calling it raised RuntimeError: factory boom"),
        ("bt17_boom:R", "cannot import module 'bt17_boom' (RuntimeError: import boom)"),
        ("bt17_syntax:R", "cannot import module 'bt17_syntax' (SyntaxError:"),
    ],
)
def test_a_failing_plugin_or_factory_is_a_config_error_not_a_traceback(tmp_path, plugins, rubric, needle):
    spec = _spec(tmp_path, "spec.yaml", f"rubric: '{rubric}'\npython_path: [{plugins}]\n")
    res = _cli(
        [
            "eval",
            "--bench",
            str(tmp_path / "b"),
            "--name",
            "x",
            "--runs-dir",
            str(tmp_path),
            "--reward-config",
            str(spec),
        ]
    )
    assert res.exit_code == 2, res.output
    assert needle in _text(res)
    assert "Traceback" not in res.output


# --------------------------------------------------------------------------- finding 3


def test_a_corrupt_or_missing_kept_file_is_a_data_error(tmp_path):
    from shopping_companion.sft.collect import read_kept

    d = tmp_path / "collect"
    d.mkdir()
    with pytest.raises(DataDirError, match="no kept trajectories file"):
        read_kept(d)
    (d / "kept.jsonl").write_text('\n{"task_id": "t1", "sta')  # truncated mid-line
    with pytest.raises(DataError, match=r"kept\.jsonl:2: not a kept stage trajectory"):
        read_kept(d)
    res = _cli(["sft", "stats", "--collect", str(d)])
    assert res.exit_code == 2, res.output
    assert "kept.jsonl:2: not a kept stage trajectory" in _text(res) and "Traceback" not in res.output


# --------------------------------------------------------------------------- finding 4

DEAD_JUDGE = """
rubric: paper
judge: {kind: llm, model: m, base_url: "http://127.0.0.1:9/v1", timeout_s: 2, max_retries: 0}
"""


@pytest.mark.parametrize("judge_flags", [["--judge", "rule"], ["--judge-model", "other"], ["--set", "judge.kind=rule"]])
def test_an_explicit_judge_that_differs_from_the_specs_is_refused(tmp_path, judge_flags):
    spec = _spec(tmp_path, "dead_judge.yaml", DEAD_JUDGE)
    res = _cli(
        [
            "eval",
            "--bench",
            str(tmp_path / "b"),
            "--name",
            "x",
            "--runs-dir",
            str(tmp_path),
            "--reward-config",
            str(spec),
            *judge_flags,
        ]
    )
    assert res.exit_code == 2, res.output
    text = _text(res)
    assert text.startswith(f"error: judge: the reward config {spec} has a judge section (kind llm, model m")
    assert "(top level)" not in text and "give the judge in one place" in text


def test_a_judge_given_only_by_the_spec_is_used_and_an_equal_one_is_accepted(tmp_path):
    from shopping_companion.cli.eval import load_eval_config

    spec = _spec(tmp_path, "dead_judge.yaml", DEAD_JUDGE)
    base = {"bench.path": tmp_path / "b", "output.name": "x", "rubric": str(spec)}
    cfg = load_eval_config(None, [], base)
    assert (cfg.judge.kind, cfg.judge.model, cfg.judge.base_url) == ("llm", "m", "http://127.0.0.1:9/v1")
    assert cfg.judge.base_url_field == f"judge.base_url of the reward config {spec}"
    same = load_eval_config(
        None, ["judge.kind=llm", "judge.model=m"], {**base, "judge.base_url": "http://127.0.0.1:9/v1"}
    )
    assert same.judge.kind == "llm"
    plain = load_eval_config(None, [], {"bench.path": tmp_path / "b", "output.name": "x", "judge.kind": "rule"})
    assert plain.judge.base_url_field == "judge.base_url (--judge-base-url)"


def test_the_spec_judge_ping_names_the_specs_base_url(tmp_path):
    from shopping_companion.errors import BackendError
    from shopping_companion.rewards.spec import load_reward_spec

    spec = _spec(tmp_path, "dead_judge.yaml", DEAD_JUDGE)
    with pytest.raises(BackendError) as e:
        load_reward_spec(str(spec)).ping_judge()
    assert str(e.value).startswith(f"judge.base_url of the reward spec {spec}: judge:m: cannot reach")


# --------------------------------------------------------------------------- finding 5


def test_consoles_print_colon_codes_as_text_not_emoji():
    from shopping_companion.cli.common import console as cli_console
    from shopping_companion.console import console

    assert cli_console is console  # one stderr console for the CLI, the runner and the data loaders
    with console.capture() as cap:
        console.print("judge:m: cannot reach; model :x: here", markup=False)
    assert "judge:m: cannot reach; model :x: here" in cap.get()


# --------------------------------------------------------------------------- finding 6


def test_smoke_probe_needs_only_the_rubrics_modules_and_lists_each_problem_once_per_host(tmp_path, plugins):
    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers.submit import host_lines, probe, rubric_modules

    spec = load_reward_spec(
        str(_spec(tmp_path, "spec.yaml", f"rubric: 'bt17_good:RUBRIC'\npython_path: [{plugins}]\n"))
    )
    shipped = sorted(Path(m).stem for m in spec.py_modules())
    assert shipped == ["bt17_boom", "bt17_factory", "bt17_good", "bt17_syntax"]
    assert rubric_modules(spec, shipped) == ["bt17_good"]

    out = probe({"modules": shipped, "rubric_modules": ["bt17_good"]})
    assert not [p for p in out["problems"] if p.startswith("module bt17_") and "does not import" in p]
    warned = " ".join(out["warnings"])
    assert "module bt17_boom does not import (the rubric does not use it) (RuntimeError: import boom)" in warned
    assert "module bt17_syntax does not import (the rubric does not use it) (SyntaxError" in warned
    strict = probe({"modules": ["bt17_boom"], "rubric_modules": None})  # unknown: every module is needed
    assert any(p.startswith("module bt17_boom does not import (RuntimeError") for p in strict["problems"])

    report = {"driver": out, "nodes": [dict(out), {**out, "host": "other-node"}]}  # driver + task on one host
    lines = host_lines(report, "warnings")
    assert len(lines) == 2 * len(out["warnings"]) and len(set(lines)) == len(lines)
    assert host_lines(report, "problems") == list(dict.fromkeys(host_lines(report, "problems")))


# --------------------------------------------------------------------------- finding 7


def test_tokenizer_paths_say_what_is_wrong(tmp_path):
    from shopping_companion.sft.export import load_tokenizer

    with pytest.raises(ConfigError, match=r"tokenizer '/tmp/nope-tok-bt17': not a directory \(no such path\)"):
        load_tokenizer("/tmp/nope-tok-bt17")
    empty = tmp_path / "tok"
    empty.mkdir()
    with pytest.raises(ConfigError) as e:
        load_tokenizer(str(empty))
    assert f"no tokenizer files (tokenizer.json, tokenizer_config.json) in {empty}" in str(e.value)
    f = tmp_path / "file.json"
    f.write_text("{}")
    with pytest.raises(ConfigError, match=r"not a directory \(it is a file\)"):
        load_tokenizer(str(f))


# --------------------------------------------------------------------------- finding 8


@pytest.mark.parametrize("cmd", [["eval"], ["sft", "collect"]])
def test_reward_config_help_names_every_form(cmd):
    res = _cli([*cmd, "--help"])
    assert res.exit_code == 0
    assert "spec/rubric YAML | module:attr" in _text(res)


def test_a_misspelt_rubric_file_key_gets_a_did_you_mean(tmp_path):
    from shopping_companion.rewards.spec import load_reward_spec

    p = _spec(tmp_path, "typo.yaml", "name: typo\nrewardz:\n  - {name: outcome, weight: 1.0}\n")
    with pytest.raises(ConfigError, match=r"did you mean `rewards` \(not `rewardz`\)\?"):
        load_reward_spec(str(p))
    q = _spec(tmp_path, "typo2.yaml", "rubric: paper\njudgee: {kind: rule}\n")
    with pytest.raises(ConfigError, match=r"did you mean `judge` \(not `judgee`\)\?"):
        load_reward_spec(str(q))


def test_launch_check_names_a_spec_briefly(tmp_path):
    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers.launch_check import check_reward

    spec = _spec(tmp_path, "bad.yaml", "rubric: 'bt17_nosuchmod:RUBRIC'\n")
    problems: list[str] = []
    check_reward({"reward_kwargs": {"reward_config": load_reward_spec(str(spec)).to_json()}}, [], problems)
    assert problems and all('{"judge"' not in p for p in problems)
    assert problems[0].startswith(f"reward.custom_reward_function.reward_kwargs.reward_config: reward spec {spec} ")


def test_resume_values_are_listed_and_negative_weights_are_penalties(tmp_path, plugins):
    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers.trl_train import find_checkpoint

    with pytest.raises(ConfigError, match=r"resume: 'maybe' is not a trainer checkpoint .*allowed: auto \| true"):
        find_checkpoint(tmp_path, "maybe")
    rubric = load_rubric({"name": "pen", "rewards": [{"name": "format", "weight": -1.0}]})
    assert rubric.members[0].weight == -1.0
    spec = load_reward_spec(str(_spec(tmp_path, "s.yaml", f"rubric: 'bt17_good:RUBRIC'\npython_path: [{plugins}]\n")))
    assert [m.weight for m in spec.build_rubric().members] == [1.0, 1.0, -0.5]


# --------------------------------------------------------------------------- finding 1


def test_trl_resume_check_names_each_changed_field(tmp_path):
    from shopping_companion.config import dump_yaml, load_model
    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers.trl_train import _HEADER, TrlGrpoConfig, check_resume_config

    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    first = load_model(TrlGrpoConfig, {"model": "m", "bench": "b", "trainer": {"output_dir": str(out), "max_steps": 4}})
    # config.yaml as run_trl writes it: the resolved config, the spec identity in the first line
    ident = load_reward_spec(first.reward_config).identity()
    dump_yaml(first, out / "config.yaml", header=f"{_HEADER}{json.dumps(ident, sort_keys=True)})")

    changed = load_model(
        TrlGrpoConfig,
        out / "config.yaml",
        ["trainer.max_steps=3", "reward_config=outcome_only", "trainer.learning_rate=5e-5", "rows.limit=1"],
    )
    with pytest.raises(ConfigError) as e:
        check_resume_config(changed, load_reward_spec("outcome_only").identity(), out / "checkpoint-2")
    msg = str(e.value)
    for line in ("reward_config: 'paper' → 'outcome_only'", "trainer.learning_rate: 1e-06 → 5e-05", "rows.limit"):
        assert line in msg
    assert "trainer.max_steps" not in msg.split("changed: ")[1].split(". A resume")[0]
    assert "another --output-dir" in msg
    ok = load_model(TrlGrpoConfig, out / "config.yaml", ["trainer.max_steps=9", "trainer.report_to=none"])
    check_resume_config(ok, ident, out / "checkpoint-2")
