"""GRPO on one node (or CPU) with TRL's ``GRPOTrainer`` (needs the ``trl`` extra: ``trl==1.16.0``),
over the same environment, token-level episodes and rubric as the verl path — for debugging a
training setup before it goes to a cluster.

:func:`make_rollout_func` returns TRL's ``rollout_func``: for every prompt of the batch (TRL's
sampler already repeats each prompt ``num_generations`` times) it plays one row episode with
:func:`~shopping_companion.trainers.episode.run_row_episode`, generating with the trainer's own
model (``transformers.generate``), and returns ``prompt_ids``, ``completion_ids`` (the response:
generated + observation tokens), ``env_mask`` (1 = generated, 0 = observation, TRL's name for
verl's ``response_mask``), ``logprobs`` (None: TRL recomputes them) and the reward breakdown per
completion (``shopcomp_reward``), which TRL forwards to the reward functions.

:func:`reward_functions` gives TRL reward functions: ``shopcomp_total`` (the rubric's total, Eq. 12
for ``paper``: the one that trains) and one per logged component — every member key of the
rubric (custom reward functions included) plus ``R_z``, ``R_tool``, ``R_fmt``, ``success`` — to
pass with ``reward_weights`` 0, so TRL logs ``rewards/<name>/mean`` for each. Give both
functions the same rubric (the environment's, from one reward spec): the rollout scores every
trajectory with it and the reward functions read the scored components. A trajectory whose
judge failed gets ``None`` (TRL leaves it out of the group baseline) instead of 0. Judging and
rewarding one trajectory have a per-sample deadline (``scoring_deadline_s``, default 60 s): a
trajectory that misses it is not scored either (``None``), gets ``env_mask`` all 0 (no gradient),
and is flagged: ``shopcomp_deadline_missed`` per completion, and the share of the batch per step
in the trainer's logged metrics as ``shopcomp/deadline_missed`` (with ``shopcomp/unscored``, the
share not scored for any reason; ``shopcomp/uncertain_share``, the share of judged items the rule
judge was uncertain about; ``shopcomp/llm_judge_calls``, LLM-judge calls per trajectory). The flag is deliberately not a reward function: TRL leaves a
completion out of its group baseline only when *every* reward function returns ``None``, so a flag
defined for every completion would put unscored ones back into the baseline as 0.

Rows come from :func:`~shopping_companion.trainers.rows.build_rows` (same as the verl parquet); TRL
passes only the ``prompt`` column to ``rollout_func``, so rows are found again by their prompt,
and two rows with the same prompt are rejected up front.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

from shopping_companion.trainers.chat_tokens import ChatTokens, stop_token_ids
from shopping_companion.trainers.episode import Generation, run_row_episode
from shopping_companion.trainers.resources import DEFAULT_SCORING_DEADLINE_S, EnvResources, check_scoring_deadline
from shopping_companion.trainers.reward import score_breakdown

__all__ = ["make_rollout_func", "reward_functions", "component_names", "trl_dataset_rows", "COMPONENTS"]

COMPONENTS = ("R_z", "R_tool", "R_fmt", "success")


def _key(prompt: Any) -> str:
    msgs = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    return json.dumps(msgs, sort_keys=True, ensure_ascii=False)


def trl_dataset_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for a ``datasets.Dataset`` (``prompt`` plus flat ``task_id`` / ``stage`` / ``stage1`` /
    ``hint`` columns). Raises ``ValueError`` when two rows share a prompt (TRL's rollout function
    could not tell them apart)."""
    out, seen = [], {}
    for r in rows:
        k = _key(r["prompt"])
        ei = r["extra_info"]
        if k in seen and seen[k] != (ei["task_id"], ei["stage"]):
            raise ValueError(
                f"rows {seen[k]} and {(ei['task_id'], ei['stage'])} have the same prompt; "
                "TRL's rollout_func receives only prompts, so each row needs a distinct one"
            )
        seen[k] = (ei["task_id"], ei["stage"])
        out.append(
            {
                "prompt": r["prompt"],
                "task_id": ei["task_id"],
                "stage": int(ei["stage"]),
                "stage1": ei["stage1"],
                "hint": ei["hint"],
            }
        )
    return out


