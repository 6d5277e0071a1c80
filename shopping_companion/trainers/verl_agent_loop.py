"""verl agent loop for Shopping Companion GRPO (needs the ``verl`` extra: ``verl[verl-core]==0.9.1``).

:class:`ShoppingCompanionAgentLoop` is a subclass of verl's ``AgentLoopBase``, registered under
the name ``shopping_companion`` through verl's public agent-loop config hook:
``configs/grpo/agent_loop.yaml`` (``{name, _target_, ...our keys}``) given as
``actor_rollout_ref.rollout.agent.agent_loop_config_path``; rows pick it with their ``agent_name``
column. (It deliberately does not use verl's ``@register`` decorator: that decorator runs when
hydra first imports this module and would replace the YAML entry — and its settings, e.g. the
rubric — with a bare one for every later trajectory.) verl creates one instance per trajectory; all per-trajectory state (the
environment, token buffers) lives in :meth:`run`'s scope, the shared services in the process-wide
:class:`~shopping_companion.trainers.resources.EnvResources`.

:meth:`run` drives :class:`~shopping_companion.envs.env.ShoppingCompanionEnv` itself through
:func:`~shopping_companion.trainers.episode.run_row_episode`: it generates with verl's server
manager (``server_manager.generate(request_id=, prompt_ids=, sampling_params=)``, one sticky
request id per trajectory), lets the environment parse tool calls, run our tools, the judge, the
rubric and (for stage-2 rows that ask for it) the user simulator, and appends observations as
tokens with ``response_mask`` 0. Limits: ``actor_rollout_ref.rollout.multi_turn.max_assistant_turns``
(paper: 20) → the environment's ``max_turns``; ``rollout.response_length`` (paper: 32,768) → the
response token budget. The trajectory's reward breakdown goes to the trainer in ``extra_fields``
(read by :func:`shopping_companion.trainers.reward.compute_score`). A trajectory whose judge failed
gets ``response_mask`` all 0 (no gradient) instead of being trained on as a 0, and the
``grpo_judged`` advantage estimator (:mod:`shopping_companion.trainers.verl_plugin`) keeps it out of
its group's statistics. The same holds for a trajectory whose judging and rewarding missed the
per-sample deadline (``scoring_deadline_s``, :class:`~shopping_companion.trainers.resources.ScoringDeadline`):
it is flagged (``extra_fields["shopcomp_deadline_missed"]``, counted per step as
``shopcomp/deadline_missed/count``) and the step goes on without waiting for it.

The reward spec: the judge (rule or LLM) and the rubric come from
``reward.custom_reward_function.reward_kwargs.reward_config`` of the trainer config
(:data:`REWARD_CONFIG_KEY`), the same key verl passes to
:func:`~shopping_companion.trainers.reward.compute_score`, so both sides score with one spec
(``shopcomp grpo launch --reward-config X`` sets it; docs/rewards.md). An LLM judge runs in the
environment's worker threads, at most ``judge.max_in_flight`` requests at a time per worker
process, with its reply cache keyed by content hash; its failures are unscored samples, counted
per step.

Agent-loop config keys (``configs/grpo/agent_loop.yaml``; each is a constructor argument):
``benchmark`` (default: the row's ``extra_info.benchmark``), ``data_dir``, ``index_dir``,
``memory_cache``, ``max_observation_chars``, ``resources`` (the name of
:func:`~shopping_companion.trainers.resources.register_resources` resources, for tests),
``record_messages`` (also return the stage's chat in ``extra_fields["shopcomp_messages"]``; for
debugging, it makes the batch much larger), ``scoring_deadline_s`` (wall-clock seconds all judge
and reward calls of one trajectory may take together, a number > 0, or ``null``: no deadline;
unset: the reward spec's, default 60), ``zero_std_warn_share`` (read by
:class:`ShoppingCompanionAgentLoopManager`: warn in the trainer's log when more than this share of
a step's GRPO groups have zero reward variance; default 0.5, ``null``: never) and the older
``rubric`` (a reward-spec reference used when ``reward_config`` is not set; both set is an error).

Where the tools, judge and rubric run: ``tool_service`` (``local``, the default: loaded in each
rollout worker; or ``serve:URL``: a ``shopcomp serve`` service, docs/cluster.md, that must hold
the rows' benchmark and score with the run's reward spec) and ``service`` (its client settings:
``token_env``, ``timeout_s``, ``retries``, ``backoff_s``, ``deadline_s``). The key is not called
``tools``: verl passes its own tool list to every agent loop under that name.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Optional
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopManager, AgentLoopMetrics, AgentLoopOutput

from shopping_companion.trainers.chat_tokens import ChatTokens
from shopping_companion.trainers.episode import Generation, run_row_episode
from shopping_companion.trainers.launch import REWARD_CONFIG_KEY  # noqa: F401 - re-exported: the one key
from shopping_companion.trainers.resources import (
    EnvResources,
    ResourceSpec,
    check_scoring_deadline,
    get_resources,
    registered_resources,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ZERO_STD_WARN_SHARE",
    "ShoppingCompanionAgentLoop",
    "ShoppingCompanionAgentLoopManager",
    "rollout_reward_metrics",
    "zero_std_warn_threshold",
]


_FROM_SPEC: Any = object()  # scoring_deadline_s not set in the agent-loop config: the reward spec's

_UNREAD: Any = object()  # the manager has not read zero_std_warn_share yet

#: ``zero_std_warn_share`` default: warn when more than half of a step's GRPO groups have zero variance
DEFAULT_ZERO_STD_WARN_SHARE = 0.5
#: two scored totals of a group closer than this count as equal (verl's GRPO epsilon)
ZERO_STD_TOL = 1e-6


def zero_std_warn_threshold(value: Any) -> float | None:
    """The agent-loop setting ``zero_std_warn_share``: a share in [0, 1] (the manager warns when a
    step's ``shopcomp/zero_std_groups/share`` is above it) or None (``null``: never warn).
    ``ValueError`` naming the key otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"zero_std_warn_share: must be a number in [0, 1] or null (never warn), got {value!r}")
    return float(value)


