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
- ``judge`` (:class:`JudgeConfig`), ``simulator``, ``rubric``
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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shopping_companion.envs.env import EnvConfig

__all__ = [
    "AttributionConfig",
    "BackendConfig",
    "BenchmarkSelection",
    "DataConfig",
    "EpisodeConfig",
    "EvalConfig",
    "JudgeConfig",
    "OutputConfig",
    "QuickstartConfig",
    "RayConfig",
    "ResumeConfig",
    "SamplingConfig",
    "ServiceConfig",
    "check_tools",
]

#: every config model: unknown keys refused, and no inf / nan where a number is meant
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


def endpoint_url(v: str | None) -> str | None:
    """An endpoint's base URL must be ``http://`` or ``https://`` with a host (or unset)."""
    from shopping_companion.llm.openai_backend import is_endpoint_url

    if v is not None and not is_endpoint_url(v):
        raise ValueError(f"must be an http:// or https:// URL with a host, e.g. http://localhost:8000/v1; got {v!r}")
    return v


class _Endpoint(BaseModel):
    """A model served over an OpenAI-compatible API: ``model``, ``base_url`` (``http(s)://host…``;
    ``None``: the provider's default endpoint), ``api_key_env`` (the variable holding the key)."""

    model_config = _STRICT
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return endpoint_url(v)


