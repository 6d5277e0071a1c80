"""Rewards as plug-ins: reward functions, the :class:`Rubric` that weights them (docs/architecture.md, rewards).

Reward functions
    A reward function takes one :class:`RewardContext` (task, trajectory, verdict, stage, the
    member's ``params`` and the rubric's ``resources``) and returns

    - a ``float`` — its value;
    - a ``dict[str, float]`` — metrics; its value is the entry named by the member's key (or the
      entry ``"value"``), every other entry is logged as a metric;
    - or a :class:`RewardOutput` (value, metrics, optional per-tool-call / per-turn lists).

    Register one with the :func:`reward` decorator (a name in
    :data:`~shopping_companion.registry.REWARDS`), name it in a config by dotted path
    ``"package.module:attr"``, or ship it as an entry point of group ``shopping_companion.rewards``.
    Built-ins (:mod:`shopping_companion.rewards.builtin`): ``outcome`` (R_z, Eqs. 6–7),
    ``tool_wise`` (R_tool, Eqs. 8–10, with the opt-in semantic fallback), ``format`` (R_fmt, Eq. 11)
    and the per-component metrics ``f_ans``, ``f_th``, ``f_tc``, ``f_rec``, ``tool_mem_mean``,
    ``tool_prod_mean``, ``n_tool_calls``, ``success``.

Rubric
    ``Rubric([(reward, weight), ...])`` scores a stage trajectory as
    ``total = Σ weight · value`` over members with ``weight != 0`` (in member order); every member's
    value is in ``components`` under its key, so weight-0 members are logged metrics only. The
    paper's reward (Eq. 12) is :func:`paper_rubric` (``outcome`` + ``tool_wise`` + ``format``, unit
    weights); :func:`outcome_only_rubric` keeps ``tool_wise`` at weight 0 for the GRPO ablation
    (§6.3). A rubric is a ``RewardFn`` of the environment: ``rubric(task, trajectory, verdict) ->
    RewardBreakdown``.

Config (YAML or dict, :meth:`Rubric.from_config`)::

    name: paper_plus_bonus
    rewards:
      - {name: outcome, weight: 1}
      - {name: tool_wise, weight: 1, params: {semantic_fallback: auto, matcher: rule}}
      - {name: format, weight: 1}
      - {path: "my_pkg.rewards:brevity", weight: 0.5, key: brevity}

Failures: a failed verdict (``verdict.failed``) makes a rubric with any member that needs the
verdict raise :class:`~shopping_companion.judges.base.JudgeFailedError` — a judge failure is never
scored 0 (use :func:`~shopping_companion.rewards.total.safe_reward` to get ``None`` instead).
A non-finite value raises ``ValueError`` naming the reward.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from shopping_companion.errors import ConfigError, VerdictMismatchError
from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.registry import REWARDS, Registry
from shopping_companion.types import RewardBreakdown, Task, Trajectory, Verdict

__all__ = [
    "NEEDS_ALL",
    "RewardContext",
    "RewardFunction",
    "RewardOutput",
    "Rubric",
    "RubricEntry",
    "RubricMember",
    "as_reward",
    "load_rubric",
    "outcome_only_rubric",
    "paper_rubric",
    "reward",
]

#: The inputs a reward function may declare it needs.
NEEDS_ALL = frozenset({"task", "trajectory", "verdict", "stage"})


@dataclass(frozen=True)
class RewardContext:
    """What a reward function sees for one stage trajectory.

    ``params`` are the member's own config parameters; ``resources`` are shared runtime objects
    given to the rubric (documented keys: ``lookup`` — ``ids -> {id: Product}``; ``session_lookup``
    — ``ids -> {id: Session}``; ``llm_judge`` — an object with ``match_products(task, products)``;
    ``product_matcher`` — ``(task, products) -> [bool]``). :meth:`memo` caches a value across the
    members of one rubric call.
    """

    task: Task
    trajectory: Trajectory
    verdict: Verdict
    params: Mapping[str, Any] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def stage(self) -> int:
        """The stage z ∈ {1, 2} of the trajectory."""
        return self.trajectory.stage

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per rubric call and key; later calls return the cached value."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]


@dataclass
class RewardOutput:
    """A reward function's full result: ``value`` (enters the total times the member's weight),
    extra ``metrics`` (logged in ``components``), and optionally per-tool-call (r(u), Eqs. 8–9) and
    per-turn values."""

    value: float
    metrics: dict[str, float] = field(default_factory=dict)
    per_tool_call: list[float] | None = None
    per_turn: list[float] | None = None


def _finite(name: str, what: str, v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"reward {name!r}: {what} must be a number, got {v!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"reward {name!r}: {what} is not finite ({x})")
    return x


@dataclass(frozen=True)
class RewardFunction:
    """A reward function with its metadata.

    ``name``: the registry name; ``key``: the component name its value is logged under
    (``outcome`` → ``R_z``); ``needs``: inputs it reads (a member needing ``verdict`` refuses
    failed verdicts); ``version``: the version of its rules, when they changed since the first
    release (None: never changed; a rubric's :meth:`Rubric.describe`, and so a run's identity,
    carries it). Calling it calls ``fn(ctx)`` unchanged; :meth:`evaluate` normalises the result to
    a :class:`RewardOutput`.
    """

    fn: Callable[[RewardContext], Any]
    name: str
    key: str
    needs: frozenset[str] = NEEDS_ALL
    description: str = ""
    version: int | None = None

    def __call__(self, ctx: RewardContext) -> Any:
        return self.fn(ctx)

    def evaluate(self, ctx: RewardContext, key: str | None = None) -> RewardOutput:
        """Run the function and normalise its result (module docstring); ``key`` overrides the
        dict entry read as the value."""
        key = key or self.key
        out = self.fn(ctx)
        if isinstance(out, RewardOutput):
            res = RewardOutput(
                _finite(self.name, "value", out.value),
                {k: _finite(self.name, f"metric {k!r}", v) for k, v in out.metrics.items()},
                None if out.per_tool_call is None else [float(x) for x in out.per_tool_call],
                None if out.per_turn is None else [float(x) for x in out.per_turn],
            )
            return res
        if isinstance(out, Mapping):
            metrics = {str(k): _finite(self.name, f"entry {k!r}", v) for k, v in out.items()}
            if key in metrics:
                value = metrics.pop(key)
            elif "value" in metrics:
                value = metrics.pop("value")
            else:
                raise ValueError(
                    f"reward {self.name!r} returned a dict without its value: expected an entry "
                    f"{key!r} or 'value', got {sorted(metrics)}"
                )
            return RewardOutput(value, metrics)
        if isinstance(out, bool) or isinstance(out, (int, float)):
            return RewardOutput(_finite(self.name, "value", out))
        raise ValueError(
            f"reward {self.name!r} returned {type(out).__name__}; expected float, dict[str, float] or RewardOutput"
        )


def _check_needs(needs: Iterable[str], who: str) -> frozenset[str]:
    s = frozenset(needs)
    bad = s - NEEDS_ALL
    if bad:
        raise ConfigError(f"{who}: unknown needs {sorted(bad)}; allowed: {sorted(NEEDS_ALL)}")
    return s


def reward(
    name: str | None = None,
    *,
    key: str | None = None,
    needs: Iterable[str] = NEEDS_ALL,
    description: str = "",
    register: bool = True,
    replace: bool = False,
    registry: Registry[Any] = REWARDS,
    version: int | None = None,
) -> Callable[[Callable[[RewardContext], Any]], RewardFunction]:
    """Decorator turning ``fn(ctx)`` into a :class:`RewardFunction` (and registering it).

    ``name`` defaults to the function's ``__name__``, ``key`` to ``name``. ``needs`` ⊆
    {task, trajectory, verdict, stage}. With ``register=False`` the function is only wrapped (it
    can still be named by dotted path). ``version``: see :class:`RewardFunction`.
    """

    def deco(fn: Callable[[RewardContext], Any]) -> RewardFunction:
        n = name or getattr(fn, "__name__", None)
        if not n:
            raise ConfigError("reward: a name is required for an object without __name__")
        rf = RewardFunction(
            fn=fn,
            name=n,
            key=key or n,
            needs=_check_needs(needs, f"reward {n!r}"),
            description=description or (fn.__doc__ or "").strip().split("\n")[0],
            version=version,
        )
        if register:
            registry.register(n, rf, replace=replace)
        return rf

    return deco


def as_reward(obj: Any, registry: Registry[Any] = REWARDS) -> RewardFunction:
    """A :class:`RewardFunction` from a name, a dotted path, a :class:`RewardFunction` or any
    callable ``fn(ctx)`` (its ``__name__`` is the name and key unless it has ``reward_key`` /
    ``reward_needs`` attributes). Raises :class:`ConfigError` for anything else."""
    ref = obj
    if isinstance(obj, str):
        obj = registry.get(obj)
    if isinstance(obj, RewardFunction):
        return obj
    if callable(obj):
        n = getattr(obj, "reward_name", None) or getattr(obj, "__name__", None) or str(ref)
        if isinstance(ref, str) and ":" in ref and n == "<lambda>":
            n = ref.split(":", 1)[1]
        return RewardFunction(
            fn=obj,
            name=n,
            key=getattr(obj, "reward_key", None) or n,
            needs=_check_needs(getattr(obj, "reward_needs", NEEDS_ALL), f"reward {n!r}"),
        )
    raise ConfigError(f"reward {ref!r}: resolved to {type(obj).__name__}, which is not callable")


@dataclass(frozen=True)
class RubricMember:
    """One weighted reward of a rubric; ``key`` is its component name."""

    reward: RewardFunction
    weight: float
    key: str
    params: Mapping[str, Any] = field(default_factory=dict)


class RubricEntry(BaseModel):
    """One config entry: exactly one of ``name`` (registered name or entry point) and ``path``
    (``module:attr``); ``weight`` (default 1; any finite number: 0 = logged only, negative = a
    penalty term); ``key`` (component name, default the reward's key); ``params`` (passed to the
    reward as ``ctx.params``)."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    path: str | None = None
    weight: float = 1.0
    key: str | None = None
    params: dict[str, Any] = {}

    @model_validator(mode="after")
    def _one_ref(self) -> RubricEntry:
        if (self.name is None) == (self.path is None):
            raise ValueError("give exactly one of 'name' (a registered reward) or 'path' ('module:attr')")
        if not math.isfinite(self.weight):
            raise ValueError(f"weight must be finite, got {self.weight}")
        return self

    @property
    def ref(self) -> str:
        return self.name if self.name is not None else str(self.path)


