"""``shopcomp grpo trl``: GRPO on one node (CPU or one GPU) with TRL's ``GRPOTrainer`` over our
environment — the same tools, user simulator, judge and rubric as the verl path (docs/grpo.md,
"One node / CPU: TRL").

:class:`TrlGrpoConfig` is the run's config (YAML file < flags < ``--set``, read by
:func:`~shopping_companion.config.load_model`); :func:`run_trl` runs it:

1. the reward spec (``reward_config``) is loaded once; the environment's judge and rubric and
   the trainer's rewards all come from it (it travels as its JSON inside the
   :class:`~shopping_companion.trainers.resources.ResourceSpec`);
2. the services (benchmark tasks and sessions, BM25 index, embedder) are built with
   :func:`~shopping_companion.trainers.resources.build_resources`; the rows are the benchmark
   split's (task, stage) rows of :func:`~shopping_companion.trainers.rows.build_rows`;
3. ``GRPOTrainer`` runs with :func:`~shopping_companion.trainers.trl_rollout.make_rollout_func`
   as ``rollout_func`` and :func:`~shopping_companion.trainers.trl_rollout.reward_functions`:
   the rubric's total trains (weight 1); every rubric member (custom ones included) and ``R_z``,
   ``R_tool``, ``R_fmt``, ``success`` are weight-0 rewards, so TRL logs ``rewards/<key>/mean``
   for each (to the console, ``trainer_state.json``, TensorBoard or wandb);
4. checkpoints go to ``<output_dir>/checkpoint-<step>`` every ``save_steps`` steps and at the
   end; ``resume`` picks one up, refusing a config that differs from the one in
   ``<output_dir>/config.yaml`` except in :data:`RESUME_MAY_CHANGE` (:func:`check_resume_config`);
   that file, written after the check, holds the resolved config and
   ``<output_dir>/summary.json`` the summary (steps, wall time, last logged components).

Nothing here imports TRL, torch or transformers at module level: the config validates (and
``shopcomp grpo trl --help`` works) in an environment without them.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from shopping_companion.config import STRICT
from shopping_companion.assembly.endpoints import ServiceConfig, check_tools
from shopping_companion.errors import ConfigError, DataError, TrainingSignalError
from shopping_companion.llm.breaker import deadline_or_none
from shopping_companion.llm.model_files import looks_like_path, model_config

__all__ = [
    "TrlEnvSettings",
    "TrlGrpoConfig",
    "TrlLora",
    "TrlRows",
    "TrlTrainerSettings",
    "RESUME_MAY_CHANGE",
    "check_resume_config",
    "find_checkpoint",
    "require_trl",
    "run_trl",
]


#: GRPOConfig fields this config sets itself (``trainer.extra_args`` may not set them).
_OWN_ARGS = frozenset(
    {
        "output_dir",
        "max_steps",
        "num_train_epochs",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_generations",
        "learning_rate",
        "max_completion_length",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "logging_steps",
        "save_steps",
        "save_strategy",
        "save_total_limit",
        "report_to",
        "bf16",
        "use_cpu",
        "beta",
        "gradient_checkpointing",
        "reward_weights",
        "run_name",
    }
)


class TrlRows(BaseModel):
    """Which (task, stage) rows train (:func:`~shopping_companion.trainers.rows.build_rows`).

    ``split``: the benchmark split (``train``; ``test`` only for debugging). ``stages``: the
    stages to make rows for (paper: both). ``stage1``: who plays stage 1 of a stage-2 row
    (``gold``: the gold preferences are handed over; ``policy``: the model plays both stages).
    ``hint``: the user simulator's hint between the stages. ``task_ids``: only these tasks of the
    split, in this order (None: every task, in benchmark order; ``shopcomp pipeline``'s ``select``
    phase writes them). ``limit``: only the first N of those tasks (>= 1; None: all)."""

    model_config = STRICT
    split: Literal["train", "test"] = "train"
    stages: list[int] = Field(default_factory=lambda: [1, 2])
    stage1: Literal["gold", "policy"] = "gold"
    hint: Literal["none", "low", "high"] = "none"
    task_ids: list[str] | None = Field(default=None, min_length=1)
    limit: int | None = Field(default=None, ge=1)

    @field_validator("stages")
    @classmethod
    def _stages(cls, v: list[int]) -> list[int]:
        if not v or any(s not in (1, 2) for s in v) or len(set(v)) != len(v):
            raise ValueError(f"must be a non-empty list of distinct stages 1 and 2 (e.g. [1, 2]); got {v!r}")
        return v


class TrlTrainerSettings(BaseModel):
    """The ``GRPOConfig`` settings (TRL 1.16; one process).

    ``output_dir``: checkpoints, logs, ``config.yaml`` and ``summary.json``. Length of the run:
    ``max_steps`` (>= 1; optimizer steps) or, when it is None, ``num_train_epochs`` (> 0).
    Batch: ``per_device_train_batch_size`` completions per micro-batch, times
    ``gradient_accumulation_steps`` per optimizer step; that product must be a multiple of
    ``num_generations`` (>= 2, completions per prompt = the GRPO group). ``learning_rate`` (>= 0;
    0 is a frozen control run: every step samples and scores, nothing moves).
    ``max_completion_length``: token budget of one trajectory's response (generated plus
    observation tokens). Sampling: ``temperature`` (> 0), ``top_p`` in (0, 1], ``top_k`` (0: off).
    ``beta``: KL coefficient (0: no reference model, TRL's default). ``logging_steps`` /
    ``save_steps``: every N optimizer steps (a checkpoint is also written at the end);
    ``save_total_limit``: checkpoints kept (None: all). ``report_to``: ``tensorboard`` (event files
    under ``<output_dir>/runs``), ``wandb`` (``WANDB_PROJECT`` / ``WANDB_MODE`` from the
    environment) or ``none``; ``run_name`` names the run there. ``bf16``: bfloat16 mixed precision
    (GPUs; the base model is then loaded in bfloat16). ``device``: ``auto`` (the GPU when there is
    one), ``cpu`` or ``cuda``. ``gradient_checkpointing``: trade compute for memory.
    ``processed_logprobs``: compute the GRPO loss, ratio and KL with log-probabilities renormalised
    over the top-k / top-p support the rollouts are drawn from, not the full vocabulary
    (:mod:`shopping_companion.trainers.processed_logprobs`; text-only models).
    ``extra_args``: any other ``GRPOConfig`` field by name (checked against TRL's fields at run
    time; the fields above cannot be set here)."""

    model_config = STRICT
    output_dir: str = "runs/grpo/trl"
    max_steps: int | None = Field(default=None, ge=1)
    num_train_epochs: float = Field(default=1.0, gt=0)
    per_device_train_batch_size: int = Field(default=8, ge=1)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    num_generations: int = Field(default=8, ge=2)
    learning_rate: float = Field(default=1e-6, ge=0)
    max_completion_length: int = Field(default=4096, ge=1)
    temperature: float = Field(default=0.6, gt=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    top_k: int = Field(default=20, ge=0)
    beta: float = Field(default=0.0, ge=0)
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)
    save_steps: int = Field(default=50, ge=1)
    save_total_limit: int | None = Field(default=2, ge=1)
    report_to: list[Literal["tensorboard", "wandb", "none"]] = Field(default_factory=lambda: ["tensorboard"])
    run_name: str | None = None
    bf16: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    gradient_checkpointing: bool = False
    processed_logprobs: bool = False
    extra_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("report_to", mode="before")
    @classmethod
    def _one_or_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("report_to")
    @classmethod
    def _none_alone(cls, v: list[str]) -> list[str]:
        if "none" in v and len(v) > 1:
            raise ValueError(f"'none' cannot be combined with other loggers; got {v!r}")
        return v

    @field_validator("extra_args")
    @classmethod
    def _not_own(cls, v: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(v) & _OWN_ARGS)
        if clash:
            raise ValueError(f"{clash} are set by this config's own fields (trainer.<name>), not through extra_args")
        return v

    @model_validator(mode="after")
    def _warmup_ends(self) -> TrlTrainerSettings:
        def number(name: str) -> float | None:
            v = self.extra_args.get(name)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"trainer.extra_args.{name} must be a finite number >= 0; got {v!r}")
            return float(v)

        warmup = number("warmup_steps")  # >= 1: steps; below 1: a fraction of the run (transformers)
        if warmup is not None and warmup >= 1 and self.max_steps is not None and warmup >= self.max_steps:
            raise ValueError(
                f"trainer.extra_args.warmup_steps ({warmup:g}) must be below trainer.max_steps ({self.max_steps}): "
                f"the learning rate would still be warming up when the run ends and never reach "
                f"trainer.learning_rate ({self.learning_rate:g}); lower warmup_steps or raise max_steps"
            )
        ratio = number("warmup_ratio")
        if ratio is not None and ratio >= 1:
            raise ValueError(f"trainer.extra_args.warmup_ratio must be in [0, 1); got {ratio:g}")
        return self

    @model_validator(mode="after")
    def _group_fits(self) -> TrlTrainerSettings:
        per_step = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if per_step % self.num_generations:
            raise ValueError(
                f"trainer.per_device_train_batch_size × trainer.gradient_accumulation_steps ({per_step}) must be a "
                f"multiple of trainer.num_generations ({self.num_generations}): a prompt's group of completions is "
                "generated together"
            )
        return self

    def loggers(self) -> list[str]:
        """``report_to`` as TRL wants it (``[]`` for ``none``)."""
        return [x for x in self.report_to if x != "none"]


class TrlEnvSettings(BaseModel):
    """The environment of every trajectory. ``max_turns`` (>= 1): assistant turns per stage
    (paper: 20; also shown in the prompts). ``max_tokens_per_turn`` (>= 1): cap on one generation.
    ``scoring_deadline_s``: wall-clock seconds judging and rewarding one trajectory may take (a
    miss: not scored, no gradient); ``spec`` (default) takes the reward spec's, a number > 0
    overrides it, null: no deadline. ``max_batch`` (>= 1): most turns of concurrent trajectories
    generated as one batch."""

    model_config = STRICT
    max_turns: int = Field(default=20, ge=1)
    max_tokens_per_turn: int = Field(default=512, ge=1)
    scoring_deadline_s: Literal["spec"] | float | None = "spec"
    max_batch: int = Field(default=64, ge=1)

    @field_validator("scoring_deadline_s")
    @classmethod
    def _deadline(cls, v: Any) -> Any:
        return v if v == "spec" else deadline_or_none(v, also="'spec', ")


class TrlLora(BaseModel):
    """LoRA adapters (peft) instead of full fine-tuning: ``rank`` (>= 1), ``alpha`` (> 0, the
    scale is alpha / rank), ``dropout`` in [0, 1), ``target_modules`` (module names of the model,
    e.g. ``q_proj``; at least one)."""

    model_config = STRICT
    rank: int = Field(default=64, ge=1)
    alpha: float = Field(default=128.0, gt=0)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1)


class TrlGuards(BaseModel):
    """Checks on the run's learning signal. GRPO learns nothing from a group whose completions all
    got the same reward (zero standard deviation: every advantage is 0). ``zero_std_share``: a
    logged step whose share of such groups (TRL's ``frac_reward_zero_std``) is at or above this,
    in [0, 1], prints a warning; ``fail_on_zero_std``: the run fails (after writing its summary
    and checkpoints) when the share averaged over its steps is at or above it."""

    model_config = STRICT
    zero_std_share: float = Field(default=0.5, ge=0, le=1)
    fail_on_zero_std: bool = False


class TrlGrpoConfig(BaseModel):
    """One TRL GRPO run (``shopcomp grpo trl --config X.yaml``; configs/grpo/trl_*.yaml).

    ``model``: a local model directory or a hub id (offline runs need it cached). ``bench``: a
    benchmark directory written by ``shopcomp synth``. ``data_dir`` / ``index_dir``: the catalog
    data directory and the BM25 index directory (defaults as in ``shopcomp eval``; the index is
    built on first use). ``reward_config``: the reward spec (docs/rewards.md: ``paper``,
    ``outcome_only``, a spec or rubric YAML file, ``package.module:attr``, or an inline mapping),
    used by the environment and the trainer alike. ``rows``, ``trainer``, ``env``: see
    :class:`TrlRows`, :class:`TrlTrainerSettings`, :class:`TrlEnvSettings`. ``lora``: null (full
    fine-tuning) or :class:`TrlLora`. ``guards``: :class:`TrlGuards`. ``resume``: ``auto`` (continue from the latest
    ``checkpoint-N`` in ``trainer.output_dir`` when there is one, else start), ``true`` (the latest
    checkpoint, which must exist), ``false`` (start from the model), or a checkpoint directory.
    ``tools``: ``local`` (this process loads the index, memory, judge and rubric) or
    ``serve:URL`` (a ``shopcomp serve`` service holding the same benchmark and reward spec;
    docs/cluster.md), with ``service`` its client settings
    (:class:`~shopping_companion.assembly.endpoints.ServiceConfig`).
    Relative paths are relative to the working directory."""

    model_config = STRICT
    model: str
    bench: str
    data_dir: str | None = None
    index_dir: str | None = None
    reward_config: str | dict[str, Any] = "paper"
    tools: str = "local"
    service: ServiceConfig = ServiceConfig()
    rows: TrlRows = TrlRows()
    trainer: TrlTrainerSettings = TrlTrainerSettings()
    env: TrlEnvSettings = TrlEnvSettings()
    lora: TrlLora | None = None
    guards: TrlGuards = TrlGuards()
    resume: bool | str = "auto"

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_form(cls, v: Any) -> str:
        return check_tools(v, "tools")

    @field_validator("model", "bench")
    @classmethod
    def _given(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("resume")
    @classmethod
    def _resume(cls, v: bool | str) -> bool | str:
        if isinstance(v, str) and not v.strip():
            raise ValueError("allowed: auto | true | false | PATH (a checkpoint-N directory); got ''")
        return v


def require_trl() -> None:
    """Raise :class:`ConfigError` unless TRL, datasets, transformers and torch import here."""
    import importlib.util

    missing = [m for m in ("trl", "datasets", "transformers", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"shopcomp grpo trl needs {', '.join(missing)} (TRL 1.16), which this Python does not have; run it from "
            "the RL environment: scripts/install_rl.sh builds .venv-rl, then `.venv-rl/bin/shopcomp grpo trl ...`"
        )


def find_checkpoint(output_dir: str | Path, resume: bool | str) -> Path | None:
    """The checkpoint to resume from, per ``resume`` (:class:`TrlGrpoConfig`): None to start
    afresh. Raises :class:`ConfigError` for ``resume: true`` without a checkpoint in
    ``output_dir`` and for a checkpoint directory without ``trainer_state.json``."""
    out = Path(output_dir)
    if resume is False:
        return None
    if isinstance(resume, str) and resume != "auto":
        p = Path(resume).expanduser()
        if not (p / "trainer_state.json").is_file():
            raise ConfigError(
                f"resume: {resume!r} is not a trainer checkpoint ({p} has no trainer_state.json); allowed: auto | "
                "true | false | PATH (a checkpoint-N directory)"
            )
        return p
    found = []
    if out.is_dir():
        for d in out.iterdir():
            name = d.name
            if d.is_dir() and name.startswith("checkpoint-") and name[11:].isdigit():
                if (d / "trainer_state.json").is_file():
                    found.append((int(name[11:]), d))
    if found:
        return max(found)[1]
    if resume is True:
        raise ConfigError(
            f"resume: true but {out} holds no checkpoint-N directory; use resume: auto or false to start a new run"
        )
    return None


#: What the first line of ``<output_dir>/config.yaml`` starts with; the reward spec's identity
#: (JSON) and ``)`` follow it.
_HEADER = "shopcomp grpo trl: the resolved config (reward spec: "

#: Dotted fields a resume may change: how long to train, how often to log and save, where to
#: report, which checkpoints to keep, and the resume setting itself. Anything else (model, data,
#: rows, reward spec, optimisation, sampling, environment, LoRA) would continue the checkpoint
#: as another run.
RESUME_MAY_CHANGE = frozenset(
    {
        "resume",
        "trainer.max_steps",
        "trainer.save_steps",
        "trainer.save_total_limit",
        "trainer.logging_steps",
        "trainer.report_to",
        "trainer.run_name",
        "trainer.output_dir",
        "guards",
    }
)


def _without(data: dict[str, Any], dotted: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if k in dotted:
            continue
        inner = frozenset(d[len(k) + 1 :] for d in dotted if d.startswith(k + "."))
        out[k] = _without(v, inner) if isinstance(v, dict) and inner else v
    return out


def _stored_spec_identity(path: Path) -> Any:
    """The reward spec identity in the first line of a ``config.yaml`` this module wrote (None when
    the line is not there or does not parse)."""
    with path.open(encoding="utf-8") as f:
        first = f.readline().rstrip("\n")
    head = f"# {_HEADER}"
    if not (first.startswith(head) and first.endswith(")")):
        return None
    try:
        return json.loads(first[len(head) : -1])
    except ValueError:
        return None


def check_resume_config(cfg: TrlGrpoConfig, spec_identity: dict[str, Any], ckpt: Path, console: Any = None) -> None:
    """Refuse to resume ``ckpt`` with a config other than the one that trained it.

    The stored config is ``config.yaml`` next to the checkpoint (``ckpt.parent``, the output
    directory that wrote it), with the reward spec's identity in its header line. Every field may
    differ except those of :data:`RESUME_MAY_CHANGE`; the reward spec's identity (rubric, judge
    kind and model, deadline) must be the same too. No stored config (a checkpoint from elsewhere):
    a warning on ``console``, no check. Raises :class:`ConfigError` naming each changed dotted
    field (``old → new``) and how to start a new run instead (another ``trainer.output_dir``)."""
    from shopping_companion.config import load_model
    from shopping_companion.runs import identity_changes

    stored = ckpt.parent / "config.yaml"
    if not stored.is_file():
        if console is not None:
            console.print(
                f"warning: {stored} is missing, so the config that trained {ckpt} is unknown; resuming without "
                "checking it",
                soft_wrap=True,
                markup=False,
            )
        return
    try:
        old_cfg = load_model(TrlGrpoConfig, stored)
    except ConfigError as e:
        raise ConfigError(
            f"resume: the config that trained {ckpt} ({stored}) no longer reads as a TRL GRPO config ({e}); "
            "start a new run in another --output-dir (trainer.output_dir)"
        ) from None
    old = {"config": _without(old_cfg.model_dump(mode="json"), RESUME_MAY_CHANGE)}
    new = {"config": _without(cfg.model_dump(mode="json"), RESUME_MAY_CHANGE)}
    old_spec = _stored_spec_identity(stored)
    if old_spec is not None:
        old["reward_spec"], new["reward_spec"] = old_spec, json.loads(json.dumps(spec_identity))
    changes = [c.removeprefix("config.") for c in identity_changes(old, new)]
    if changes:
        raise ConfigError(
            f"resume: {ckpt} was trained with another config ({stored}); changed: "
            + "; ".join(changes)
            + ". A resume may change only "
            + ", ".join(sorted(RESUME_MAY_CHANGE))
            + f". To train with the new config, start a new run in another --output-dir (trainer.output_dir); "
            f"to continue this one, run it with the config in {stored}"
        )


def _console() -> Any:
    from shopping_companion.console import console

    return console


def _logged(entry: dict[str, Any]) -> dict[str, float]:
    """Every numeric entry of one trainer log line (loss, rewards, entropy, ``frac_reward_zero_std``,
    completion lengths, ``shopcomp/...``, ...), as floats."""
    return {k: float(v) for k, v in entry.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _callback(
    console: Any, logs: list[dict[str, Any]], reward_names: list[str], metrics_path: Path, guards: TrlGuards
) -> Any:
    from transformers import TrainerCallback

    class _Print(TrainerCallback):
        """Prints each training log line (step, loss, every reward component), keeps it, appends it
        to ``metrics.jsonl`` and warns about steps without a learning signal."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            entry = logs
            if not entry or "rewards/shopcomp_total/mean" not in entry:
                return
            rec = {"step": int(state.global_step), **_logged(entry)}
            kept.append(rec)
            with metrics_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")
            parts = [f"step {state.global_step}/{state.max_steps}"]
            for k in ("loss", "reward"):
                if k in rec:
                    parts.append(f"{k} {rec[k]:.4g}")
            for n in reward_names[1:]:
                v = rec.get(f"rewards/{n}/mean")
                if v is not None:
                    parts.append(f"{n} {v:.4g}")
            if "shopcomp/unscored" in rec:
                parts.append(f"unscored {rec['shopcomp/unscored']:.2f}")
            if "shopcomp/uncertain_share" in rec:
                parts.append(f"uncertain {rec['shopcomp/uncertain_share']:.2f}")
            zero = rec.get("frac_reward_zero_std")
            if zero is not None:
                parts.append(f"zero-std groups {zero:.2f}")
            console.print("  ".join(parts), soft_wrap=True, markup=False)
            if zero is not None and zero >= guards.zero_std_share:
                console.print(
                    f"warning: step {state.global_step}: {zero:.0%} of the GRPO groups got the same reward for every "
                    f"completion (no advantage, no gradient; guards.zero_std_share {guards.zero_std_share:g}). "
                    "Raise the sampling temperature or num_generations, or check that the rewards can vary",
                    soft_wrap=True,
                    markup=False,
                )

    kept = logs
    return _Print()


#: Where a run records the weight hash its first rollouts sampled from (kept across resumes).
FIRST_ROLLOUT_FILE = "first_rollout.json"


def _earlier_logs(out: Path) -> list[dict[str, Any]]:
    """The step logs of earlier invocations (``metrics.jsonl`` as :func:`_align_step_logs` left it),
    so a resumed run's summary covers every step."""
    from shopping_companion.runs import scan_jsonl

    records = scan_jsonl(out / "metrics.jsonl", json.loads).records  # unreadable lines are skipped
    return [rec for rec in records if isinstance(rec, dict) and "step" in rec]


def _step_of(ckpt: Path | None) -> int:
    return int(ckpt.name.rsplit("-", 1)[-1]) if ckpt is not None and ckpt.name.rsplit("-", 1)[-1].isdigit() else 0


def _align_step_logs(out: Path, ckpt: Path | None) -> None:
    """Make ``metrics.jsonl`` / ``rollouts.jsonl`` agree with where training (re)starts: records of
    steps after the checkpoint (all of them when starting afresh) were made by a run that is being
    redone, so they are dropped from the live files; the files as they were are kept beside them
    as ``<name>.stale-<UTC time>``."""
    start = _step_of(ckpt)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    # a metrics line is logged at the end of its step; a rollout line carries the step it was sampled at (done - 1)
    for name, keep in (("metrics.jsonl", lambda s: s <= start), ("rollouts.jsonl", lambda s: s < start)):
        path = out / name
        if not path.is_file():
            continue
        kept, dropped = [], 0
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                step = int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                dropped += 1
                continue
            if keep(step):
                kept.append(line)
            else:
                dropped += 1
        if dropped:
            target, n = path.with_name(f"{name}.stale-{stamp}"), 1
            while target.exists():  # never replace an earlier copy
                target, n = path.with_name(f"{name}.stale-{stamp}-{n}"), n + 1
            path.rename(target)
            path.write_text("".join(x + "\n" for x in kept), encoding="utf-8")


def zero_std_summary(logs: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"mean": share of zero-variance groups averaged over the logged steps (None without
    any), "steps": number of logged steps that report it}``."""
    shares = [float(r["frac_reward_zero_std"]) for r in logs if r.get("frac_reward_zero_std") is not None]
    return {"mean": (sum(shares) / len(shares)) if shares else None, "steps": len(shares)}


def _check_model_path(model: str) -> None:
    """Raise :class:`ConfigError` when ``model`` is written as a path (not a hub id) and is not a
    model directory (:func:`~shopping_companion.llm.model_files.model_config` says why)."""
    if not looks_like_path(model):
        return
    found, why = model_config(model)
    if found is None:
        raise ConfigError(
            f"model: {model!r} is not a model directory ({why}; give a local model directory, or a hub id "
            "org/name already in the Hugging Face cache)"
        )


def _load_model(cfg: TrlGrpoConfig) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if cfg.trainer.bf16 else torch.float32
    try:
        tok = AutoTokenizer.from_pretrained(cfg.model)
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"model: {cfg.model!r} cannot be loaded as a causal LM with its tokenizer ({' '.join(str(e).split())[:300]})"
        ) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def _use_cpu(device: str) -> bool:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device: 'cuda' but torch sees no GPU here (use 'cpu' or 'auto')")
    return device == "cpu" or (device == "auto" and not torch.cuda.is_available())


def _task_rows(cfg: TrlGrpoConfig, resources: Any, bench: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """``(tasks, TRL dataset rows)`` of ``cfg.rows``' split. Raises DataError for a split without
    tasks or rows that cannot be built."""
    from shopping_companion.trainers.rows import build_rows
    from shopping_companion.trainers.trl_rollout import trl_dataset_rows

    tasks = [t for t in resources.tasks.values() if t.split == cfg.rows.split]
    if cfg.rows.task_ids is not None:
        by_id = {t.task_id: t for t in tasks}
        missing = [i for i in cfg.rows.task_ids if i not in by_id]
        if missing:
            raise DataError(
                f"rows.task_ids: {missing[:5]} are not {cfg.rows.split!r} tasks of the benchmark {bench} "
                f"(it has {len(by_id)}, e.g. {sorted(by_id)[:3]})"
            )
        tasks = [by_id[i] for i in dict.fromkeys(cfg.rows.task_ids)]
    tasks = tasks[: cfg.rows.limit]
    if not tasks:
        raise DataError(f"rows.split: the benchmark {bench} has no {cfg.rows.split!r} tasks")
    try:
        rows = trl_dataset_rows(
            build_rows(
                tasks,
                benchmark=bench,
                stages=cfg.rows.stages,
                stage1=cfg.rows.stage1,
                hint=cfg.rows.hint,
                max_turns=cfg.env.max_turns,
            )
        )
    except ValueError as e:
        if isinstance(e, (ConfigError, DataError)):
            raise
        raise DataError(f"rows: {e}") from None
    return tasks, rows


def _grpo_config(cfg: TrlGrpoConfig, out: Path, weights: list[float], use_cpu: bool) -> Any:
    """TRL's ``GRPOConfig`` of ``cfg.trainer`` (plus its ``extra_args``), writing to ``out``."""
    from trl import GRPOConfig

    t = cfg.trainer
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=t.max_steps if t.max_steps is not None else -1,
        num_train_epochs=t.num_train_epochs,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_generations=t.num_generations,
        learning_rate=t.learning_rate,
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        top_k=t.top_k,
        beta=t.beta,
        seed=t.seed,
        logging_steps=t.logging_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        report_to=t.loggers(),
        run_name=t.run_name,
        bf16=t.bf16,
        use_cpu=use_cpu,
        gradient_checkpointing=t.gradient_checkpointing,
        reward_weights=weights,
        **t.extra_args,
    )
    return args


