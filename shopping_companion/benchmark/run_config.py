"""``EvalConfig``: the one configuration object of an evaluation run.

``shopcomp eval --config run.yaml`` reads it (``configs/eval/*.yaml`` are examples), the
command line's flags and ``--set dotted.key=value`` override it
(:func:`shopping_companion.config.load_model`), and :func:`shopping_companion.benchmark.run.run_benchmark`
runs it. ``shopcomp quickstart`` (:class:`QuickstartConfig`) and ``shopcomp sft collect`` use the
same groups. The resolved config is written to ``<runs_dir>/<name>/config.yaml``; the part of it that
changes results (:meth:`EvalConfig.identity`) is hashed into the run identity, so a resume with a
changed sampling value, judge, rubric weight or environment limit is refused instead of mixing runs.

Groups (every field is documented on its class):

- ``bench`` / ``split`` / ``limit`` / ``skip_missing_gold`` (:class:`BenchmarkSelection`)
- ``strategies``, ``trials``, ``pass_k``, ``seed``
- ``backend`` (:class:`BackendConfig`, with its ``sampling``: :class:`SamplingConfig`)
- ``judge`` (:class:`~shopping_companion.assembly.judging.JudgeSpec`), ``simulator``, ``rubric``
- ``env`` (:class:`~shopping_companion.envs.env.EnvConfig`: turn and size limits)
- ``concurrency``, ``resume`` (:class:`ResumeConfig`), ``attribution`` (:class:`AttributionConfig`)
- ``data`` (:class:`DataConfig`), ``output`` (:class:`OutputConfig`)
- ``tools`` (``local`` or ``serve:URL``) and ``service`` (:class:`ServiceConfig`): where the tools,
  judge and rewards run (docs/cluster.md); ``ray`` (:class:`RayConfig`): episodes on a Ray cluster

Secrets never enter a config: API keys are read from the environment variable a field names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from shopping_companion.assembly.endpoints import Endpoint, ServiceConfig, check_tools
from shopping_companion.assembly.judging import JudgeSpec
from shopping_companion.assembly.reward_spec import check_reward_spec, load_reward_spec
from shopping_companion.assembly.settings import BackendConfig, DataConfig, RayConfig, SamplingConfig
from shopping_companion.config import STRICT, RunDir
from shopping_companion.envs.env import EnvConfig

__all__ = [
    "AttributionConfig",
    "BackendConfig",
    "BenchmarkSelection",
    "DataConfig",
    "EpisodeConfig",
    "EvalConfig",
    "OutputConfig",
    "QuickstartConfig",
    "RayConfig",
    "ResumeConfig",
    "SamplingConfig",
    "ServiceConfig",
    "check_tools",
]


def _judge_words(j: JudgeSpec) -> str:
    """A judge in a few words: ``kind llm, model m, base_url http://...`` (the kind, then the
    fields that differ from their defaults)."""
    rest = {k: v for k, v in j.model_dump(mode="json", exclude_defaults=True).items() if k != "kind"}
    return ", ".join([f"kind {j.kind}", *(f"{k} {v}" for k, v in rest.items())])


class AttributionConfig(Endpoint):
    """Optional LLM attribution of each failure (error taxonomy, paper App. F.2): ``model`` at
    ``base_url`` (``None``: rule-based classes only)."""


class BenchmarkSelection(BaseModel):
    """Which tasks: ``path`` is a benchmark directory written by ``shopcomp synth``; ``split``
    ``train`` | ``test`` | ``None`` (all); ``limit``: the first N tasks (>= 1); ``skip_missing_gold``:
    leave out tasks whose gold products are not in the catalog instead of refusing to run."""

    model_config = STRICT
    path: Path
    split: Literal["train", "test"] | None = None
    limit: int | None = Field(default=None, ge=1)
    skip_missing_gold: bool = False


class ResumeConfig(BaseModel):
    """How a rerun treats the results already written: ``retry_errors`` reruns episodes that ended
    with a backend or judge error, ``retry_failed`` also those that ended with an episode error (an
    exception inside the episode), ``force`` adopts this config for a results file whose identity
    file is missing or corrupt, ``archive_stale`` moves the results of another configuration aside
    (``<file>.stale-<UTC>``) instead of refusing them (the quickstart does this)."""

    model_config = STRICT
    retry_errors: bool = True
    retry_failed: bool = False
    force: bool = False
    archive_stale: bool = False

    def evaluation_options(self) -> dict[str, bool]:
        """``retry_errors``, ``retry_failed`` and ``force`` as the keyword arguments of
        :func:`~shopping_companion.benchmark.evaluate.run_evaluation` (``archive_stale`` is applied
        before it runs)."""
        return {"retry_errors": self.retry_errors, "retry_failed": self.retry_failed, "force": self.force}


def run_name(v: str) -> str:
    """A run name is one directory name: 1..200 characters, no ``/`` or ``\\``, no control
    characters, not ``.`` or ``..`` (anything else, e.g. ``qwen3-4b@step100``, is fine)."""
    if not v or len(v) > 200:
        raise ValueError(f"must be 1..200 characters long, got {len(v)}")
    if v in (".", "..") or any(c in v for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"must be one directory name (no '/', '\\', control characters, '.' or '..'), got {v!r}")
    return v


class OutputConfig(RunDir, BaseModel):
    """Where results go: ``<runs_dir>/<name>/`` (``results.jsonl``, ``report.md``, ``summary.json``,
    ``config.yaml``, ...). ``name``: one directory name (:func:`run_name`)."""

    model_config = STRICT
    name: str
    runs_dir: Path = Path("runs")
    baseline_note: str | None = None

    @field_validator("name")
    @classmethod
    def _one_directory(cls, v: str) -> str:
        return run_name(v)


class EpisodeConfig(BaseModel):
    """What every run of episodes shares (an evaluation, an SFT collection): ``strategies``:
    environment modes / hint modes (paper Table 3): ``oracle``, ``one_stage``,
    ``two_stage:none|low|high`` or ``all``; ``trials`` >= 1 episodes per task and strategy;
    ``seed``: base of the per-episode seeds ``derive_seed(seed, task_id, trial)``; ``simulator``:
    a registered user simulator or ``module:attr``; ``rubric`` (``--reward-config``): the reward
    spec — ``paper`` (Eq. 12), ``outcome_only``, a rubric YAML of ``{name|path, weight}`` entries,
    ``package.module:attr``, or a reward-spec YAML (rubric, python_path, judge; its judge, when
    it names one, becomes ``judge``; docs/rewards.md); ``concurrency``: episodes
    in flight (>= 1); ``backend`` (with its ``sampling``), ``judge``, ``env`` (limits) and ``data``;
    ``tools``: ``local`` or ``serve:URL`` (the tools, judge and rubric of a ``shopcomp serve``
    service, whose reward spec must equal ``rubric``'s; docs/cluster.md) with ``service`` (its
    client settings). Where the tools run does not change results, so neither is in the identity."""

    model_config = STRICT
    strategies: list[str] = Field(default_factory=lambda: ["two_stage:none"], min_length=1)
    trials: int = Field(default=1, ge=1)
    seed: int = 0
    backend: BackendConfig = BackendConfig()
    judge: JudgeSpec = JudgeSpec()
    simulator: str = "scripted"
    rubric: str = "paper"
    env: EnvConfig = EnvConfig()
    concurrency: int = Field(default=8, ge=1)
    data: DataConfig = DataConfig()
    tools: str = "local"
    service: ServiceConfig = ServiceConfig()

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_form(cls, v: Any) -> str:
        return check_tools(v, "tools")

    @field_validator("strategies", mode="before")
    @classmethod
    def _split_strategies(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        return v

    @field_validator("strategies")
    @classmethod
    def _known_strategies(cls, v: list[str]) -> list[str]:
        from shopping_companion.benchmark.evaluate import parse_strategies

        parse_strategies(",".join(v))  # raises ConfigError naming the allowed values
        return v

    _reward_spec_loads = field_validator("rubric")(check_reward_spec)

    @model_validator(mode="after")
    def _judge_of_reward_spec(self) -> "EpisodeConfig":
        """A reward-spec file given as ``rubric`` (``--reward-config``) that names a judge sets
        ``judge`` (one spec for evaluation, SFT collection and GRPO). A ``judge`` given as well
        (``--judge`` / ``--judge-*`` flags, ``--set judge.*`` or the config file's ``judge``
        section) must be that same judge; any difference, ``--judge rule`` against the spec's LLM
        judge included, is refused as a validation error on ``judge``."""
        from pydantic_core import InitErrorDetails, PydanticCustomError

        spec = load_reward_spec(self.rubric)
        if "judge" not in spec.model_fields_set:
            return self
        sj = spec.judge
        want = JudgeSpec.model_validate(sj.model_dump(include=set(JudgeSpec.model_fields)))
        if "judge" in self.model_fields_set and self.judge != want:
            text = (
                f"the reward config {self.rubric} has a judge section ({_judge_words(want)}), but judge is also "
                f"given as {_judge_words(self.judge)} (--judge / --judge-* flags, --set judge.* or the config "
                "file's judge); give the judge in one place: leave out the judge flags and keys to use the spec's "
                "judge, or use a reward config without a judge section"
            )
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("value_error", "{text}", {"text": text}),
                        loc=("judge",),
                        input=self.judge.model_dump(mode="json"),
                    )
                ],
            )
        self.judge = want
        self.judge._from_spec = str(self.rubric)
        return self

    @field_validator("env")
    @classmethod
    def _env_fields_set_elsewhere(cls, v: EnvConfig) -> EnvConfig:
        """``env.mode`` / ``env.hint`` come from ``strategies``, ``env.simulator`` from
        ``simulator`` and ``env.simulator_seed`` from ``seed``: set here they would be ignored."""
        where = {
            "mode": "strategies (--strategies)",
            "hint": "strategies (--strategies, e.g. two_stage:low)",
            "simulator": "simulator (--simulator)",
            "simulator_seed": "seed (--seed)",
        }
        default = EnvConfig()
        for key, use in where.items():
            if getattr(v, key) != getattr(default, key):
                raise ValueError(f"{key} is set by {use}, not in env; got {getattr(v, key)!r}")
        return v

    def identity(self) -> dict[str, Any]:
        """The part of the config that changes an episode's result (policy, sampling, judge,
        simulator, environment limits, seed; the rubric is added as resolved by
        :func:`~shopping_companion.benchmark.kit.run_identity`). Not in it: which tasks /
        strategies / trials are run (a resume may add some), concurrency, timeouts and retries,
        resume options, output and data paths, endpoints' URLs and key variables."""
        b = self.backend
        return {
            "backend": {
                "kind": b.kind,
                "model": b.model,
                "model_path": str(b.model_path) if b.model_path else None,
                "adapter": str(b.adapter) if b.adapter else None,
                "dtype": b.dtype,
                "sampling": b.sampling.model_dump(mode="json"),
            },
            "judge": {"kind": self.judge.kind, "model": self.judge.model}
            | ({"cascade": self.judge.cascade} if self.judge.kind == "llm" else {}),
            "simulator": self.simulator,
            "env": self.env.model_dump(mode="json"),
            "seed": self.seed,
        }