def _group_id(x: Any) -> Optional[str]:
    x = _plain(x)
    return None if x is None else str(x)


def _plain(x: Any) -> Any:
    """numpy scalars / 0-d arrays from verl's non-tensor batch → Python values."""
    if hasattr(x, "item") and getattr(x, "shape", None) == ():
        return x.item()
    return x


class ShoppingCompanionAgentLoop(AgentLoopBase):
    """One row = one (task, stage) trajectory of the Shopping Companion environment (module docstring)."""

    def __init__(
        self,
        *args: Any,
        tools: Any = None,
        name: Optional[str] = None,
        benchmark: Optional[str] = None,
        data_dir: Optional[str] = None,
        index_dir: Optional[str] = None,
        rubric: Optional[str] = None,
        memory_cache: int = 256,
        max_observation_chars: int = 12_000,
        resources: Optional[str] = None,
        record_messages: bool = False,
        scoring_deadline_s: Any = _FROM_SPEC,
        tool_service: str = "local",
        service: Any = None,
        zero_std_warn_share: Any = DEFAULT_ZERO_STD_WARN_SHARE,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # read by ShoppingCompanionAgentLoopManager from the same config entry; checked here too
        self.zero_std_warn_share = zero_std_warn_threshold(zero_std_warn_share)
        self.tool_service = str(tool_service or "local")
        self.service = _service_settings(service)
        self.reward_config = _reward_config(self.config, rubric)
        if scoring_deadline_s is _FROM_SPEC:
            from shopping_companion.assembly.reward_spec import load_reward_spec

            scoring_deadline_s = load_reward_spec(self.reward_config).scoring_deadline_s
        self.scoring_deadline_s = check_scoring_deadline(scoring_deadline_s)
        mt = self.rollout_config.multi_turn
        self.max_turns = int(mt.get("max_assistant_turns") or 20) if mt is not None else 20
        self.response_length = int(self.rollout_config.response_length)
        self.benchmark = benchmark
        self.data_dir = data_dir
        self.index_dir = index_dir
        self.memory_cache = int(memory_cache)
        self.max_observation_chars = int(max_observation_chars)
        self.resources_name = resources
        self.record_messages = bool(record_messages)
        self.chat = ChatTokens(self.tokenizer, dict(self.apply_chat_template_kwargs or {}))

    async def _resources(self, extra: dict[str, Any]) -> EnvResources:
        if self.resources_name:
            res = registered_resources(self.resources_name)
            if self.reward_config is None:
                return res  # the registered services as they are (their own judge and rubric)
            return await asyncio.to_thread(res.with_reward, self.reward_config)
        bench = self.benchmark or extra.get("benchmark")
        if not bench:
            raise ValueError(
                "no benchmark: set `benchmark` in the agent loop config or prepare rows with "
                "`shopcomp grpo prepare` (extra_info.benchmark)"
            )
        spec = ResourceSpec(
            benchmark=str(bench),
            data_dir=self.data_dir,
            index_dir=self.index_dir,
            reward_config=self.reward_config or "paper",
            memory_cache=self.memory_cache,
            tools=self.tool_service,
            **self.service,
        )
        return await asyncio.to_thread(get_resources, spec)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = {k: _plain(v) for k, v in dict(kwargs.get("extra_info") or {}).items()}
        for key in ("task_id", "stage"):
            if key not in extra:
                raise ValueError(f"extra_info.{key} is missing: prepare rows with `shopcomp grpo prepare`")
        res = await self._resources(extra)
        task = res.task(str(extra["task_id"]))
        stage = int(extra["stage"])
        env = res.make_env(
            task,
            hint=str(extra.get("hint", "none")),
            max_turns=self.max_turns,
            simulator_seed=int(extra.get("index", 0)),
            max_observation_chars=self.max_observation_chars,
            scoring_deadline_s=self.scoring_deadline_s,
        )
        request_id = uuid4().hex

        async def generate(ids: list[int], sp: dict[str, Any]) -> Generation:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids, sampling_params=sp)
            return Generation(list(out.token_ids), list(out.log_probs) if out.log_probs else None)

        ep = await run_row_episode(
            env,
            stage,
            self.chat,
            generate,
            dict(sampling_params),
            self.response_length,
            stage1=str(extra.get("stage1", "gold")),
        )
        toks = ep.tokens
        prompt_ids = self._cap_text_prompt_length(toks.prompt_ids)
        mask = list(toks.response_mask)
        if ep.judge_failed or ep.deadline_missed:
            mask = [0] * len(mask)  # not scored: contributes no policy gradient
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=toks.response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=toks.response_logprobs[: self.response_length]
            if toks.has_logprobs and toks.response_logprobs
            else None,
            num_turns=ep.num_turns,
            metrics=AgentLoopMetrics(generate_sequences=ep.generate_s, tool_calls=ep.env_s),
            extra_fields={
                **ep.extra_fields(),
                # verl's GRPO group id: the rollout batch verl's reward loop returns does not carry the
                # input's uid column, so the manager's per-step group metrics read it from here
                "shopcomp_uid": _group_id(kwargs.get("uid")),
                **({"shopcomp_messages": ep.messages} if self.record_messages else {}),
            },
        )