def _peft_config(cfg: TrlGrpoConfig) -> Any:
    """peft's ``LoraConfig`` of ``cfg.lora`` (None: full fine-tuning)."""
    peft_config = None
    if cfg.lora is not None:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=cfg.lora.rank,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=list(cfg.lora.target_modules),
            task_type="CAUSAL_LM",
        )
    return peft_config


def _rollout_state(out: Path, ckpt: Path | None) -> tuple[Path, dict[str, Any]]:
    """``(the first-rollout file, the rollout state)``: a fresh run removes the file; a resumed run
    keeps the weights hash its first invocation sampled from."""
    first_path = out / FIRST_ROLLOUT_FILE
    rollout_state: dict[str, Any] = {}
    if ckpt is None:
        first_path.unlink(missing_ok=True)
    else:  # a resumed run keeps the proof of what its first invocation sampled from
        from shopping_companion.runs import read_json

        got = read_json(first_path)
        earlier = got.get("first_rollout_weights_sha256") if isinstance(got, dict) else None
        if earlier:
            rollout_state["first_rollout_weights_sha256"] = earlier
    return first_path, rollout_state


def run_trl(cfg: TrlGrpoConfig, *, console: Any = None) -> dict[str, Any]:
    """Run the GRPO training ``cfg`` describes (module docstring) and return its summary.

    Summary keys: ``steps`` (the trainer's global step at the end), ``resumed_from`` (checkpoint
    path or None), ``wall_s`` (seconds of ``trainer.train``), ``setup_s`` (seconds loading the
    services, rows and model), ``logged`` (this invocation's log entries: step, loss, ``reward``
    and every ``rewards/<name>/mean``), ``last`` (the last of them), ``reward_functions`` (the
    names logged), ``checkpoints`` (checkpoint directories in ``output_dir``), ``rows`` / ``tasks``
    (dataset size), ``output_dir``, ``reward_spec`` (the spec's identity). Also written to
    ``<output_dir>/summary.json``.

    Raises :class:`ConfigError` (TRL missing, a model that does not load, a bad reward spec,
    resume without a checkpoint, an unknown ``extra_args`` field, no GPU for ``device: cuda``) and
    :class:`DataError` / :class:`BenchmarkMissingError` (no tasks in the split, rows that share a
    prompt, a benchmark directory that is not one)."""
    from shopping_companion.config import dump_yaml
    from shopping_companion.assembly.reward_spec import load_reward_spec

    console = console or _console()
    require_trl()
    _check_model_path(cfg.model)  # before anything is written
    spec = load_reward_spec(cfg.reward_config)
    spec.build_rubric()  # a rubric that does not import fails here, before anything loads
    out = Path(cfg.trainer.output_dir)
    ckpt = find_checkpoint(out, cfg.resume)
    deadline = spec.scoring_deadline_s if cfg.env.scoring_deadline_s == "spec" else cfg.env.scoring_deadline_s

    from trl import GRPOConfig

    grpo_fields = set(GRPOConfig.__dataclass_fields__)
    unknown = sorted(set(cfg.trainer.extra_args) - grpo_fields)
    if unknown:
        raise ConfigError(f"trainer.extra_args: {unknown} are not GRPOConfig fields of the installed TRL")
    use_cpu = _use_cpu(cfg.trainer.device)

    if ckpt is not None:
        check_resume_config(cfg, spec.identity(), ckpt, console)
    out.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, out / "config.yaml", header=f"{_HEADER}{json.dumps(spec.identity(), sort_keys=True)})")
    _align_step_logs(out, ckpt)

    t0 = time.perf_counter()
    from datasets import Dataset
    from trl import GRPOTrainer

    from shopping_companion.trainers.resources import ResourceSpec, build_resources
    from shopping_companion.trainers.trl_rollout import make_rollout_func, reward_functions

    bench = str(Path(cfg.bench).expanduser().resolve())
    console.print(f"loading the benchmark, index and embedder ({bench})", soft_wrap=True, markup=False)
    resources = build_resources(
        ResourceSpec(
            benchmark=bench,
            data_dir=cfg.data_dir,
            index_dir=cfg.index_dir,
            reward_config=spec.to_json(),
            tools=cfg.tools,
            **cfg.service.model_dump(exclude={"breaker_threshold"}),  # training goes on: a failed sample is unscored
        )
    )
    tasks, rows = _task_rows(cfg, resources, bench)
    rubric = resources.reward_fn  # the spec's rubric, the one the environment scores with
    funcs, weights = reward_functions(rubric)
    names = [f.__name__ for f in funcs]
    t = cfg.trainer
    args = _grpo_config(cfg, out, weights, use_cpu)
    model, tok = _load_model(cfg)
    peft_config = _peft_config(cfg)
    logs: list[dict[str, Any]] = _earlier_logs(out) if ckpt is not None else []
    from shopping_companion.llm.weights import weights_sha256

    initial_sha = weights_sha256(model)  # what the run was given (before any adapter)
    first_path, rollout_state = _rollout_state(out, ckpt)
    if t.processed_logprobs:
        from shopping_companion.trainers.processed_logprobs import processed_grpo_trainer

        GRPOTrainer = processed_grpo_trainer(GRPOTrainer)  # noqa: N806 - the trainer class in use
    try:
        trainer = GRPOTrainer(
            model=model,
            processing_class=tok,
            reward_funcs=funcs,
            args=args,
            train_dataset=Dataset.from_list(rows),
            peft_config=peft_config,
            callbacks=[_callback(console, logs, names, out / "metrics.jsonl", cfg.guards), _hash_on_save()],
            rollout_func=make_rollout_func(
                resources,
                rows,
                max_turns=cfg.env.max_turns,
                max_tokens_per_turn=cfg.env.max_tokens_per_turn,
                rubric=rubric,
                scoring_deadline_s=deadline,
                max_batch=cfg.env.max_batch,
                state=rollout_state,
                rollouts_path=out / "rollouts.jsonl",
                first_rollout_path=first_path,
            ),
        )
    except ValueError as e:  # peft: target modules not in the model, and the like
        raise ConfigError(f"the trainer refused the config: {' '.join(str(e).split())[:400]}") from None
    setup_s = time.perf_counter() - t0
    console.print(
        f"GRPO with TRL: {len(rows)} rows of {len(tasks)} {cfg.rows.split} tasks, "
        f"{t.num_generations} completions per prompt, {'CPU' if use_cpu else 'GPU'}"
        + (f", LoRA rank {cfg.lora.rank}" if cfg.lora else ", full fine-tuning")
        + (f"; resuming from {ckpt}" if ckpt else ""),
        soft_wrap=True,
        markup=False,
    )
    t1 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    wall = time.perf_counter() - t1
    checkpoints = sorted(
        (str(d) for d in out.glob("checkpoint-*") if d.is_dir()), key=lambda s: int(s.rsplit("-", 1)[-1])
    )
    summary = {
        "steps": int(trainer.state.global_step),
        "resumed_from": str(ckpt) if ckpt else None,
        "wall_s": round(wall, 2),
        "setup_s": round(setup_s, 2),
        "logged": logs,
        "last": logs[-1] if logs else {},
        "reward_functions": names,
        "checkpoints": checkpoints,
        "tasks": len(tasks),
        "rows": len(rows),
        "output_dir": str(out),
        "reward_spec": spec.identity(),
        "model": cfg.model,
        "initial_weights_sha256": initial_sha,
        "first_rollout_weights_sha256": rollout_state.get("first_rollout_weights_sha256"),
        "checkpoint_weights_sha256": {c: _read_hash(Path(c)) for c in checkpoints},
        "zero_std_groups": zero_std_summary(logs),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    zero = summary["zero_std_groups"]["mean"]
    if cfg.guards.fail_on_zero_std and zero is not None and zero >= cfg.guards.zero_std_share:
        raise TrainingSignalError(
            f"guards.fail_on_zero_std: on average {zero:.0%} of the GRPO groups per step had no reward variance "
            f"(threshold guards.zero_std_share {cfg.guards.zero_std_share:g}), so most steps trained on nothing; "
            f"checkpoints and {out / 'summary.json'} are written. Raise the sampling temperature or "
            "num_generations, or check the rewards"
        )
    return summary


#: The file in each checkpoint directory holding the content hash of its weights.
WEIGHTS_FILE = "shopcomp_weights.json"


def _read_hash(ckpt: Path) -> str | None:
    try:
        return json.loads((ckpt / WEIGHTS_FILE).read_text(encoding="utf-8"))["weights_sha256"]
    except (OSError, ValueError, KeyError):
        return None


def _hash_on_save() -> Any:
    from transformers import TrainerCallback

    class HashOnSave(TrainerCallback):
        """Writes ``<checkpoint>/shopcomp_weights.json``: the content hash of the weights just saved
        (:func:`~shopping_companion.llm.weights.weights_sha256`) and the step."""

        def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            from shopping_companion.llm.weights import weights_sha256

            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if model is None or not ckpt.is_dir():
                return
            data = {"weights_sha256": weights_sha256(model), "step": int(state.global_step)}
            (ckpt / WEIGHTS_FILE).write_text(json.dumps(data) + "\n", encoding="utf-8")

    return HashOnSave()
