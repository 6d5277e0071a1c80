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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field, ValidationError, field_validator

from shopping_companion.assembly.judging import RewardJudge, build_judge, ping_judge
from shopping_companion.config import STRICT
from shopping_companion.errors import ConfigError
from shopping_companion.types import UncertainPolicy

__all__ = ["RewardSpec", "build_rubric", "check_reward_spec", "load_reward_spec"]


class RewardSpec(BaseModel):
    """How trajectories are scored (module docstring). ``source``: where the spec was read from
    (for messages; not part of its identity)."""

    model_config = STRICT
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
        """The judge object (``judge(task, trajectory) -> Verdict``) of :attr:`judge`, its rule
        judge scoring uncertain items as :attr:`uncertain` says
        (:func:`~shopping_companion.assembly.judging.build_judge`: an LLM judge wrapped in
        :class:`~shopping_companion.assembly.judging.BoundedJudge`, behind the rule judge when
        ``judge.cascade``). Raises :class:`ConfigError` for bad settings."""
        return build_judge(self.judge, lookup, sessions, embedder, self.uncertain)[0]

    def ping_judge(self) -> str:
        """Check an LLM judge's endpoint answers; returns :meth:`RewardJudge.describe`. Raises
        :class:`BackendError` naming ``judge.base_url``. Nothing to check for the rule judge."""
        where = f" of the reward spec {self.source}" if self.source else " of the reward spec"
        return ping_judge(self.judge, "judge.base_url" + where)


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


def check_reward_spec(value: str) -> str:
    """``value`` unchanged once it loads as a reward spec (:func:`load_reward_spec`): the field
    validator of every config that names one (``field_validator(name)(check_reward_spec)``), so a
    missing file or a bad spec is refused naming the field. Raises :class:`ConfigError`."""
    load_reward_spec(value)
    return value


def build_rubric(spec: str | None, lookup: Callable | None = None) -> Any:
    """The reward :class:`~shopping_companion.rewards.rubric.Rubric` of ``spec``: a reward spec
    reference (:func:`load_reward_spec`: ``paper``, ``outcome_only``, a rubric or reward-spec
    YAML, ``package.module:attr``), its ``python_path`` put on ``sys.path`` first; raises
    :class:`ConfigError` prefixed ``rubric:``."""
    try:
        return load_reward_spec(spec).build_rubric({"lookup": lookup})
    except ConfigError as e:
        raise ConfigError(f"rubric: {e}") from None
    except (FileNotFoundError, ValueError, KeyError, ImportError) as e:  # a plug-in's own failure
        raise ConfigError(f"rubric {spec!r}: {e}") from None