def make_rollout_func(
    resources: EnvResources,
    rows: list[dict[str, Any]],
    *,
    max_turns: int = 20,
    max_tokens_per_turn: int = 512,
    sampling: dict[str, Any] | None = None,
    rubric: Any = None,
    scoring_deadline_s: float | None = DEFAULT_SCORING_DEADLINE_S,
    max_batch: int = 64,
    state: dict[str, Any] | None = None,
    rollouts_path: str | Path | None = None,
    first_rollout_path: str | Path | None = None,
) -> Callable[[list, Any], dict[str, list]]:
    """TRL ``rollout_func(prompts, trainer)`` over our environment (module docstring).

    Args:
        resources: the shared services (:class:`EnvResources`).
        rows: the dataset rows (from :func:`trl_dataset_rows`); prompts are looked up among them.
        max_turns: assistant turns per stage (paper: 20).
        max_tokens_per_turn: cap on one generation (the response budget is the trainer's
            ``max_completion_length``).
        sampling: ``temperature`` / ``top_p`` / ``top_k`` (default: the trainer's arguments).
        rubric: the rubric that scores the breakdown for the reward functions (a
            :class:`~shopping_companion.rewards.rubric.Rubric` or a reward-spec reference; None:
            the environment's own ``resources.reward_fn`` when it is a Rubric, else the
            breakdown's total and the fixed :data:`COMPONENTS` only).
        scoring_deadline_s: wall-clock seconds all judge and reward calls of one trajectory may
            take together (> 0; None: no deadline). A trajectory that misses it is not scored.
        max_batch: most turns generated together (>= 1). The trajectories of a call are played
            concurrently and their turns generated as padded batches
            (:class:`~shopping_companion.llm.batch_generate.AsyncBatcher`).
        state: a dict the rollout fills for the caller: ``first_rollout_weights_sha256`` (the
            :func:`~shopping_companion.llm.weights.weights_sha256` of the weights the first
            rollouts sampled from, the SFT → RL hand-off proof; a value already there, e.g. read
            back on resume, is kept) and ``batches`` (batch sizes per call).
        first_rollout_path: a JSON file the first-rollout hash is written to as soon as it is
            known (``{"first_rollout_weights_sha256": ...}``), so a run resumed from a checkpoint
            still proves what its first rollouts sampled from; None: not written.
        rollouts_path: a JSONL file to append one line per trajectory to (``step`` — the trainer's
            global step when it was sampled —, ``index`` in the call, ``group`` (the prompt's index
            among the call's distinct prompts), ``task_id``, ``stage``, ``termination``,
            ``num_turns``, ``judge_failed``, ``reward`` (the scored components, ``score`` the
            trained total)); None: nothing is written.

    Raises ``KeyError`` at rollout time for a prompt that is not one of ``rows``; ``ValueError``
    at once for a ``scoring_deadline_s`` that is not a finite number > 0 or None.
    """
    deadline = check_scoring_deadline(scoring_deadline_s)
    if max_batch < 1:
        raise ValueError(f"max_batch: must be >= 1, got {max_batch}")
    state = state if state is not None else {}
    if rubric is None:
        from shopping_companion.rewards.rubric import Rubric

        if isinstance(resources.reward_fn, Rubric):
            rubric = resources.reward_fn
    by_prompt = {_key(r["prompt"]): r for r in rows}

    def rollout(prompts: list, trainer: Any) -> dict[str, list]:
        from shopping_companion.llm.batch_generate import AsyncBatcher, GenRequest, generate_batch

        model = trainer.accelerator.unwrap_model(trainer.model)
        tok = trainer.processing_class
        chat = ChatTokens(tok, getattr(trainer, "chat_template_kwargs", None) or {})
        args = trainer.args
        sp = dict(sampling or {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k})
        budget = int(args.max_completion_length)
        stops = stop_token_ids(tok)
        pad = tok.pad_token_id if tok.pad_token_id is not None else stops[0]
        was_training = model.training
        model.eval()
        batcher = AsyncBatcher(
            lambda reqs: generate_batch(model, reqs, stop_ids=stops, pad_id=pad), max_batch=max_batch
        )

        async def generate(ids: list[int], params: dict[str, Any]) -> Generation:
            n = max(1, min(int(params.get("max_tokens", max_tokens_per_turn)), max_tokens_per_turn))
            top_k = params.get("top_k")
            req = GenRequest(
                ids,
                n,
                temperature=float(params.get("temperature") or 0.0),
                top_p=float(params.get("top_p") or 1.0),
                top_k=int(top_k) if top_k else None,
            )
            return Generation(await batcher.generate(req))

        async def play(prompt: Any) -> Any:
            try:
                row = by_prompt.get(_key(prompt))
                if row is None:
                    raise KeyError("rollout_func got a prompt that is not one of the dataset rows it was built with")
                env = resources.make_env(
                    resources.task(row["task_id"]), hint=row["hint"], max_turns=max_turns, scoring_deadline_s=deadline
                )
                return await run_row_episode(env, int(row["stage"]), chat, generate, sp, budget, stage1=row["stage1"])
            finally:
                batcher.unregister()

        async def all_rows() -> list[Any]:
            for _ in prompts:  # every episode counts before the first one asks for a generation
                batcher.register()
            # the episodes of a step run concurrently; their turns are generated as batches
            return list(await asyncio.gather(*(play(p) for p in prompts)))

        if state.get("first_rollout_weights_sha256") is None:
            from shopping_companion.llm.weights import weights_sha256

            state["first_rollout_weights_sha256"] = weights_sha256(model)
            if first_rollout_path is not None:
                from shopping_companion.runs import write_text_atomic

                write_text_atomic(
                    first_rollout_path,
                    json.dumps({"first_rollout_weights_sha256": state["first_rollout_weights_sha256"]}) + "\n",
                )
        try:
            eps = asyncio.run(all_rows())
        finally:
            model.train(was_training)
        state["batches"] = state.get("batches", []) + [batcher.batches]
        _log_unscored(trainer, was_training, eps)
        rewards = []
        for e in eps:
            br = e.reward.model_dump()
            br["judge_failed"] = e.judge_failed or ""
            br["deadline_missed"] = bool(e.deadline_missed)
            br["scored"] = score_breakdown(br, rubric)
            rewards.append(br)
        if rollouts_path is not None:
            _dump(Path(rollouts_path), int(getattr(trainer.state, "global_step", 0)), prompts, eps, rewards)
        return {
            "prompt_ids": [e.tokens.prompt_ids for e in eps],
            "completion_ids": [e.tokens.response_ids for e in eps],
            # an unscored trajectory (judge failed, scoring deadline missed) gets no gradient
            "env_mask": [
                [0] * len(e.tokens.response_mask) if (e.judge_failed or e.deadline_missed) else e.tokens.response_mask
                for e in eps
            ],
            "logprobs": None,
            "shopcomp_reward": rewards,
            "shopcomp_env_s": [e.env_s for e in eps],
            "shopcomp_deadline_missed": [bool(e.deadline_missed) for e in eps],
        }

    return rollout