class _RubricConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    rewards: list[RubricEntry]


MemberSpec = RubricMember | tuple | Mapping[str, Any]


class Rubric:
    """A weighted composition of reward functions (module docstring).

    Args:
        members: ``(reward, weight)`` or ``(reward, weight, params)`` tuples (``reward`` a
            registered name, a ``module:attr`` path, a :class:`RewardFunction` or a callable),
            :class:`RubricMember` objects, or config mappings (:class:`RubricEntry` fields).
        name: the rubric's name (reported as ``rubric`` in :meth:`describe`).
        resources: runtime objects given to every reward (:class:`RewardContext`).

    Raises :class:`ConfigError` for an empty rubric, an unknown reward, a non-finite weight or two
    members with the same key.
    """

    def __init__(
        self,
        members: Iterable[MemberSpec],
        *,
        name: str = "custom",
        resources: Mapping[str, Any] | None = None,
        registry: Registry[Any] = REWARDS,
    ) -> None:
        ms: list[RubricMember] = []
        for spec in members:
            ms.append(self._member(spec, registry))
        if not ms:
            raise ConfigError(f"rubric {name!r}: needs at least one reward")
        keys = [m.key for m in ms]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ConfigError(
                f"rubric {name!r}: several members log under the same key {dup}; give each a distinct 'key'"
            )
        self.name = name
        self.members: tuple[RubricMember, ...] = tuple(ms)
        self.resources: dict[str, Any] = dict(resources or {})
        self._needs_verdict = any("verdict" in m.reward.needs for m in ms)

    @staticmethod
    def _member(spec: MemberSpec, registry: Registry[Any]) -> RubricMember:
        if isinstance(spec, RubricMember):
            return spec
        if isinstance(spec, Mapping):
            try:
                e = RubricEntry.model_validate(dict(spec))
            except ValidationError as err:
                raise ConfigError(f"rubric entry {dict(spec)!r}: {err}") from None
            rf = as_reward(e.ref, registry)
            return RubricMember(rf, e.weight, e.key or rf.key, dict(e.params))
        if isinstance(spec, tuple) and len(spec) in (2, 3):
            ref, weight = spec[0], spec[1]
            params = dict(spec[2]) if len(spec) == 3 else {}
            rf = as_reward(ref, registry)
            w = float(weight)
            if not math.isfinite(w):
                raise ConfigError(f"reward {rf.name!r}: weight must be finite, got {weight}")
            return RubricMember(rf, w, rf.key, params)
        raise ConfigError(f"rubric member {spec!r}: expected (reward, weight[, params]), a mapping or a RubricMember")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        config: str | os.PathLike[str] | Mapping[str, Any] | list,
        *,
        resources: Mapping[str, Any] | None = None,
        registry: Registry[Any] = REWARDS,
    ) -> Rubric:
        """Build from a YAML file path, a mapping ``{name, rewards: [entry, ...]}`` or a bare list
        of entries (:class:`RubricEntry`). Raises :class:`ConfigError` naming the problem."""
        from shopping_companion.config import load_config, validation_message

        if isinstance(config, list):
            data: dict[str, Any] = {"rewards": config}
        else:
            data = load_config(config)
        where = str(config) if isinstance(config, (str, os.PathLike)) else "rubric config"
        try:
            cfg = _RubricConfig.model_validate(data)
        except ValidationError as err:
            raise ConfigError(validation_message(_RubricConfig, err, where)) from None
        return cls([e.model_dump() for e in cfg.rewards], name=cfg.name, resources=resources, registry=registry)

    def with_resources(self, **resources: Any) -> Rubric:
        """A copy with more resources (existing keys replaced)."""
        new = Rubric(self.members, name=self.name, resources={**self.resources, **resources})
        return new

    def describe(self) -> dict[str, Any]:
        """The rubric as a config mapping (``name``, ``rewards`` with name, key, weight, params, and
        ``version`` for a reward function that has one: the run identity hashes this)."""
        return {
            "name": self.name,
            "rewards": [
                {"name": m.reward.name, "key": m.key, "weight": m.weight, "params": dict(m.params)}
                | ({} if m.reward.version is None else {"version": m.reward.version})
                for m in self.members
            ],
        }

    # ------------------------------------------------------------------ scoring
    def __call__(self, task: Task, trajectory: Trajectory, verdict: Verdict) -> RewardBreakdown:
        """Score one stage trajectory: ``total = Σ_{weight≠0} weight·value`` in member order.

        ``components`` holds each member's value under its key, then the metrics the members
        returned (a member's key wins over a metric of the same name; the first metric of a name
        wins over later ones), then ``success`` (1.0/0.0 from the verdict; absent for a failed
        verdict) and ``stage``. ``per_tool_call`` / ``per_turn`` come from the first member
        providing them. Raises :class:`~shopping_companion.errors.VerdictMismatchError` (a ``ValueError``) when the
        verdict is for another stage or task type,
        :class:`JudgeFailedError` for a failed verdict when a member needs the verdict.
        """
        if verdict.stage != trajectory.stage:
            raise VerdictMismatchError(
                "verdict.stage", f"verdict is for stage {verdict.stage} but the trajectory is stage {trajectory.stage}"
            )
        expected_b = 1 if task.task_type == "addon" else 0
        if verdict.b != expected_b:
            raise VerdictMismatchError(
                "verdict.b", f"verdict has b={verdict.b} but task {task.task_id!r:.80} is {task.task_type!r}"
            )
        if verdict.failed and self._needs_verdict:
            reason = "; ".join(verdict.reasons) or "no reason given"
            raise JudgeFailedError(f"judge {verdict.judge!r} failed ({reason}); a failed verdict cannot be scored")
        memo: dict[str, Any] = {}
        values: dict[str, float] = {}
        metrics: dict[str, float] = {}
        per_tool: list[float] | None = None
        per_turn: list[float] | None = None
        total = 0.0
        for m in self.members:
            ctx = RewardContext(task, trajectory, verdict, m.params, self.resources, memo)
            out = m.reward.evaluate(ctx, m.key)
            values[m.key] = out.value
            if m.weight != 0:
                total += m.weight * out.value
            for k, v in out.metrics.items():
                metrics.setdefault(k, v)
            if per_tool is None and out.per_tool_call is not None:
                per_tool = out.per_tool_call
            if per_turn is None and out.per_turn is not None:
                per_turn = out.per_turn
        components = dict(values)
        for k, v in metrics.items():
            components.setdefault(k, v)
        if not verdict.failed:
            components.setdefault("success", 1.0 if verdict.success else 0.0)
        components["stage"] = float(trajectory.stage)
        return RewardBreakdown(
            total=total, components=components, per_tool_call=per_tool or [], per_turn=per_turn or []
        )

    score = __call__

    def __repr__(self) -> str:
        parts = ", ".join(f"{m.reward.name}×{m.weight:g}" for m in self.members)
        return f"Rubric({self.name!r}: {parts})"