class SamplingConfig(BaseModel):
    """Sampling of the policy (passed to the backend on every assistant turn).

    ``temperature`` >= 0; ``top_p`` in (0, 1]; ``top_k`` >= 0 (0: not sent); ``max_tokens`` >= 1 new
    tokens per assistant turn; ``send_seed``: send a per-episode sampling seed
    ``derive_seed(seed, task_id, trial)`` so a rerun asks for the same samples.
    """

    model_config = _STRICT
    temperature: float = Field(default=0.6, ge=0.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    top_k: int = Field(default=20, ge=0)
    max_tokens: int = Field(default=4096, ge=1)
    send_seed: bool = True


class BackendConfig(_Endpoint):
    """The policy under evaluation.

    ``kind``: ``reference`` (the scripted rule-based baseline, offline), ``openai`` (any
    OpenAI-compatible endpoint: vLLM, SGLang, a provider) or ``local`` (a Hugging Face checkpoint
    run in-process). ``model`` (openai: the served model name, required), ``base_url`` (openai:
    e.g. ``http://localhost:8000/v1``), ``api_key_env`` (the variable holding the key).
    ``timeout_s``: wall-clock seconds of one HTTP attempt (> 0); ``max_retries`` (>= 0) after
    timeouts, 5xx, 429 and invalid JSON; ``deadline_s``: seconds for one request over all attempts
    (default ``min(600, (retries+1) x timeout)`` or ``$SHOPCOMP_DEADLINE_S``);
    ``breaker_threshold``: consecutive connection failures or timeouts that stop the run (default 5
    or ``$SHOPCOMP_BREAKER_THRESHOLD``). ``model_path`` / ``adapter`` (a LoRA adapter, needs peft)
    / ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``) / ``dtype`` / ``batch_size`` (>= 1: most
    concurrent episodes' turns generated as one batch; set ``concurrency`` at least as high) for
    ``local``.
    """

    kind: Literal["reference", "openai", "local"] = "reference"
    timeout_s: float = Field(default=120.0, gt=0.0)
    max_retries: int = Field(default=3, ge=0)
    deadline_s: float | None = Field(default=None, gt=0.0)
    breaker_threshold: int | None = Field(default=None, ge=1)
    model_path: Path | None = None
    adapter: Path | None = None
    device: str = "cpu"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    batch_size: int = Field(default=16, ge=1)
    sampling: SamplingConfig = SamplingConfig()

    @model_validator(mode="after")
    def _required_per_kind(self) -> "BackendConfig":
        if self.kind == "openai" and not self.model:
            raise ValueError(
                "backend.model is required with backend.kind=openai (e.g. --model Qwen/Qwen3-4B-Thinking-2507)"
            )
        if self.kind == "local" and not self.model_path:
            raise ValueError(
                "backend.model_path is required with backend.kind=local (a Hugging Face checkpoint directory)"
            )
        return self


class JudgeConfig(_Endpoint):
    """Who scores a stage: ``rule`` (deterministic, offline; the default reward) or ``llm``
    (an OpenAI-compatible ``model`` at ``base_url``, key in ``api_key_env``; verdicts cached in the
    run directory). ``cascade`` (``llm`` only; default true): the rule judge decides every stage
    and only stages with an uncertain item go to the LLM, which decides just those items
    (docs/judge.md, "Cascade"); false: every stage goes to the LLM."""

    kind: Literal["rule", "llm"] = "rule"
    cascade: bool = True
    #: the reward spec this judge came from (set by :class:`EpisodeConfig`), None: given directly
    _from_spec: str | None = PrivateAttr(default=None)

    @property
    def base_url_field(self) -> str:
        """Where ``base_url`` was set, for error messages: ``judge.base_url (--judge-base-url)``, or
        the reward spec's ``judge.base_url`` when the judge came from a reward spec file."""
        if self._from_spec:
            return f"judge.base_url of the reward config {self._from_spec}"
        return "judge.base_url (--judge-base-url)"

    @model_validator(mode="after")
    def _llm_needs_model(self) -> "JudgeConfig":
        if self.kind == "llm" and not self.model:
            raise ValueError("judge.model is required with judge.kind=llm (--judge-model)")
        return self


def _judge_words(j: JudgeConfig) -> str:
    """A judge in a few words: ``kind llm, model m, base_url http://...`` (the kind, then the
    fields that differ from their defaults)."""
    rest = {k: v for k, v in j.model_dump(mode="json", exclude_defaults=True).items() if k != "kind"}
    return ", ".join([f"kind {j.kind}", *(f"{k} {v}" for k, v in rest.items())])


class AttributionConfig(_Endpoint):
    """Optional LLM attribution of each failure (error taxonomy, paper App. F.2): ``model`` at
    ``base_url`` (``None``: rule-based classes only)."""


class BenchmarkSelection(BaseModel):
    """Which tasks: ``path`` is a benchmark directory written by ``shopcomp synth``; ``split``
    ``train`` | ``test`` | ``None`` (all); ``limit``: the first N tasks (>= 1); ``skip_missing_gold``:
    leave out tasks whose gold products are not in the catalog instead of refusing to run."""

    model_config = _STRICT
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

    model_config = _STRICT
    retry_errors: bool = True
    retry_failed: bool = False
    force: bool = False
    archive_stale: bool = False


class DataConfig(BaseModel):
    """Where the raw data and the index are: ``data_dir`` (default ``$SHOPCOMP_DATA_DIR``, else
    ``../shared/data``; a named directory that does not exist is an error), ``index_dir`` (the
    BM25 index; default: the cache directory)."""

    model_config = _STRICT
    data_dir: Path | None = None
    index_dir: Path | None = None


def run_name(v: str) -> str:
    """A run name is one directory name: 1..200 characters, no ``/`` or ``\\``, no control
    characters, not ``.`` or ``..`` (anything else, e.g. ``qwen3-4b@step100``, is fine)."""
    if not v or len(v) > 200:
        raise ValueError(f"must be 1..200 characters long, got {len(v)}")
    if v in (".", "..") or any(c in v for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"must be one directory name (no '/', '\\', control characters, '.' or '..'), got {v!r}")
    return v


class OutputConfig(BaseModel):
    """Where results go: ``<runs_dir>/<name>/`` (``results.jsonl``, ``report.md``, ``summary.json``,
    ``config.yaml``, ...). ``name``: one directory name (:func:`run_name`)."""

    model_config = _STRICT
    name: str
    runs_dir: Path = Path("runs")
    baseline_note: str | None = None

    @field_validator("name")
    @classmethod
    def _one_directory(cls, v: str) -> str:
        return run_name(v)

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name


def check_tools(v: Any, field: str = "tools") -> str:
    """``v`` as a tools selection: ``"local"`` (this process loads the index, the memory stores,
    the judge and the rubric) or ``"serve:URL"`` (a ``shopcomp serve`` service at ``URL``, an
    ``http://`` or ``https://`` address with a host, serves them; docs/cluster.md). Returns the
    value with the URL's trailing ``/`` removed; raises ``ValueError`` naming ``field`` and the
    allowed forms otherwise."""
    from urllib.parse import urlsplit

    allowed = "local, or serve:URL with an http:// or https:// URL (e.g. serve:http://127.0.0.1:8000)"
    if not isinstance(v, str):
        raise ValueError(f"{field}: must be {allowed}; got {v!r}")
    text = v.strip()
    if text == "local":
        return text
    if not text.startswith("serve:"):
        raise ValueError(f"{field}: must be {allowed}; got {v!r}")
    url = text[len("serve:") :].rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{field}: must be {allowed}; got {v!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"{field}: the service URL takes no query or fragment; got {v!r}")
    return "serve:" + url


class ServiceConfig(BaseModel):
    """How a client talks to a ``shopcomp serve`` service (used when ``tools`` is ``serve:URL``):
    ``token_env``: the environment variable holding the bearer token (unset or empty: no token is
    sent); ``timeout_s`` (> 0): seconds one HTTP request may take; ``retries`` (>= 0): further
    attempts after a connection failure, a timeout or a 5xx answer (exponential backoff from
    ``backoff_s``); ``deadline_s`` (> 0): seconds one call may take over all its attempts;
    ``direct``: send tool calls to the replicas' direct endpoints when the service lists them,
    falling back to its URL (docs/cluster.md, "Request path"; false: always its URL);
    ``breaker_threshold`` (>= 1, default 5; null: none): consecutive connection failures or
    timeouts of the service that stop the run (exit 4; rerun to resume) instead of every
    episode paying its own retries."""

    model_config = _STRICT
    token_env: str = "SHOPCOMP_SERVE_TOKEN"
    timeout_s: float = Field(default=60.0, gt=0)
    retries: int = Field(default=4, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    deadline_s: float = Field(default=180.0, gt=0)
    direct: bool = True
    breaker_threshold: int | None = Field(default=5, ge=1, le=1000)


class RayConfig(BaseModel):
    """Evaluation on a Ray cluster (``shopcomp eval --ray ADDRESS``): ``address`` (``auto``, a
    ``ray://host:port`` client address, ``host:port`` of a running cluster, or ``local`` to start
    a private one on this machine); ``workers``: episode workers (Ray actors, each builds its own
    policy backend and tools once; None: one per ``num_cpus`` of the cluster's CPUs);
    ``num_cpus``: CPUs each worker reserves (> 0)."""

    model_config = _STRICT
    address: str = Field(min_length=1)
    workers: int | None = Field(default=None, ge=1)
    num_cpus: float = Field(default=1.0, gt=0)


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

    model_config = _STRICT
    strategies: list[str] = Field(default_factory=lambda: ["two_stage:none"], min_length=1)
    trials: int = Field(default=1, ge=1)
    seed: int = 0
    backend: BackendConfig = BackendConfig()
    judge: JudgeConfig = JudgeConfig()
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

    @field_validator("rubric")
    @classmethod
    def _reward_spec_loads(cls, v: str) -> str:
        """The reward spec must load (a missing file or a bad spec is refused naming ``rubric``)."""
        from shopping_companion.rewards.spec import load_reward_spec

        load_reward_spec(v)
        return v

    @model_validator(mode="after")
    def _judge_of_reward_spec(self) -> "EpisodeConfig":
        """A reward-spec file given as ``rubric`` (``--reward-config``) that names a judge sets
        ``judge`` (one spec for evaluation, SFT collection and GRPO). A ``judge`` given as well
        (``--judge`` / ``--judge-*`` flags, ``--set judge.*`` or the config file's ``judge``
        section) must be that same judge; any difference, ``--judge rule`` against the spec's LLM
        judge included, is refused as a validation error on ``judge``."""
        from pydantic_core import InitErrorDetails, PydanticCustomError

        from shopping_companion.rewards.spec import load_reward_spec

        spec = load_reward_spec(self.rubric)
        if "judge" not in spec.model_fields_set:
            return self
        sj = spec.judge
        want = JudgeConfig(
            kind=sj.kind, model=sj.model, base_url=sj.base_url, api_key_env=sj.api_key_env, cascade=sj.cascade
        )
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
        :func:`~shopping_companion.benchmark.run.run_identity`). Not in it: which tasks /
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
    plus ``bench`` (which tasks), ``output`` (where), ``pass_k`` (the k of pass@k / pass^k; default
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

    model_config = _STRICT
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
