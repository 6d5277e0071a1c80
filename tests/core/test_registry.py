"""Named registries: names, dotted paths, real entry-point discovery; YAML config helpers."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from shopping_companion.config import apply_overrides, load_config
from shopping_companion.errors import ConfigError
from shopping_companion.registry import BACKENDS, JUDGES, REWARDS, SIMULATORS, Registry, UnknownNameError, load_object
from shopping_companion.rewards import Rubric, compute_reward
from shopping_companion.types import Preference, ProductSlot, SessionRef, Step, Task, Trajectory, Verdict


def test_register_get_and_errors():
    reg: Registry = Registry("widget", "shopping_companion.test_widgets")

    @reg.register("alpha")
    def alpha():
        return "a"

    reg.register("beta", len)
    assert reg.get("alpha") is alpha and reg.get("beta") is len
    assert reg.get(alpha) is alpha  # objects pass through
    assert "alpha" in reg and "gamma" not in reg
    assert reg.names() == ["alpha", "beta"]
    with pytest.raises(ConfigError, match="already registered"):
        reg.register("alpha", len)
    reg.register("alpha", len, replace=True)
    assert reg.get("alpha") is len
    with pytest.raises(UnknownNameError) as e:
        reg.get("gamma")
    msg = str(e.value)
    assert "unknown widget 'gamma'" in msg and "alpha, beta" in msg and "module:attr" in msg
    with pytest.raises(ConfigError, match="without ':'"):
        reg.register("a:b", len)
    reg.unregister("beta")
    assert reg.names() == ["alpha"]


def test_dotted_paths():
    assert load_object("os.path:join") is importlib.import_module("os.path").join
    assert load_object("shopping_companion.rewards.rubric:Rubric.from_config").__name__ == "from_config"
    assert REWARDS.get("shopping_companion.rewards:compute_reward") is compute_reward
    with pytest.raises(ConfigError, match="cannot import module"):
        load_object("no_such_pkg_abc:x")
    with pytest.raises(ConfigError, match="'nothing_here' not found"):
        load_object("os.path:nothing_here")
    with pytest.raises(ConfigError, match="form"):
        load_object("os.path.join")


def test_builtin_registries_are_populated_lazily():
    assert {"outcome", "tool_wise", "format", "f_ans", "f_th", "f_tc", "f_rec", "success"} <= set(REWARDS.names())
    assert {"rule", "llm"} <= set(JUDGES.names())
    from shopping_companion.judges.llm import LLMJudge
    from shopping_companion.judges.rule import RuleJudge

    assert JUDGES.get("rule") is RuleJudge and JUDGES.get("llm") is LLMJudge
    assert {"scripted", "llm"} <= set(SIMULATORS.names())  # registered by envs.simulator, imported lazily
    assert SIMULATORS.group == "shopping_companion.simulators" and BACKENDS.group == "shopping_companion.backends"


def test_entry_point_discovery_from_an_installed_distribution(tmp_path, monkeypatch):
    """A real dist-info with entry_points.txt on sys.path, found by importlib.metadata."""
    pkg = tmp_path / "sc_demo_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent("""
        def plugin_bonus(ctx):
            return 0.25 if ctx.trajectory.stage == 2 else 0.0

        def broken(ctx):
            return 0.0
    """)
    )
    dist = tmp_path / "sc_demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sc-demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[shopping_companion.rewards]\n"
        "plugin_bonus = sc_demo_plugin:plugin_bonus\n"
        "plugin_missing = sc_demo_plugin:does_not_exist\n"
    )
    assert "plugin_bonus" not in REWARDS.names()
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        assert {"plugin_bonus", "plugin_missing"} <= set(REWARDS.names())
        fn = REWARDS.get("plugin_bonus")
        assert fn.__module__ == "sc_demo_plugin"
        with pytest.raises(ConfigError, match="entry point 'sc_demo_plugin:does_not_exist'.*failed to load"):
            REWARDS.get("plugin_missing")

        task = Task(
            task_id="t",
            instruction="x",
            user_id="u",
            history=[SessionRef(session_id="s", date="2024-01-01")],
            needle_session_ids=["s"],
            preferences=[Preference(attribute="colour", value="navy")],
            slots=[ProductSlot(product_type="shirt", reference_product_id="p")],
        )
        traj = Trajectory(task_id="t", stage=2, steps=[Step(assistant_text="x")], final_answer="@REC::p@")
        verdict = Verdict(judge="t", stage=2, F=1, N=1, p2=1, q2=1, m2=1, success=True)
        rubric = Rubric.from_config(
            {
                "rewards": [
                    {"name": "outcome"},
                    {"name": "tool_wise"},
                    {"name": "format"},
                    {"name": "plugin_bonus", "weight": 2},
                ]
            }
        )
        got = rubric(task, traj, verdict)
        assert got.components["plugin_bonus"] == 0.25
        assert got.total == pytest.approx(compute_reward(task, traj, verdict).total + 0.5)
    finally:
        sys.modules.pop("sc_demo_plugin", None)


def test_yaml_config_helpers(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("a: 1\nb: {c: x}\n")
    cfg = load_config(p)
    assert cfg == {"a": 1, "b": {"c": "x"}}
    out = apply_overrides(cfg, ["b.c=0.5", "b.d.e=true", "f=[1, 2]", "g=hello world"])
    assert out == {"a": 1, "b": {"c": 0.5, "d": {"e": True}}, "f": [1, 2], "g": "hello world"}
    assert cfg["b"] == {"c": "x"}  # the input is not modified
    with pytest.raises(ConfigError, match="not a mapping"):
        apply_overrides(cfg, ["a.b=1"])
    with pytest.raises(ConfigError, match="dotted.key=value"):
        apply_overrides(cfg, ["novalue"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
