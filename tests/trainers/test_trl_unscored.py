"""TRL (1.16) leaves a completion out of its group baseline only when *every* reward function
returns None for it. A weight-0 flag function defined for every completion (an earlier
``deadline_missed`` reward) put unscored completions back into the baseline as reward 0."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest

from shopping_companion.trainers.trl_rollout import _log_unscored, reward_functions


def _br(judge_failed: str = "", deadline_missed: bool = False) -> dict:
    scored = {"score": 2.5, "R_z": 2.0, "R_tool": 0.3, "R_fmt": 0.2, "success": 1.0}
    return {"judge_failed": judge_failed, "deadline_missed": deadline_missed, "scored": scored}


def test_every_reward_function_is_none_for_an_unscored_completion() -> None:
    funcs, weights = reward_functions()
    assert len(funcs) == len(weights) and weights[0] == 1.0 and all(w == 0.0 for w in weights[1:])
    batch = [_br(), _br("scoring deadline missed", True), _br("judge error: boom")]
    cols = [f(completions=[None] * 3, shopcomp_reward=batch) for f in funcs]
    rows = list(zip(*cols))
    assert all(v is not None for v in rows[0])
    assert all(v is None for v in rows[1]) and all(v is None for v in rows[2])


def test_unscored_shares_are_logged_per_batch() -> None:
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    eps = [
        SimpleNamespace(judge_failed=None, deadline_missed=False),
        SimpleNamespace(judge_failed="scoring deadline missed", deadline_missed=True),
        SimpleNamespace(judge_failed="judge error", deadline_missed=False),
        SimpleNamespace(judge_failed=None, deadline_missed=False),
    ]
    _log_unscored(trainer, True, eps)
    assert trainer._metrics["train"]["shopcomp/deadline_missed"] == [0.25]
    assert trainer._metrics["train"]["shopcomp/unscored"] == [0.5]
    assert trainer._metrics["eval"] == {}
    _log_unscored(SimpleNamespace(), True, eps)  # a trainer without metrics: nothing to do, no error


def test_every_rubric_member_is_a_logged_reward_function_custom_ones_included() -> None:
    from shopping_companion.rewards.rubric import Rubric, reward

    @reward("trl_unit_brevity", key="brevity", needs=("trajectory",))
    def brevity(ctx):
        return 1.0 / (1 + len(ctx.trajectory.steps))

    rubric = Rubric([("outcome", 1.0), ("format", 1.0), (brevity, 0.5)], name="with_brevity")
    funcs, weights = reward_functions(rubric)
    names = [f.__name__ for f in funcs]
    # the members in order, then the fixed components the rubric lacks (R_tool logged as 0 here)
    assert names == ["shopcomp_total", "R_z", "R_fmt", "brevity", "R_tool", "success"]
    assert weights == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    br = _br()
    br["scored"]["brevity"] = 0.25
    got = {f.__name__: f(completions=[None, None], shopcomp_reward=[br, _br("judge error")]) for f in funcs}
    assert got["brevity"] == [0.25, None] and got["shopcomp_total"] == [2.5, None]
    # the built-in names load too (a reward-spec reference), and a rollout scored with another
    # rubric is refused by name instead of logging a made-up 0
    assert [f.__name__ for f in reward_functions("outcome_only")[0]] == [
        "shopcomp_total",
        "R_z",
        "R_tool",
        "R_fmt",
        "success",
    ]
    with pytest.raises(ValueError, match="no 'brevity'"):
        funcs[names.index("brevity")](completions=[None], shopcomp_reward=[_br()])


def test_the_trl_command_without_trl_says_where_to_run_it(tmp_path) -> None:
    import importlib.util

    from typer.testing import CliRunner

    from shopping_companion.cli import app

    if importlib.util.find_spec("trl") is not None:
        pytest.skip("TRL is installed here; tests/extras/rl/test_trl_command.py runs the command")
    res = CliRunner().invoke(app, ["grpo", "trl", "--model", "m", "--bench", "b", "--output-dir", str(tmp_path / "o")])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "needs trl" in text and ".venv-rl" in text and "scripts/install_rl.sh" in text
    assert CliRunner().invoke(app, ["grpo", "trl", "--help"]).exit_code == 0
