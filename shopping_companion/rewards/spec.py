"""The reward spec: one description of how a stage trajectory is scored, given once and used by
every consumer — ``shopcomp eval``, ``shopcomp sft collect``, the verl agent loop and its
``compute_score`` hook, and TRL (docs/rewards.md).

A spec names

- ``rubric``: the weighted reward functions (:class:`~shopping_companion.rewards.rubric.Rubric`):
  a built-in name (``paper`` = Eq. 12, ``outcome_only`` = the §6.3 ablation), a rubric YAML file
  (``{name, rewards: [...]}``), a ``"package.module:attr"`` path to a :class:`Rubric`, a rubric
  config (mapping or list) or a function returning one of them, or an inline rubric config;
- ``python_path``: directories that hold the modules the rubric imports (custom reward functions);
  they are put on ``sys.path`` of the process that loads the spec, and shipped to Ray workers
  through Ray's ``runtime_env`` (``py_modules``) by ``shopcomp grpo submit``;
- ``judge``: who produces the verdict the outcome reward reads (:class:`RewardJudge`): the rule
  judge (offline, deterministic) or an LLM judge over an OpenAI-compatible endpoint (the paper's
  outcome rewards, App. C.1), with a bound on concurrent requests per process and a reply cache
  keyed by content hash;
- ``scoring_deadline_s``: wall-clock seconds judging and rewarding one GRPO trajectory may take
  (a miss: the sample is not scored, it gets no gradient);
- ``uncertain``: what the rule judge's uncertain items earn (``no_credit``, the default: nothing;
  ``credit``: they count as satisfied; ``unscored``: the stage is not scored);
  :mod:`shopping_companion.judges.selective`. With an LLM judge and ``judge.cascade`` (default),
  only stages with uncertain items go to the LLM (:mod:`shopping_companion.judges.cascade`).

A spec file is YAML::

    rubric: my_rewards:rubric          # or paper | outcome_only | rubric.yaml | {name, rewards: [...]}
    python_path: [./plugins]           # relative to this file
    judge: {kind: llm, model: Qwen/Qwen3-32B, base_url: http://judge-node:8000/v1, max_in_flight: 32}
    scoring_deadline_s: 120
    uncertain: no_credit               # no_credit | credit | unscored

A plain rubric YAML (top-level ``rewards:``) is also a spec (rule judge, default deadline).
:func:`load_reward_spec` reads any of these, a built-in name, a ``module:attr`` path or the JSON
text of :meth:`RewardSpec.to_json` (how the spec travels inside a verl config to every worker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shopping_companion.errors import ConfigError
from shopping_companion.types import UncertainPolicy

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "BoundedJudge", "RewardJudge", "RewardSpec", "load_reward_spec"]

#: Default bound on concurrent LLM-judge requests per process (one rollout worker).
DEFAULT_MAX_IN_FLIGHT = 16

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


class RewardJudge(BaseModel):
    """The judge of a reward spec.

    ``kind``: ``rule`` (deterministic, offline; default) or ``llm`` (an OpenAI-compatible ``model``
    at ``base_url``, the key in the environment variable ``api_key_env``, never in the file).
    ``max_in_flight`` (>= 1): judge requests one process sends at the same time (the others wait;
    rollout workers run many trajectories concurrently). ``timeout_s`` (> 0): seconds of one HTTP
    attempt; ``max_retries`` (>= 0): re-asks after an invalid reply, a timeout or a retryable
    error. ``cache_path``: an SQLite file for the reply cache, shared by processes (put it on
    shared storage to share it between nodes); ``None``: an in-memory cache per process. Replies
    are cached under the hash of (model, sampling, prompt), so a repeated trajectory is judged once.
    ``cascade`` (``kind: llm`` only): true (default) — the rule judge decides every stage and only
    stages with an uncertain item go to the LLM, which decides just those items; false — every
    stage goes to the LLM (the paper's protocol).
    """

    model_config = _STRICT
    kind: Literal["rule", "llm"] = "rule"
    cascade: bool = True
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_in_flight: int = Field(default=DEFAULT_MAX_IN_FLIGHT, ge=1)
    timeout_s: float = Field(default=60.0, gt=0.0)
    max_retries: int = Field(default=2, ge=0)
    cache_path: str | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        from shopping_companion.benchmark.run_config import endpoint_url

        return endpoint_url(v)

    @model_validator(mode="after")
    def _llm_needs_model(self) -> RewardJudge:
        if self.kind == "llm" and not self.model:
            raise ValueError("judge.model is required with judge.kind=llm (the judge model's served name)")
        return self

    def describe(self) -> str:
        """One line for logs and reports (no key, the URL without credentials)."""
        if self.kind == "rule":
            return "rule (deterministic, offline)"
        from shopping_companion.benchmark.report import scrub_url

        where = f"{self.model} at {scrub_url(self.base_url) or 'the provider default endpoint'}"
        return f"rule, uncertain stages to llm: {where}" if self.cascade else f"llm: {where}"


class RewardSpec(BaseModel):
    """How trajectories are scored (module docstring). ``source``: where the spec was read from
    (for messages; not part of its identity)."""

    model_config = _STRICT
    rubric: str | dict[str, Any] | list[Any] = "paper"
    python_path: list[str] = Field(default_factory=list)
    judge: RewardJudge = RewardJudge()
    scoring_deadline_s: float | None = 60.0
    uncertain: UncertainPolicy = "no_credit"
    source: str | None = None

    @field_validator("uncertain", mode="before")
    @classmethod
    def _uncertain(cls, v: Any) -> Any:
        from shopping_companion.judges.selective import UNCERTAIN_POLICIES

        if not (isinstance(v, str) and v in UNCERTAIN_POLICIES):
            raise ValueError(f"must be one of {', '.join(UNCERTAIN_POLICIES)}; got {v!r}")
        return v

    @field_validator("scoring_deadline_s")
    @classmethod
    def _deadline(cls, v: float | None) -> float | None:
        from shopping_companion.llm.breaker import deadline_or_none

        return deadline_or_none(v)

    @field_validator("rubric")
    @classmethod
    def _rubric_given(cls, v: Any) -> Any:
        if isinstance(v, str) and not v.strip():
            raise ValueError("must name a rubric: paper, outcome_only, a YAML file or 'package.module:attr'")
        return v

    # ------------------------------------------------------------------ identity and transport
    def identity(self) -> dict[str, Any]:
        """What changes a score: the rubric reference, the judge kind, model and cascade (not URLs,
        keys, concurrency or cache location), the deadline and what uncertain items earn."""
        judge: dict[str, Any] = {"kind": self.judge.kind, "model": self.judge.model}
        if self.judge.kind == "llm":
            judge["cascade"] = self.judge.cascade
        return {
            "rubric": self.rubric,
            "judge": judge,
            "scoring_deadline_s": self.scoring_deadline_s,
            "uncertain": self.uncertain,
        }

    def to_json(self) -> str:
        """The spec as one line of JSON (paths absolute), readable by :func:`load_reward_spec` in
        any process — how it travels inside a verl config to every worker."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    # ------------------------------------------------------------------ python path
    def activate(self) -> None:
        """Put :attr:`python_path` on ``sys.path`` (front, once). Raises :class:`ConfigError` for a
        directory that does not exist here."""
        for d in reversed(self.python_path):
            if not Path(d).is_dir():
                raise ConfigError(
                    f"python_path: {d} is not a directory on this machine"
                    + (f" (reward spec {self.source})" if self.source else "")
                    + "; on a cluster the directory is shipped to workers by `shopcomp grpo submit`"
                )
            if d not in sys.path:
                sys.path.insert(0, d)

    def py_modules(self) -> list[str]:
        """What Ray's ``runtime_env["py_modules"]`` needs to import the rubric on any node: every
        module file and package directory directly inside :attr:`python_path` directories."""
        out: list[str] = []
        for d in self.python_path:
            base = Path(d)
            if not base.is_dir():
                continue
            for p in sorted(base.iterdir()):
                if p.name.startswith((".", "_")) and p.name != "__init__.py":
                    continue
                if p.suffix == ".py" and p.name != "__init__.py":
                    out.append(str(p))
                elif p.is_dir() and (p / "__init__.py").is_file():
                    out.append(str(p))
        return out

    # ------------------------------------------------------------------ building
    def build_rubric(self, resources: Mapping[str, Any] | None = None) -> Any:
        """The :class:`~shopping_companion.rewards.rubric.Rubric` (with ``resources``, e.g.
        ``{"lookup": product_lookup}``). Raises :class:`ConfigError` prefixed ``rubric:``."""
        from shopping_companion.rewards.rubric import load_rubric

        self.activate()
        try:
            return load_rubric(self.rubric, resources=resources)
        except ConfigError as e:
            if not self.source:
                raise
            raise ConfigError(f"reward spec {self.source}: {e}") from None

    def component_keys(self) -> list[str]:
        """The component names every trajectory's breakdown carries under this rubric: each
        member's key, ``success`` and ``stage`` (metrics a member returns besides its value are
        added at scoring time and are not listed). Imports the rubric's modules."""
        rubric = self.build_rubric()
        keys = [m.key for m in rubric.members]
        return keys + [k for k in ("success", "stage") if k not in keys]

    def build_judge(self, lookup: Any, sessions: Mapping[str, Any] | None, embedder: Any) -> Any:
        """The judge object (``judge(task, trajectory) -> Verdict``): the rule judge scoring its
        uncertain items as :attr:`uncertain` says, or with ``judge.kind: llm`` an
        :class:`~shopping_companion.judges.llm.LLMJudge` wrapped in :class:`BoundedJudge` (at most
        ``judge.max_in_flight`` concurrent requests in this process) — behind the rule judge in a
        :class:`~shopping_companion.judges.cascade.CascadeJudge` when ``judge.cascade``. An
        endpoint that fails gives failed verdicts (never a 0 reward). Raises :class:`ConfigError`
        for bad settings."""
        from shopping_companion.judges.cascade import CascadeJudge
        from shopping_companion.pipeline import make_rule_judge

        j = self.judge
        rule = make_rule_judge(lookup, dict(sessions) if sessions is not None else None, embedder, self.uncertain)
        if j.kind == "rule":
            return rule
        from shopping_companion.judges.llm import LLMJudge

        if j.cache_path:
            Path(j.cache_path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        llm = LLMJudge.from_openai(
            str(j.model),
            j.base_url,
            api_key_env=j.api_key_env,
            lookup=lookup,
            http_timeout_s=j.timeout_s,
            http_retries=0,  # the judge re-asks itself (max_retries), with backoff
            cache_path=str(Path(j.cache_path).expanduser()) if j.cache_path else None,
            max_retries=j.max_retries,
            timeout_s=j.timeout_s,
        )
        bounded = BoundedJudge(llm, j.max_in_flight)
        return CascadeJudge(rule, bounded) if j.cascade else bounded

    def ping_judge(self) -> str:
        """Check an LLM judge's endpoint answers (a models listing or a one-token request);
        returns :meth:`RewardJudge.describe`. Raises :class:`BackendError` naming ``judge.base_url``.
        Nothing to check for the rule judge."""
        if self.judge.kind == "llm":
            from shopping_companion.benchmark.run import check_reachable
            from shopping_companion.llm.openai_backend import OpenAIBackend

            j = self.judge
            field = "judge.base_url" + (f" of the reward spec {self.source}" if self.source else " of the reward spec")
            with OpenAIBackend(j.model, base_url=j.base_url, api_key_env=j.api_key_env, name=f"judge:{j.model}") as p:
                check_reachable(p, field)
        return self.judge.describe()


#: one semaphore per (process, bound): every BoundedJudge of a process with the same bound shares it
_SEMAPHORES: dict[int, threading.BoundedSemaphore] = {}
_SEM_LOCK = threading.Lock()


def _semaphore(n: int) -> threading.BoundedSemaphore:
    with _SEM_LOCK:
        if n not in _SEMAPHORES:
            _SEMAPHORES[n] = threading.BoundedSemaphore(n)
        return _SEMAPHORES[n]


class BoundedJudge:
    """A judge whose :meth:`judge` runs at most ``max_in_flight`` at a time in this process (the
    rest wait in their own threads; the environment judges in a worker thread, so the event loop
    of a rollout worker never blocks). ``in_flight`` / ``peak_in_flight``: current and highest
    number of concurrent calls seen. Other attributes are the wrapped judge's."""

    def __init__(self, judge: Any, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        if max_in_flight < 1:
            raise ConfigError(f"judge.max_in_flight: must be >= 1, got {max_in_flight}")
        self.inner = judge
        self.max_in_flight = int(max_in_flight)
        self.name = str(getattr(judge, "name", "judge"))
        self._sem = _semaphore(self.max_in_flight)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.peak_in_flight = 0

    def judge(self, task: Any, trajectory: Any, *args: Any, **kwargs: Any) -> Any:
        with self._sem:
            with self._lock:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                return self.inner.judge(task, trajectory, *args, **kwargs)
            finally:
                with self._lock:
                    self.in_flight -= 1

    def __getattr__(self, name: str) -> Any:  # stats, match_products, close, ...
        return getattr(self.inner, name)


def _absolute(paths: list[Any], base: Path | None) -> list[str]:
    out = []
    for p in paths:
        q = Path(str(p)).expanduser()
        if not q.is_absolute() and base is not None:
            q = base / q
        out.append(str(q.absolute()))
    return out


def _rubric_ref(value: Any, base: Path | None) -> Any:
    """A rubric reference with a relative YAML path made absolute (relative to the spec file)."""
    if isinstance(value, str) and value.endswith((".yaml", ".yml")) and base is not None:
        p = Path(value).expanduser()
        if not p.is_absolute():
            return str((base / p).absolute())
        return str(p)
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        return str(Path(value).expanduser().absolute())
    return value


def _from_mapping(data: Mapping[str, Any], source: str | None, base: Path | None) -> RewardSpec:
    from shopping_companion.config import validation_message

    data = dict(data)
    if "rewards" in data and "rubric" not in data:  # a plain rubric config
        data = {"rubric": data}
    if isinstance(data.get("python_path"), str):
        data["python_path"] = [data["python_path"]]
    if isinstance(data.get("python_path"), list):
        data["python_path"] = _absolute(data["python_path"], base)
    if "rubric" in data:
        data["rubric"] = _rubric_ref(data["rubric"], base)
    if source is not None:
        data.setdefault("source", source)
    try:
        return RewardSpec.model_validate(data)
    except ValidationError as e:
        raise ConfigError(validation_message(RewardSpec, e, source or "reward spec") + _key_hints(data)) from None


def _key_hints(data: Mapping[str, Any]) -> str:
    """``"; did you mean `rewards` (not `rewardz`)?"`` for each unknown key close to a known one:
    a spec field, or ``rewards`` when the mapping has a rubric file's ``name`` (a rubric file whose
    ``rewards`` key is misspelt reads as a spec). Empty when nothing is close."""
    import difflib

    known = [k for k in RewardSpec.model_fields if k != "source"]
    targets = [*known, "rewards"] if "name" in data else known
    hints = []
    for k in data:
        if k in RewardSpec.model_fields or k == "name":
            continue
        close = difflib.get_close_matches(str(k), targets, n=1, cutoff=0.6)
        if close:
            hints.append(f"did you mean `{close[0]}` (not `{k}`)?")
    if "name" in data and "rubric" not in data and not any("`rewards`" in h for h in hints):
        hints.append("a rubric file has `name` and `rewards` (a list of {name|path, weight} entries)")
    return "".join(f"; {h}" for h in hints)


def load_reward_spec(value: Any = None) -> RewardSpec:
    """A :class:`RewardSpec` from

    - ``None``: the default (``paper`` rubric, rule judge, 60 s deadline);
    - a :class:`RewardSpec` (returned as is);
    - a mapping (spec fields, or a rubric config with ``rewards``);
    - a string: a built-in rubric name (``paper``, ``outcome_only``), a YAML file (a spec, or a
      plain rubric file), a ``"package.module:attr"`` path (a rubric, resolved on use), or the
      JSON text of :meth:`RewardSpec.to_json`.

    Relative paths inside a file (``python_path``, a rubric YAML) are relative to that file.
    Raises :class:`ConfigError` naming the file or field and what is allowed.
    """
    from shopping_companion.rewards.rubric import BUILTIN_RUBRICS

    if value is None:
        return RewardSpec()
    if isinstance(value, RewardSpec):
        return value
    if isinstance(value, Mapping):
        return _from_mapping(value, None, None)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"reward config: expected a built-in rubric ({', '.join(sorted(BUILTIN_RUBRICS))}), a YAML file, "
            f"'package.module:attr' or a spec's JSON; got {value!r}"
        )
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"reward config: not valid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError("reward config: the JSON must be an object of spec fields")
        return _from_mapping(data, data.get("source"), None)
    if text in BUILTIN_RUBRICS:
        return RewardSpec(rubric=text)
    path = Path(text).expanduser()
    if path.is_file() or text.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise ConfigError(f"config file '{text}' does not exist")
        from shopping_companion.config import load_yaml

        data = load_yaml(path)
        if isinstance(data, list):
            data = {"rubric": data}
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"reward config {text}: expected a mapping (rubric, python_path, judge, scoring_deadline_s, uncertain) or a "
                "rubric file (name, rewards)"
            )
        base = path.absolute().parent
        if "rewards" in data and "rubric" not in data:
            # a plain rubric file: keep its path as the rubric (a rubric identity names its file)
            return RewardSpec(rubric=str(path.absolute()), source=str(path))
        return _from_mapping(data, str(path), base)
    if text.count(":") == 1 and all(part.strip() for part in text.split(":")):
        return RewardSpec(rubric=text)
    raise ConfigError(
        f"reward config {text!r}: not a built-in rubric ({', '.join(sorted(BUILTIN_RUBRICS))}), an existing YAML "
        "file, nor 'package.module:attr'"
    )