def _dump(path: Path, step: int, prompts: list, eps: list[Any], rewards: list[dict[str, Any]]) -> None:
    """Append one JSON line per trajectory of a rollout call (see ``rollouts_path``)."""
    groups: dict[str, int] = {}
    lines = []
    for i, (p, e, r) in enumerate(zip(prompts, eps, rewards)):
        g = groups.setdefault(_key(p), len(groups))
        lines.append(
            json.dumps(
                {
                    "step": step,
                    "index": i,
                    "group": g,
                    "task_id": e.task_id,
                    "stage": e.stage,
                    "termination": e.termination,
                    "num_turns": e.num_turns,
                    "judge_failed": e.judge_failed or "",
                    "reward": r["scored"] if not (e.judge_failed or e.deadline_missed) else None,
                    "components": r.get("components", {}),
                },
                sort_keys=True,
            )
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _log_unscored(trainer: Any, training: bool, eps: list[Any]) -> None:
    """Append this batch's judging metrics to the trainer's logged metrics (TRL averages each list
    per logging step): the share of trajectories that missed the scoring deadline
    (``shopcomp/deadline_missed``) and of those not scored at all (``shopcomp/unscored``), the share
    of judged items the rule judge was uncertain about (``shopcomp/uncertain_share``, from every
    verdict's items; absent when no verdict has items) and the LLM-judge calls per trajectory
    (``shopcomp/llm_judge_calls``: a cascade asks only for stages with uncertain items)."""
    metrics = getattr(trainer, "_metrics", None)
    if not eps or not isinstance(metrics, dict):
        return
    per_mode = metrics.get("train" if training else "eval")
    if per_mode is None or not hasattr(per_mode, "__getitem__"):
        return
    n = len(eps)
    per_mode["shopcomp/deadline_missed"].append(sum(bool(e.deadline_missed) for e in eps) / n)
    per_mode["shopcomp/unscored"].append(sum(bool(e.judge_failed or e.deadline_missed) for e in eps) / n)
    judging = [getattr(e, "judging", None) or {} for e in eps]
    items = sum(j.get("items", 0.0) for j in judging)
    if items > 0:
        per_mode["shopcomp/uncertain_share"].append(sum(j.get("uncertain", 0.0) for j in judging) / items)
    per_mode["shopcomp/llm_judge_calls"].append(sum(j.get("llm_calls", 0.0) for j in judging) / n)


def _component(name: str) -> Callable[..., list[float | None]]:
    key = "score" if name == "shopcomp_total" else name

    def fn(completions: list, shopcomp_reward: list[dict[str, Any]] | None = None, **kwargs: Any) -> list[float | None]:
        if shopcomp_reward is None:
            raise ValueError("shopcomp_reward missing: use make_rollout_func as the trainer's rollout_func")
        out: list[float | None] = []
        for r in shopcomp_reward:
            if r.get("judge_failed") or r.get("deadline_missed"):
                out.append(None)
                continue
            if key not in r["scored"]:
                raise ValueError(
                    f"reward function {name!r}: the rollout's scored components have no {key!r} "
                    f"(they have {sorted(r['scored'])}); give make_rollout_func and reward_functions the same rubric"
                )
            out.append(float(r["scored"][key]))
        return out

    fn.__name__ = name
    return fn


def component_names(rubric: Any = None) -> list[str]:
    """The weight-0 reward functions' names for ``rubric`` (a Rubric, a
    :class:`~shopping_companion.assembly.reward_spec.RewardSpec` or any reward-spec reference; None: only
    :data:`COMPONENTS`): the rubric's member keys in member order, then the :data:`COMPONENTS`
    it lacks. Raises :class:`ConfigError` for a reference that does not load and ``ValueError``
    for a member key that would clash with ``shopcomp_total``."""
    keys: list[str] = []
    if rubric is not None:
        from shopping_companion.rewards.rubric import Rubric
        from shopping_companion.assembly.reward_spec import load_reward_spec

        r = rubric if isinstance(rubric, Rubric) else load_reward_spec(rubric).build_rubric()
        keys = [m.key for m in r.members]
    if "shopcomp_total" in keys:
        raise ValueError("a rubric member is keyed 'shopcomp_total', the name of the total reward; rename its key")
    return keys + [c for c in COMPONENTS if c not in keys]


def reward_functions(rubric: Any = None) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """``(reward_funcs, reward_weights)`` for ``GRPOTrainer`` / ``GRPOConfig``: the total
    (``shopcomp_total``) with weight 1, then :func:`component_names` of ``rubric`` (every member
    key, custom ones included, and the fixed :data:`COMPONENTS`) with weight 0, logged by TRL as
    ``rewards/<name>/mean``. ``rubric`` must be the one given to :func:`make_rollout_func` (or
    the environment's, its default). Every function returns ``None`` for an unscored trajectory
    (judge failed, scoring deadline missed), so TRL leaves it out of its group's baseline."""
    names = component_names(rubric)
    funcs = [_component("shopcomp_total")] + [_component(c) for c in names]
    return funcs, [1.0] + [0.0] * len(names)