class EvalConfig(EpisodeConfig):
    """Everything one evaluation run needs (module docstring): the :class:`EpisodeConfig` groups
    plus ``bench`` (which tasks), ``output`` (where), ``pass_k`` (the k of pass@k / pass^k, each in 1..trials; default
    1..trials), ``resume``, ``attribution`` and ``ray`` (run the episodes on a Ray cluster; None:
    in this process)."""

    bench: BenchmarkSelection
    output: OutputConfig
    pass_k: list[int] | None = None
    resume: ResumeConfig = ResumeConfig()
    attribution: AttributionConfig = AttributionConfig()
    ray: RayConfig | None = None

    @field_validator("pass_k", mode="before")
    @classmethod
    def _split_ks(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return sorted({int(x) for x in v.split(",") if x.strip()})
            except ValueError:
                raise ValueError(f"must be comma-separated integers, e.g. 1,2,4 (got {v!r})") from None
        if isinstance(v, int):
            return [v]
        return v

    @field_validator("pass_k")
    @classmethod
    def _positive_ks(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or min(v) < 1):
            raise ValueError(f"values must be >= 1 (got {v})")
        return sorted(set(v)) if v else v

    @model_validator(mode="after")
    def _ks_fit_trials(self) -> EvalConfig:
        """A k above ``trials`` has no task with k trials: its pass^k row would be empty."""
        if self.pass_k and max(self.pass_k) > self.trials:
            raise ValueError(
                f"pass_k: values must be in 1..trials ({self.trials}); got {self.pass_k} "
                f"(raise --trials or drop the larger k)"
            )
        return self


#: What the quickstart builds unless told otherwise (merged under the config's ``synth`` keys).
#: ``pool_size``: the users' haystacks share a 400-session filler pool (as LongMemEval's share
#: theirs), so the memory index encodes ~590 sessions instead of ~2,020 on a cold first run.
QUICKSTART_SYNTH = {"n_tasks": 50, "seed": 0, "sessions_per_user": 42, "pool_size": 400, "allow_shortfall": True}


class QuickstartConfig(BaseModel):
    """``shopcomp quickstart`` (``configs/quickstart.yaml``): build the index, synthesise a benchmark
    into ``<runs_dir>/<name>/bench`` with ``synth`` (a
    :class:`~shopping_companion.benchmark.synthesis.config.SynthConfig`; the quickstart's defaults
    are :data:`QUICKSTART_SYNTH`), ShareGPT conversations in the haystack when ``sharegpt``, then
    evaluate with ``eval`` (an :class:`EvalConfig` whose ``bench``, ``output``, ``data`` and
    ``resume.archive_stale`` the quickstart fills in). A benchmark already there is reused when it
    was built with the same synthesis config."""

    model_config = STRICT
    name: str = "quickstart"
    runs_dir: Path = Path("runs")
    sharegpt: bool = True
    data: DataConfig = DataConfig()
    synth: Any = Field(default=None, validate_default=True)
    eval: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _one_directory(cls, v: str) -> str:
        return run_name(v)

    @field_validator("synth", mode="before")
    @classmethod
    def _synth_config(cls, v: Any) -> Any:
        from shopping_companion.benchmark.synthesis.config import SynthConfig

        if isinstance(v, SynthConfig):
            return v
        if v is not None and not isinstance(v, dict):
            raise ValueError(f"must be a mapping of synthesis settings, got {type(v).__name__}")
        try:
            return SynthConfig.model_validate({**QUICKSTART_SYNTH, **(v or {})})
        except ValidationError as e:
            from shopping_companion.config import validation_message

            raise ValueError(validation_message(SynthConfig, e, prefix="synth.")) from None

    @field_validator("eval")
    @classmethod
    def _eval_is_valid(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Refuse a bad eval section when the config is read, before anything is built."""
        if {"name", "runs_dir", "data"} <= set(info.data):
            _quickstart_eval(info.data["name"], info.data["runs_dir"], info.data["data"], v)
        return v

    @property
    def bench_dir(self) -> Path:
        return Path(self.runs_dir) / self.name / "bench"

    def eval_config(self) -> EvalConfig:
        """The evaluation part as an :class:`EvalConfig` over this quickstart's benchmark."""
        return _quickstart_eval(self.name, self.runs_dir, self.data, self.eval)


def _quickstart_eval(name: str, runs_dir: Path, data: DataConfig, section: dict[str, Any]) -> EvalConfig:
    """The quickstart's ``eval`` section over its benchmark (``bench``, ``output``, ``data`` and
    ``resume.archive_stale`` filled in); a bad key raises ``ValueError`` naming ``eval.<key>``."""
    base = {
        "bench": {"path": str(Path(runs_dir) / name / "bench")},
        "output": {"name": name, "runs_dir": str(runs_dir)},
        "resume": {"archive_stale": True},
        "data": data.model_dump(mode="json"),
    }
    try:
        return EvalConfig.model_validate(_deep_merge(base, section))
    except ValidationError as e:
        from shopping_companion.config import validation_message

        raise ValueError(validation_message(EvalConfig, e, prefix="eval.")) from None


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
