"""The reward spec (shopping_companion/rewards/spec.py): one description of the rubric, its python
path and the judge, read from every form a user gives and carried as JSON to workers."""

from __future__ import annotations

import json
import textwrap
import threading
import time

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.rewards.spec import BoundedJudge, RewardSpec, load_reward_spec

PLUGIN = textwrap.dedent(
    """
    from shopping_companion.rewards.rubric import Rubric, reward

    @reward("brevity_{tag}", key="brevity_{tag}", needs=("trajectory",))
    def brevity(ctx):
        return 1.0 / (1 + len(ctx.trajectory.steps))

    RUBRIC = Rubric([("outcome", 1.0), ("format", 1.0), (brevity, 0.5)], name="brevity_{tag}")

    def make_config():
        return {{"name": "cfg_{tag}", "rewards": [{{"name": "outcome"}}, {{"path": "{mod}:brevity", "weight": 0}}]}}

    NOT_A_RUBRIC = 3
    """
)


def _plugin(tmp_path, tag: str):
    mod = f"spec_plugin_{tag}"
    d = tmp_path / "plugins"
    d.mkdir(exist_ok=True)
    (d / f"{mod}.py").write_text(PLUGIN.format(tag=tag, mod=mod))
    return d, mod


def test_default_and_builtin_names():
    assert load_reward_spec(None) == RewardSpec()
    spec = load_reward_spec("outcome_only")
    assert spec.rubric == "outcome_only" and spec.judge.kind == "rule"
    assert [m.key for m in spec.build_rubric().members] == ["R_z", "R_tool", "R_fmt"]
    assert spec.component_keys() == ["R_z", "R_tool", "R_fmt", "success", "stage"]


def test_spec_file_with_python_path_and_module_attr(tmp_path):
    d, mod = _plugin(tmp_path, "a")
    f = tmp_path / "reward.yaml"
    f.write_text(f"rubric: {mod}:RUBRIC\npython_path: [plugins]\nscoring_deadline_s: 30\n")
    spec = load_reward_spec(str(f))
    assert spec.python_path == [str(d.absolute())]  # relative to the spec file, made absolute
    assert spec.scoring_deadline_s == 30
    assert spec.component_keys() == ["R_z", "R_fmt", "brevity_a", "success", "stage"]
    # the JSON form round-trips in a process that never saw the file
    again = load_reward_spec(spec.to_json())
    assert again == spec and again.component_keys() == spec.component_keys()
    assert spec.py_modules() == [str(d.absolute() / f"{mod}.py")]


def test_function_returning_a_config_and_inline_rubric(tmp_path):
    d, mod = _plugin(tmp_path, "b")
    spec = load_reward_spec({"rubric": f"{mod}:make_config", "python_path": [str(d)]})
    assert spec.build_rubric().name == "cfg_b"
    inline = load_reward_spec({"name": "inline", "rewards": [{"name": "format"}]})
    assert inline.build_rubric().name == "inline" and inline.component_keys()[0] == "R_fmt"


def test_plain_rubric_file_is_a_spec(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("name: mine\nrewards:\n  - {name: outcome, weight: 2}\n")
    spec = load_reward_spec(f)
    assert spec.rubric == str(f.absolute()) and spec.build_rubric().members[0].weight == 2


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("no_such_rubric", "not a built-in rubric"),
        ("missing.yaml", "config file .missing.yaml. does not exist"),
        ("{not json", "not valid JSON"),
        ({"rubric": "paper", "judge": {"kind": "llm"}}, "judge.model is required"),
        ({"rubric": "paper", "judge": {"kind": "llm", "model": "m", "base_url": "ftp://x"}}, "http://"),
        ({"rubric": "paper", "scoring_deadline_s": -1}, "scoring_deadline_s"),
        ({"rubric": "paper", "judge": {"max_in_flight": 0}}, "max_in_flight"),
        ({"rubric": "paper", "colour": "red"}, "colour"),
    ],
)
def test_bad_specs_name_the_field(value, needle):
    with pytest.raises(ConfigError, match=needle):
        load_reward_spec(value)


def test_bad_python_path_and_bad_object(tmp_path):
    spec = load_reward_spec({"rubric": "x_mod_nowhere:R", "python_path": [str(tmp_path / "nope")]})
    with pytest.raises(ConfigError, match="python_path: .* is not a directory"):
        spec.build_rubric()
    d, mod = _plugin(tmp_path, "c")
    with pytest.raises(ConfigError, match="resolved to int"):
        load_reward_spec({"rubric": f"{mod}:NOT_A_RUBRIC", "python_path": [str(d)]}).build_rubric()
    with pytest.raises(ConfigError, match="cannot import module"):
        load_reward_spec("x_mod_nowhere:R").build_rubric()


def test_identity_ignores_transport_settings():
    a = load_reward_spec({"judge": {"kind": "llm", "model": "m", "base_url": "http://a:1/v1", "max_in_flight": 2}})
    b = load_reward_spec({"judge": {"kind": "llm", "model": "m", "base_url": "http://b:2/v1", "cache_path": "/x"}})
    assert a.identity() == b.identity()
    assert json.loads(a.to_json())["judge"]["max_in_flight"] == 2


def test_bounded_judge_caps_concurrent_calls():
    class Slow:
        name = "slow"

        def __init__(self):
            self.calls = 0

        def judge(self, task, trajectory):
            time.sleep(0.05)
            self.calls += 1
            return trajectory

    inner = Slow()
    bj = BoundedJudge(inner, max_in_flight=3)
    threads = [threading.Thread(target=bj.judge, args=(None, i)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inner.calls == 12 and bj.peak_in_flight == 3 and bj.in_flight == 0
    assert bj.name == "slow" and bj.judge(None, 7) == 7
    with pytest.raises(ConfigError, match="max_in_flight"):
        BoundedJudge(inner, 0)