# --------------------------------------------------------------------------- the paper's rubrics


def paper_rubric(resources: Mapping[str, Any] | None = None, **tool_wise_params: Any) -> Rubric:
    """Eq. 12: ``R = R_z + R_tool + R_fmt`` with unit weights. ``tool_wise_params`` (e.g.
    ``semantic_fallback="auto"``) go to the ``tool_wise`` member."""
    return Rubric(
        [("outcome", 1.0), ("tool_wise", 1.0, tool_wise_params), ("format", 1.0)], name="paper", resources=resources
    )


def outcome_only_rubric(resources: Mapping[str, Any] | None = None, **tool_wise_params: Any) -> Rubric:
    """The outcome-level GRPO ablation (§6.3): ``R = R_z + R_fmt``; ``R_tool`` is computed and
    logged with weight 0 (the tool-wise score stays comparable across variants, Fig. 4a)."""
    return Rubric(
        [("outcome", 1.0), ("tool_wise", 0.0, tool_wise_params), ("format", 1.0)],
        name="outcome_only",
        resources=resources,
    )


BUILTIN_RUBRICS: dict[str, Callable[..., Rubric]] = {"paper": paper_rubric, "outcome_only": outcome_only_rubric}


def load_rubric(
    spec: Rubric | str | os.PathLike[str] | Mapping[str, Any] | list | None,
    *,
    resources: Mapping[str, Any] | None = None,
) -> Rubric:
    """A rubric from ``None`` (the paper's), a built-in name (``paper``, ``outcome_only``), a YAML
    path, a mapping or list config, a :class:`Rubric` (returned with ``resources`` added), or a
    ``"package.module:attr"`` path to any of these objects or to a function of no arguments that
    returns one (the module must be importable: see
    :class:`~shopping_companion.assembly.reward_spec.RewardSpec` ``python_path``). Raises
    :class:`ConfigError` naming the problem."""
    if spec is None:
        return paper_rubric(resources)
    if isinstance(spec, Rubric):
        return spec.with_resources(**resources) if resources else spec
    if isinstance(spec, str) and spec in BUILTIN_RUBRICS:
        return BUILTIN_RUBRICS[spec](resources)
    if isinstance(spec, str) and _is_dotted(spec):
        return _rubric_object(spec, resources)
    if isinstance(spec, str) and not os.path.exists(spec) and not spec.endswith((".yaml", ".yml")):
        raise ConfigError(
            f"rubric {spec!r}: not a built-in ({', '.join(sorted(BUILTIN_RUBRICS))}) nor an existing YAML file"
        )
    return Rubric.from_config(spec, resources=resources)