#: the client settings an agent loop's ``service`` mapping may set (ResourceSpec fields)
SERVICE_KEYS = ("token_env", "timeout_s", "retries", "backoff_s", "deadline_s", "direct")


def _service_settings(value: Any) -> dict[str, Any]:
    """The agent loop's ``service`` mapping (None: the defaults) as ResourceSpec keyword
    arguments; ``ValueError`` naming an unknown key and the allowed ones."""
    if value is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - verl brings omegaconf
        pass
    if not isinstance(value, dict):
        raise ValueError(f"service: must be a mapping of {', '.join(SERVICE_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(SERVICE_KEYS))
    if unknown:
        raise ValueError(f"service: unknown key(s) {unknown}; allowed: {', '.join(SERVICE_KEYS)}")
    return dict(value)


def _reward_config(trainer_config: Any, rubric: Optional[str]) -> Optional[str]:
    """The reward spec of this run: ``reward_kwargs.reward_config`` of the trainer config (the
    one place; ``compute_score`` gets it as a keyword), else the agent loop's own (older)
    ``rubric`` key, else None (registered resources keep their judge and rubric; built ones use
    ``paper``). Raises ``ValueError`` when both are set: the spec is given in one place."""
    from omegaconf import OmegaConf

    value = None
    try:
        value = OmegaConf.select(trainer_config, REWARD_CONFIG_KEY, default=None)
    except Exception:  # noqa: BLE001 - a plain dict or a config without the key
        value = None
    if value is not None and rubric is not None:
        raise ValueError(
            f"agent loop config: rubric={rubric!r} and {REWARD_CONFIG_KEY} are both set; the reward spec goes in "
            f"{REWARD_CONFIG_KEY} only (shopcomp grpo launch --reward-config), which scores both verl sides"
        )
    if value is not None:
        return str(value)
    return rubric


def _finite(x: Any) -> float | None:
    """``x`` as a finite float, else None (None, strings, NaN, inf, arrays that are not scalars,
    integers too large for a float)."""
    try:
        v = float(_plain(x))
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _flag(x: Any) -> bool:
    """A judge-failure cell as a bool: a non-empty reason string (but not "false"/"0"/"none"), a
    non-zero number; anything else (None, arrays, dicts) is False."""
    x = _plain(x)
    if isinstance(x, str):
        return x.strip().lower() not in ("", "0", "false", "none", "no")
    v = _finite(x) if isinstance(x, (bool, int, float)) else None
    return bool(v)


def _label(x: Any) -> str:
    """A termination cell as a label: a string, else ``unknown``."""
    x = _plain(x)
    return x if isinstance(x, str) and x else "unknown"


#: breakdown entries that are not averaged (counted separately, or the stage itself)
_NOT_MEANS = {"stage", "judge_failed", "deadline_missed", "uncertain_unscored"}

#: components that exist for one stage only (0 on the other stage's rows): logged per stage only
_STAGE_ONLY = {"tool_mem_mean": 1, "tool_prod_mean": 2, "f_rec": 2}


def rollout_reward_metrics(non_tensor_batch: dict[str, Any]) -> dict[str, float]:
    """Per-step reward metrics of one rollout batch, from the agent loop's ``extra_fields``.

    ``non_tensor_batch`` is a rollout ``DataProto``'s ``non_tensor_batch`` (one entry per
    trajectory; rows not played by this agent loop are ignored). Over the trajectories whose judge
    did not fail, it returns ``shopcomp/<key>/mean`` for ``env_total`` (the total under the agent
    loop's rubric — the trained score is verl's ``critic/score/mean``, which uses
    ``reward_kwargs.reward_config``) and the :data:`~shopping_companion.trainers.reward.LOGGED_KEYS`
    components that apply to both stages (R_z, R_tool, R_fmt, f_ans, f_th, f_tc, n_tool_calls,
    success) and every other component of the breakdowns (a custom rubric's members and metrics,
    averaged over the trajectories that carry them); per stage, ``shopcomp/stage<s>/<key>/mean`` for those and the stage's own ones
    (``tool_mem_mean`` for stage 1; ``tool_prod_mean``, ``f_rec`` for stage 2). Also
    ``shopcomp/trajectories``, ``shopcomp/judge_failed/count`` (unscored trajectories, deadline
    misses included), ``shopcomp/deadline_missed/count`` (trajectories whose judging and rewarding
    missed the per-sample scoring deadline), ``shopcomp/uncertain_unscored/count`` (trajectories not
    scored because the reward spec says ``uncertain: unscored``), ``shopcomp/uncertain_share``
    (items the rule judge was uncertain about over all judged items of the batch, every trajectory
    with a verdict counted; absent when none has items), ``shopcomp/llm_judge_calls/sum`` (stages a
    cascade sent to the LLM judge),
    ``shopcomp/termination/<reason>/share``, ``shopcomp/prefix_mismatches/sum`` and
    ``shopcomp/env_s/mean`` (environment seconds per trajectory). GRPO groups (verl's ``uid``
    column, else the agent loop's copy of it, ``shopcomp_uid``): ``shopcomp/zero_std_groups/share``
    is the share of the groups with at least two scored trajectories whose scored totals are all
    equal (within :data:`ZERO_STD_TOL`: zero reward variance, so GRPO gives the group no gradient),
    with ``…/count`` (such groups) and ``…/groups`` (groups counted); trajectories whose judge
    failed or that missed the scoring deadline are left out, as ``grpo_judged`` leaves them out of
    their group; absent when no group has two scored trajectories. Values that are missing or not
    finite are left out of their mean (never turned into 0 or NaN); a stage other than 1 or 2 gets
    no per-stage keys. Empty when the batch has no Shopping Companion trajectories. Never raises
    on malformed entries.
    """
    from shopping_companion.trainers.reward import LOGGED_KEYS

    rewards = non_tensor_batch.get("shopcomp_reward")
    if rewards is None or getattr(rewards, "ndim", 1) == 0 or isinstance(rewards, (str, bytes, dict)):
        return {}
    try:
        rewards = list(rewards)
    except TypeError:
        return {}
    n = len(rewards)

    def column(key: str) -> list[Any]:
        v = non_tensor_batch.get(key)
        try:
            vals = list(v) if v is not None and getattr(v, "ndim", 1) != 0 else []
        except TypeError:
            vals = []
        return (vals + [None] * n)[:n]

    stages, failed_col, term_col = (
        column("shopcomp_stage"),
        column("shopcomp_judge_failed"),
        column("shopcomp_termination"),
    )
    mism_col, env_col = column("shopcomp_prefix_mismatches"), column("shopcomp_env_s")
    missed_col = column("shopcomp_deadline_missed")
    judging_col = column("shopcomp_judging")
    uid_col, own_uid_col = column("uid"), column("shopcomp_uid")
    groups: dict[str, list[float]] = {}
    both = [k for k in LOGGED_KEYS if k not in ("stage", "judge_failed")]
    kept: dict[str, list[float]] = {}
    failed = played = missed = uncertain_unscored = 0
    judged_items = uncertain_items = llm_calls = 0.0
    terms: dict[str, int] = {}
    mismatches = 0.0
    env_s: list[float] = []
    for i, rb in enumerate(rewards):
        rb = _plain(rb)
        if not isinstance(rb, dict) or not isinstance(rb.get("components"), dict):
            continue
        played += 1
        term = _label(term_col[i])
        terms[term] = terms.get(term, 0) + 1
        mm = _finite(mism_col[i])
        if mm is not None and mm > 0:
            mismatches += mm
        e = _finite(env_col[i])
        if e is not None and e >= 0:
            env_s.append(e)
        comps = rb["components"]
        judging = _plain(judging_col[i])
        if isinstance(judging, dict):
            it, un, lc = (_finite(judging.get(k)) for k in ("items", "uncertain", "llm_calls"))
            if it is not None and un is not None and it >= un >= 0:
                judged_items += it
                uncertain_items += un
            if lc is not None and lc >= 0:
                llm_calls += lc
        if (_finite(comps.get("uncertain_unscored")) or 0.0) > 0:
            uncertain_unscored += 1
        if _flag(missed_col[i]) or (_finite(comps.get("deadline_missed")) or 0.0) > 0:
            missed += 1
        if _flag(failed_col[i]) or (_finite(comps.get("judge_failed")) or 0.0) > 0:
            failed += 1
            continue
        st = _finite(stages[i])
        if st is None:
            st = _finite(comps.get("stage"))
        stage = int(st) if st is not None and st in (1.0, 2.0) else None
        values = {"env_total": _finite(rb.get("total")), **{k: _finite(comps.get(k)) for k in both}}
        gid = _group_id(uid_col[i] if uid_col[i] is not None else own_uid_col[i])
        if gid is not None and values["env_total"] is not None:
            groups.setdefault(gid, []).append(values["env_total"])
        for k in comps:  # the rubric's own components (custom rewards and their metrics)
            if isinstance(k, str) and k not in values and k not in _NOT_MEANS:
                values[k] = _finite(comps.get(k))
        for k, v in values.items():
            if v is None:
                continue
            only = _STAGE_ONLY.get(k)
            if only is None:
                kept.setdefault(f"shopcomp/{k}/mean", []).append(v)
            if stage is not None and (only is None or only == stage):
                kept.setdefault(f"shopcomp/stage{stage}/{k}/mean", []).append(v)
    if not played:
        return {}
    with np.errstate(over="ignore", invalid="ignore"):
        out = {k: float(np.mean(v)) for k, v in kept.items()}
    out = {k: v for k, v in out.items() if math.isfinite(v)}  # e.g. a mean of values near the float limit
    out["shopcomp/trajectories"] = float(played)
    out["shopcomp/judge_failed/count"] = float(failed)
    out["shopcomp/deadline_missed/count"] = float(missed)
    out["shopcomp/uncertain_unscored/count"] = float(uncertain_unscored)
    if judged_items > 0:
        out["shopcomp/uncertain_share"] = uncertain_items / judged_items
    out["shopcomp/llm_judge_calls/sum"] = llm_calls
    if math.isfinite(mismatches):
        out["shopcomp/prefix_mismatches/sum"] = mismatches
    for term, c in terms.items():
        out[f"shopcomp/termination/{term}/share"] = c / played
    counted = [v for v in groups.values() if len(v) >= 2]
    if counted:
        zero = sum(1 for v in counted if max(v) - min(v) <= ZERO_STD_TOL)
        out["shopcomp/zero_std_groups/share"] = zero / len(counted)
        out["shopcomp/zero_std_groups/count"] = float(zero)
        out["shopcomp/zero_std_groups/groups"] = float(len(counted))
    if env_s:
        with np.errstate(over="ignore", invalid="ignore"):
            mean_env = float(np.mean(env_s))
        if math.isfinite(mean_env):
            out["shopcomp/env_s/mean"] = mean_env
    return out


class ShoppingCompanionAgentLoopManager(AgentLoopManager):
    """verl's ``AgentLoopManager`` that also reports our reward components for every training step.

    verl 0.9.1 logs the reward function's extra keys only in validation metrics (``val-aux/…``) and
    rollout dumps; its training-step metrics carry only the total (``critic/score/…``), and it has
    no public hook for custom training metrics. The rollout's timing dictionary is the one dict a
    manager returns that the trainer logs whole, so this manager adds
    :func:`rollout_reward_metrics` to it: each training step logs ``timing_s/shopcomp/R_tool/mean``,
    ``timing_s/shopcomp/stage2/R_z/mean``, ``timing_s/shopcomp/success/mean``,
    ``timing_s/shopcomp/zero_std_groups/share`` and the rest (the ``timing_s/`` prefix is verl's, not
    a unit), and logs a warning when that share is above the agent-loop config's
    ``zero_std_warn_share`` (:meth:`zero_std_warn_share`). Selected with
    ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (``configs/grpo/grpo_common.yaml``);
    everything else is verl's manager unchanged.

    Raises:
        ValueError: at construction when ``trainer.use_v1`` is true (verl's TransferQueue trainer
            needs its own manager; this one would leave it waiting for rollouts).
    """

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        trainer = config.get("trainer", {}) if hasattr(config, "get") else {}
        if trainer and trainer.get("use_v1", False):
            raise ValueError(
                "actor_rollout_ref.rollout.agent.agent_loop_manager_class: ShoppingCompanionAgentLoopManager works "
                "with verl's RayPPOTrainer (trainer.use_v1=false, as in configs/grpo); with trainer.use_v1=true set "
                "agent_loop_manager_class=null (verl's TransferQueue manager)"
            )
        super().__init__(config, *args, **kwargs)

    def _performance_metrics(self, metrics: list[list[dict[str, str]]], output: Any) -> dict[str, float]:
        timing = super()._performance_metrics(metrics, output)
        try:
            ours = rollout_reward_metrics(dict(output.non_tensor_batch))
            timing.update(ours)
            self._warn_zero_std(ours)
        except Exception as e:  # noqa: BLE001 - metrics must never stop a training step
            logger.warning("shopcomp reward metrics skipped for this step: %s: %s", type(e).__name__, e)
        return timing

    def zero_std_warn_share(self) -> float | None:
        """The ``zero_std_warn_share`` of our entry in the agent-loop config
        (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, resolved as verl resolves it),
        :data:`DEFAULT_ZERO_STD_WARN_SHARE` when no entry sets it or the file cannot be read (with a
        warning), None when it is ``null``. Read once."""
        cached = self.__dict__.get("_zero_std_warn_share", _UNREAD)
        if cached is not _UNREAD:
            return cached
        value: float | None = DEFAULT_ZERO_STD_WARN_SHARE
        try:
            from omegaconf import OmegaConf

            path = OmegaConf.select(
                getattr(self, "config", None) or {}, "actor_rollout_ref.rollout.agent.agent_loop_config_path"
            )
            if path:
                from verl.experimental.agent_loop.agent_loop import resolve_config_path

                for entry in OmegaConf.to_container(OmegaConf.load(resolve_config_path(str(path)))) or []:
                    target = str(entry.get("_target_", "")) if isinstance(entry, dict) else ""
                    if target.endswith(".ShoppingCompanionAgentLoop") and "zero_std_warn_share" in entry:
                        value = zero_std_warn_threshold(entry["zero_std_warn_share"])
                        break
        except Exception as e:  # noqa: BLE001 - a setting for a warning never stops training
            logger.warning(
                "zero_std_warn_share: could not read it from the agent-loop config (%s: %s); using %s",
                type(e).__name__,
                e,
                DEFAULT_ZERO_STD_WARN_SHARE,
            )
            value = DEFAULT_ZERO_STD_WARN_SHARE
        self._zero_std_warn_share = value
        return value

    def _warn_zero_std(self, m: dict[str, float]) -> None:
        share = m.get("shopcomp/zero_std_groups/share")
        limit = self.zero_std_warn_share()
        if share is None or limit is None or share <= limit:
            return
        logger.warning(
            "shopcomp: %d of %d GRPO groups (%.0f%%) had zero reward variance this step (every scored rollout of "
            "the prompt got the same rubric total), above zero_std_warn_share=%.2f (agent-loop config): those "
            "groups give no gradient. Persistently high: tasks too easy or too hard for the policy, too few "
            "rollouts (actor_rollout_ref.rollout.n), or a reward that rarely varies (docs/grpo.md, Training-step "
            "metrics)",
            int(m.get("shopcomp/zero_std_groups/count", 0)),
            int(m.get("shopcomp/zero_std_groups/groups", 0)),
            100.0 * share,
            limit,
        )
