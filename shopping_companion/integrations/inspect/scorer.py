"""The Inspect scorer: our judge and reward spec over the episode's trajectories (docs/integrations.md,
"Inspect AI").

:func:`shopping_scorer` reads the episode the solver stored (:data:`~.solvers.RESULT_KEY`) and
judges and rewards every stage again with the task's judge and rubric
(:func:`~shopping_companion.benchmark.rescore.rescore_result`: what the environment does when a
stage ends, so a scorer of the same judge and rubric gives the environment's numbers; under
``inspect score`` with another reward spec, that spec's). The score's value holds

- ``acc``: the stage-1 preference accuracy m1/F (NaN for ``oracle`` episodes, where it does not
  apply, as in ``shopcomp eval``'s report);
- ``succ``: 1.0 when the stage-2 recommendation succeeded (Eq. 5; on a ``needle_removed`` stress
  variant stage 1 must succeed too, :func:`~shopping_companion.envs.env.episode_scores`), else 0.0;
- ``reward``, ``R_z``, ``R_tool``, ``R_fmt``: the final stage's total (Eq. 12, or the rubric's)
  and components (missing components are NaN);
- ``reward_s1``, ``R_z_s1``, ``R_tool_s1``, ``R_fmt_s1``: the same for stage 1 (NaN when the
  episode has one stage).

Inspect leaves NaN values out of a metric. The metrics: mean and standard error of each key. An
episode that ended with an error (the model or a tool service failed, the judge failed) is not
scored (value NaN, the error as explanation), as ``shopcomp eval`` leaves it out of its figures.
The score's metadata holds each stage's verdict and reward breakdown and the simulator record.
"""

from __future__ import annotations

import math
from typing import Any

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from shopping_companion.benchmark.metrics import acc_applies
from shopping_companion.benchmark.rescore import rescore_result
from shopping_companion.integrations.inspect.solvers import RESULT_KEY, Episodes
from shopping_companion.types import EpisodeResult, StageResult

__all__ = ["COMPONENTS", "SCORE_KEYS", "score_value", "shopping_scorer"]

#: The reward components reported per stage.
COMPONENTS = ("R_z", "R_tool", "R_fmt")
#: The keys of a score's value.
SCORE_KEYS = ("acc", "succ", "reward", *COMPONENTS, "reward_s1", *(f"{c}_s1" for c in COMPONENTS))
_NAN = float("nan")


def _stage_values(stage: StageResult | None, suffix: str) -> dict[str, float]:
    if stage is None:
        return {f"reward{suffix}": _NAN, **{f"{c}{suffix}": _NAN for c in COMPONENTS}}
    comps = stage.reward.components
    return {f"reward{suffix}": stage.reward.total, **{f"{c}{suffix}": comps.get(c, _NAN) for c in COMPONENTS}}


def score_value(result: EpisodeResult) -> dict[str, float]:
    """The score value of a judged episode (module docstring): every key of :data:`SCORE_KEYS`."""
    by_stage = {st.trajectory.stage: st for st in result.stages}
    return {
        "acc": result.acc if acc_applies(result) else _NAN,
        "succ": 1.0 if result.succ else 0.0,
        **_stage_values(by_stage.get(2), ""),
        **_stage_values(by_stage.get(1) if result.mode == "two_stage" else None, "_s1"),
    }


def _metadata(result: EpisodeResult) -> dict[str, Any]:
    return {
        "stages": [
            {
                "stage": st.trajectory.stage,
                "verdict": st.verdict.model_dump(mode="json"),
                "reward": st.reward.model_dump(),
            }
            for st in result.stages
        ],
        "preference_verdict": result.preference_verdict.model_dump(mode="json") if result.preference_verdict else None,
        "simulator": result.simulator,
    }


@scorer(metrics={key: [mean(), stderr()] for key in SCORE_KEYS})
def shopping_scorer(episodes: Episodes) -> Scorer:
    """Judge and reward the stored episode (module docstring) with the judge and rubric of
    ``episodes.source`` (the task's)."""
    src = episodes.source

    async def score(state: TaskState, target: Target) -> Score:
        stored = state.store.get(RESULT_KEY)
        if stored is None:
            return Score(value=_NAN, explanation="the episode did not finish (no result stored)")
        result = EpisodeResult.model_validate(stored)
        result = rescore_result(result, src.task(result.task_id), src.judge, src.settings.reward_fn)
        if result.error is not None:
            return Score(value=_NAN, explanation=f"not scored: {result.error}", metadata=_metadata(result))
        value = score_value(result)
        words = f"Acc {value['acc']:.3f}, Succ {value['succ']:.0f}, reward {value['reward']:.4f}"
        if math.isnan(value["acc"]):
            words = f"Succ {value['succ']:.0f}, reward {value['reward']:.4f}"
        answer = result.stages[-1].trajectory.final_answer if result.stages else None
        return Score(value=value, answer=answer, explanation=words, metadata=_metadata(result))

    return score