def _is_dotted(spec: str) -> bool:
    """``package.module:attr`` (not a Windows drive path, not a file that exists)."""
    if os.path.exists(spec) or spec.endswith((".yaml", ".yml")) or spec.count(":") != 1:
        return False
    mod, attr = spec.split(":")
    return bool(mod.strip()) and bool(attr.strip()) and "/" not in mod and "\\" not in mod


def _rubric_object(spec: str, resources: Mapping[str, Any] | None) -> Rubric:
    from shopping_companion.registry import load_object

    obj = load_object(spec)
    if not isinstance(obj, (Rubric, Mapping, list)) and callable(obj) and not isinstance(obj, RewardFunction):
        try:
            obj = obj()
        except TypeError as e:
            raise ConfigError(
                f"rubric {spec!r}: a function given as a rubric must take no arguments and return a Rubric or a "
                f"rubric config ({e})"
            ) from None
        except Exception as e:  # the user's factory failed: name it, no traceback
            raise ConfigError(f"rubric {spec!r}: calling it raised {type(e).__name__}: {e}") from e
    if isinstance(obj, Rubric):
        return obj.with_resources(**resources) if resources else obj
    if isinstance(obj, (Mapping, list)):
        return Rubric.from_config(obj, resources=resources)
    raise ConfigError(
        f"rubric {spec!r}: resolved to {type(obj).__name__}; expected a Rubric, a rubric config "
        "({name, rewards: [...]} or a list of entries) or a function of no arguments returning one "
        "(a single reward function goes into a rubric entry: {path: 'pkg.mod:fn', weight: 1})"
    )
