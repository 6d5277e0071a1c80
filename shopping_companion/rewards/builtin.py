"""The built-in reward functions of :data:`~shopping_companion.registry.REWARDS` (§5.3).

=================  =========  ==========================================================
name               key        value
=================  =========  ==========================================================
``outcome``        R_z        R1 (Eq. 6) or R2 (Eq. 7) from the verdict; metric ``R1``/``R2``
``tool_wise``      R_tool     Eq. 10 over r(u) (Eqs. 8–9); metrics ``tool_mem_mean``,
                              ``tool_prod_mean``, ``n_tool_calls``; ``per_tool_call``
``format``         R_fmt      Eq. 11; metrics ``f_ans``, ``f_th``, ``f_tc``, ``f_rec``
``f_ans`` …        f_ans …    one format indicator (0/1)
``tool_mem_mean``  …          mean r(u) over memory calls (0 when none)
``tool_prod_mean`` …          mean r(u) over product calls (0 when none)
``n_tool_calls``   …          |U(τ)|
``success``        success    1.0 / 0.0 from the verdict
=================  =========  ==========================================================

``format`` and the ``f_*`` indicators carry
:data:`~shopping_companion.rewards.format.FORMAT_REWARD_VERSION` (2: no format credit for a stage
without a valid action, our deviation from the paper's vacuous indicators), which a rubric's
``describe()`` and so the run identity include.

``tool_wise`` params: ``semantic_fallback`` — ``off`` (default: exact ids, the paper's Eqs. 8–9),
``auto`` (semantic matching where exact ids are unavailable) or ``always``; ``matcher`` — ``rule``
(default: the rule judge's value matching) or ``llm`` (the rubric resource ``llm_judge``'s
``match_products``; a ``product_matcher`` resource, when given, is used for ``rule`` too).
With the fallback on, metrics ``tool_semantic_calls`` and ``tool_semantic_matched`` are added.
Resources: ``lookup`` (product records) is required when semantic matching is needed,
``session_lookup`` enables the memory fallback.
"""

from __future__ import annotations

from typing import Any

from shopping_companion.errors import ConfigError
from shopping_companion.rewards.format import FORMAT_REWARD_VERSION, format_indicators, format_reward_from_indicators
from shopping_companion.rewards.outcome import outcome_reward
from shopping_companion.rewards.rubric import RewardContext, RewardOutput, reward
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS
from shopping_companion.rewards.tool_wise import tool_call_scores, trajectory_tool_results

__all__: list[str] = []


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


@reward("outcome", key="R_z", needs=("verdict", "stage"))
def outcome(ctx: RewardContext) -> RewardOutput:
    """R_z (Eqs. 6–7) from the judge's verdict."""
    r = outcome_reward(ctx.verdict)
    return RewardOutput(r, {f"R{ctx.stage}": r})


def _matcher(ctx: RewardContext) -> Any:
    kind = ctx.params.get("matcher", "rule")
    if kind == "rule":
        return ctx.resources.get("product_matcher")  # None -> the rule matcher
    if kind == "llm":
        judge = ctx.resources.get("llm_judge")
        if judge is None or not hasattr(judge, "match_products"):
            raise ConfigError("tool_wise matcher 'llm' needs the rubric resource 'llm_judge' (an LLMJudge)")
        return judge.match_products
    raise ConfigError(f"tool_wise matcher: must be 'rule' or 'llm', got {kind!r}")


def _tool_scores(ctx: RewardContext) -> tuple[list, list[float], dict[str, float]]:
    results = ctx.memo("tool_results", lambda: trajectory_tool_results(ctx.trajectory))
    mode = ctx.params.get("semantic_fallback", "off")
    unknown = set(ctx.params) - {"semantic_fallback", "matcher"}
    if unknown:
        raise ConfigError(f"tool_wise params: unknown {sorted(unknown)}; allowed: semantic_fallback, matcher")
    if mode in ("off", None, False):
        if not ctx.task.is_open:
            per_call, _ = ctx.memo("tool_exact", lambda: tool_call_scores(results, ctx.task))
            return results, per_call, {}
        mode = "auto"  # an open slot has no reference id: its products are judged by the matcher

    def compute() -> tuple[list[float], dict[str, float]]:
        return tool_call_scores(
            results,
            ctx.task,
            lookup=ctx.resources.get("lookup"),
            mode=mode,
            matcher=_matcher(ctx),
            session_lookup=ctx.resources.get("session_lookup"),
        )

    per_call, info = ctx.memo(f"tool_semantic:{mode}:{ctx.params.get('matcher', 'rule')}", compute)
    return results, per_call, info


@reward("tool_wise", key="R_tool", needs=("task", "trajectory"))
def tool_wise(ctx: RewardContext) -> RewardOutput:
    """R_tool (Eq. 10): the mean r(u) over every tool call; 0 without calls."""
    results, per_call, info = _tool_scores(ctx)
    mem = [x for r, x in zip(results, per_call) if r.name in MEMORY_TOOLS]
    prod = [x for r, x in zip(results, per_call) if r.name in PRODUCT_TOOLS]
    metrics = {"tool_mem_mean": _mean(mem), "tool_prod_mean": _mean(prod), "n_tool_calls": float(len(per_call)), **info}
    return RewardOutput(_mean(per_call), metrics, per_tool_call=list(per_call))


def _flags(ctx: RewardContext) -> dict[str, float]:
    return ctx.memo("format_indicators", lambda: format_indicators(ctx.trajectory))


@reward("format", key="R_fmt", needs=("trajectory", "stage"), version=FORMAT_REWARD_VERSION)
def format_(ctx: RewardContext) -> RewardOutput:
    """R_fmt (Eq. 11): :func:`~shopping_companion.rewards.format.format_reward_from_indicators` (the
    arithmetic of :func:`~shopping_companion.rewards.format.format_reward`) on indicators cached for
    the other members."""
    flags = _flags(ctx)
    return RewardOutput(format_reward_from_indicators(flags, ctx.stage), dict(flags))


def _flag_reward(flag: str) -> None:
    @reward(flag, needs=("trajectory",), description=f"format indicator {flag} (Eq. 11)", version=FORMAT_REWARD_VERSION)
    def _f(ctx: RewardContext) -> float:
        return _flags(ctx)[flag]


for _flag in ("f_ans", "f_th", "f_tc", "f_rec"):
    _flag_reward(_flag)


@reward("tool_mem_mean", needs=("task", "trajectory"))
def tool_mem_mean(ctx: RewardContext) -> float:
    """Mean r(u) over memory-tool calls (0 when none)."""
    results, per_call, _ = _tool_scores(ctx)
    return _mean([x for r, x in zip(results, per_call) if r.name in MEMORY_TOOLS])


@reward("tool_prod_mean", needs=("task", "trajectory"))
def tool_prod_mean(ctx: RewardContext) -> float:
    """Mean r(u) over product-tool calls (0 when none)."""
    results, per_call, _ = _tool_scores(ctx)
    return _mean([x for r, x in zip(results, per_call) if r.name in PRODUCT_TOOLS])


@reward("n_tool_calls", needs=("trajectory",))
def n_tool_calls(ctx: RewardContext) -> float:
    """|U(τ)|, the number of tool calls."""
    return float(len(ctx.memo("tool_results", lambda: trajectory_tool_results(ctx.trajectory))))


@reward("success", needs=("verdict",))
def success(ctx: RewardContext) -> float:
    """1.0 when the verdict says success (Eq. 5 for stage 2), else 0.0."""
    return 1.0 if ctx.verdict.success else 0.0
