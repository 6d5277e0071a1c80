"""The configuration of ``shopcomp pipeline`` (configs/pipeline/*.yaml; docs/pipeline.md).

:class:`PipelineConfig` is read by :func:`~shopping_companion.config.load_model` (YAML < flags <
``--set``); an unknown key or a bad value is refused naming the dotted field and what is allowed.
Each group configures one phase; its identity (:meth:`PipelineConfig.phase_identity`) is what
decides whether a finished phase can be reused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from shopping_companion.config import STRICT, RunDir, validation_message
from shopping_companion.trainers.nano import NanoModelConfig

__all__ = [
    "ArmConfig",
    "CollectSettings",
    "EvalSettings",
    "GrpoSettings",
    "ModelSettings",
    "PipelineBench",
    "PipelineConfig",
    "PythonSettings",
    "SftSettings",
    "TeacherSettings",
]


class PythonSettings(BaseModel):
    """Interpreters of the training stacks (their pins clash, so each lives in its own virtual
    environment: scripts/install_sft.sh, scripts/install_rl.sh). Relative paths are relative to
    the repository root, then to the working directory."""

    model_config = STRICT
    sft: str = ".venv-sft/bin/python"
    rl: str = ".venv-rl/bin/python"


class PipelineBench(BaseModel):
    """The benchmark: ``path`` reuses a benchmark directory (``shopcomp synth`` or
    ``import-tasks`` output); else one is built into ``<run>/bench`` with ``synth`` (keys of
    ``SynthConfig``, configs/benchmark/*.yaml)."""

    model_config = STRICT
    path: str | None = None
    synth: dict[str, Any] = Field(default_factory=dict)


class EnvSettings(BaseModel):
    """The environment every phase uses: ``max_turns`` per stage (paper: 20) and
    ``max_tokens_per_turn`` (cap on one generation, in collection, GRPO and evaluation)."""

    model_config = STRICT
    max_turns: int = Field(default=20, ge=1, le=200)
    max_tokens_per_turn: int = Field(default=4096, ge=1)


#: teacher settings added after pipeline runs existed, with their defaults (left out of the collect
#: phase's identity at that default, so those runs resume)
_TEACHER_KEYS_ADDED: dict[str, Any] = {"p_attribute_queries": 0.0}


class TeacherSettings(BaseModel):
    """The SFT teacher. ``kind: openai``: any OpenAI-compatible endpoint (``model``, ``base_url``,
    ``api_key_env``; the paper's GPT-4.1, or a vLLM server). ``kind: scripted``: the scripted,
    gold-knowing :class:`~shopping_companion.llm.teacher.ScriptedTeacher`, served by the pipeline
    on 127.0.0.1 and collected from through the same OpenAI client (for CPU runs; the report says
    so); ``top_k`` / ``p_stray`` / ``p_slip`` / ``p_attribute_queries`` / ``seed`` /
    ``answer_from`` (``gold`` | ``evidence``: stage-1 answers hold only what the viewed sessions
    state) are its settings."""

    model_config = STRICT
    kind: Literal["scripted", "openai"] = "scripted"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    top_k: list[int] = Field(default_factory=lambda: [1, 2, 3])
    p_stray: float = Field(default=0.25, ge=0, le=1)
    p_slip: float = Field(default=0.15, ge=0, le=1)
    p_attribute_queries: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0
    answer_from: Literal["gold", "evidence"] = "gold"

    def scripted_settings(self) -> dict[str, Any]:
        """The scripted teacher's settings as keyword arguments of
        :class:`~shopping_companion.llm.teacher.ScriptedTeacher` (``top_k`` ... ``answer_from``)."""
        return self.model_dump(include={"top_k", "p_stray", "p_slip", "p_attribute_queries", "seed", "answer_from"})

    @model_validator(mode="after")
    def _endpoint(self) -> TeacherSettings:
        if self.kind == "openai" and not (self.model and self.base_url):
            raise ValueError("teacher.model and teacher.base_url are required with teacher.kind=openai")
        return self


class CollectSettings(BaseModel):
    """Rejection sampling (``shopcomp sft collect``): ``trials`` episodes per train task, the
    teacher's sampling ``temperature``, the keep rule (``succ`` | ``stage`` | ``pref_acc``; see
    docs/sft.md), ``min_acc`` (the stage-1 Acc threshold of ``pref_acc``, in [0, 1]) and
    ``concurrency``."""

    model_config = STRICT
    trials: int = Field(default=4, ge=1)
    temperature: float = Field(default=0.6, ge=0)
    keep: Literal["succ", "stage", "pref_acc"] = "stage"
    min_acc: float = Field(default=1.0, ge=0.0, le=1.0)
    concurrency: int = Field(default=8, ge=1)


class ModelSettings(BaseModel):
    """The base policy: ``path`` (a local model directory or a hub id), or, when it is None, a nano
    model built from ``nano`` (:class:`~shopping_companion.trainers.nano.NanoModelConfig`) with a
    tokenizer trained on the kept train-split trajectories."""

    model_config = STRICT
    path: str | None = None
    nano: NanoModelConfig = NanoModelConfig()


class SftSettings(BaseModel):
    """SFT with LLaMA-Factory. ``finetuning``: ``lora`` (then merged into the base model for RL) or
    ``full``. ``examples``: ``step`` (the paper's step-level examples, loss on the last turn) or
    ``trajectory`` (one example per kept stage, loss on every turn: the same targets at a fraction
    of the tokens). ``template``: LLaMA-Factory template (qwen3 | qwen3_nothink | qwen). ``args``:
    LLaMA-Factory training keys over the paper's config (configs/sft/qwen3_4b_thinking_lora.yaml)."""

    model_config = STRICT
    finetuning: Literal["lora", "full"] = "lora"
    examples: Literal["step", "trajectory"] = "step"
    template: Literal["qwen3", "qwen3_nothink", "qwen"] = "qwen3"
    args: dict[str, Any] = Field(default_factory=dict)


class ArmConfig(BaseModel):
    """One GRPO arm: its ``name`` (a directory name) and reward spec (``paper``, ``outcome_only``,
    a spec/rubric YAML, ``module:attr`` or an inline mapping; docs/rewards.md). ``trainer``:
    overrides of the shared trainer settings for this arm (e.g. ``learning_rate: 0`` for a frozen
    control)."""

    model_config = STRICT
    name: str
    reward_config: str | dict[str, Any] = "paper"
    trainer: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _arm_name(cls, v: str) -> str:
        v = _dir_name(v)
        if v in ("base", "sft"):
            raise ValueError(f"{v!r} names a model the pipeline evaluates itself (base, sft); pick another arm name")
        return v


def _dir_name(v: str) -> str:
    """``v`` when it is a plain directory name (letters, digits, ``_``, ``.``, ``-``; not ``.`` or ``..``)."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", v) or set(v) == {"."}:
        raise ValueError(f"letters, digits, '_', '.', '-' only, not '.' or '..' (a directory name); got {v!r}")
    return v


class SelectSettings(BaseModel):
    """Which training tasks GRPO trains on (the ``select`` phase; docs/pipeline.md, "Choosing the
    GRPO prompts"). ``by: spread``: the SFT model plays every train-split task ``trials`` times
    (>= 2) at the GRPO arms' sampling settings, and the ``grpo.rows.limit`` tasks whose outcome
    reward R_z varied most across those trials are trained (a group whose rewards are all equal
    gives GRPO no advantage to learn from; DAPO filters such prompts too)."""

    model_config = STRICT
    by: Literal["spread"] = "spread"
    trials: int = Field(default=4, ge=2)


class GrpoSettings(BaseModel):
    """GRPO after SFT. ``backend``: ``trl`` (one node, ``shopcomp grpo trl``) or ``verl`` (a Ray
    cluster, ``shopcomp grpo launch``; needs GPUs). ``arms``: the runs compared (the paper's
    outcome-only vs outcome + tool-wise rubric; same seed and budget). ``trainer`` /
    ``rows`` / ``lora`` / ``guards``: keys of ``shopcomp grpo trl``'s config (TrlGrpoConfig),
    shared by the arms; ``extra``: dotted keys set last on every arm's TRL config. ``verl``:
    Hydra overrides for the verl launch. ``select``: choose the trained tasks by the SFT model's
    reward spread (:class:`SelectSettings`; needs ``rows.limit``); None: the first ``rows.limit``."""

    model_config = STRICT
    backend: Literal["trl", "verl"] = "trl"
    arms: list[ArmConfig] = Field(
        default_factory=lambda: [
            ArmConfig(name="outcome_only", reward_config="outcome_only"),
            ArmConfig(name="outcome_tool", reward_config="paper"),
        ],
        min_length=1,
    )
    trainer: dict[str, Any] = Field(default_factory=dict)
    rows: dict[str, Any] = Field(default_factory=dict)
    lora: dict[str, Any] | None = None
    guards: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    verl: list[str] = Field(default_factory=list)
    select: SelectSettings | None = None

    @model_validator(mode="after")
    def _select_needs_limit(self) -> GrpoSettings:
        if self.select is None:
            return self
        if not isinstance(self.rows.get("limit"), int):
            raise ValueError("grpo.select needs grpo.rows.limit: how many of the train tasks GRPO trains on")
        if self.backend != "trl":
            raise ValueError("grpo.select needs backend trl (verl trains on every row `grpo prepare` writes)")
        if "task_ids" in self.rows:
            raise ValueError("grpo.rows.task_ids and grpo.select both choose the tasks: set one of them")
        return self

    @field_validator("arms")
    @classmethod
    def _distinct(cls, v: list[ArmConfig]) -> list[ArmConfig]:
        names = [a.name for a in v]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be distinct; got {names}")
        return v


#: Eval settings that choose which evaluations run (not what one of them computes): left out of
#: an evaluation phase's identity, so changing them reuses the evaluations already made.
_EVAL_SELECTION = ("splits", "include_base", "checkpoints")


class EvalSettings(BaseModel):
    """Evaluation of base, SFT and every GRPO arm's final checkpoint with the same eval code:
    ``splits`` (test and train), ``trials`` per task (>= 2 for pass^k), ``pass_k``,
    ``temperature`` / ``top_p`` of the policy, ``concurrency`` (episodes in flight; their turns are
    generated in batches), ``device`` (cpu | cuda | auto), ``include_base`` (evaluate the base
    model too), ``checkpoints``: ``final`` (each arm's last checkpoint) or ``all`` (every checkpoint
    an arm saved, named ``<arm>@<step>``; set ``grpo.trainer.save_steps`` and
    ``save_total_limit`` to keep them)."""

    model_config = STRICT
    splits: list[Literal["test", "train"]] = Field(default_factory=lambda: ["test", "train"], min_length=1)
    trials: int = Field(default=2, ge=1)
    pass_k: list[int] = Field(default_factory=lambda: [1, 2])
    temperature: float = Field(default=0.6, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    concurrency: int = Field(default=16, ge=1)
    device: str = "cpu"
    include_base: bool = True
    checkpoints: Literal["final", "all"] = "final"

    @model_validator(mode="after")
    def _k_fits(self) -> EvalSettings:
        if any(k < 1 or k > self.trials for k in self.pass_k):
            raise ValueError(f"pass_k values must be in 1..trials ({self.trials}); got {self.pass_k}")
        return self


class PipelineConfig(RunDir, BaseModel):
    """One pipeline run (module docstring): outputs in ``<runs_dir>/<name>/``."""

    model_config = STRICT
    name: str = "pipeline"
    runs_dir: str = "runs/pipeline"
    description: str = ""
    seed: int = 0
    data_dir: str | None = None
    index_dir: str | None = None
    python: PythonSettings = PythonSettings()
    benchmark: PipelineBench = PipelineBench()
    env: EnvSettings = EnvSettings()
    teacher: TeacherSettings = TeacherSettings()
    collect: CollectSettings = CollectSettings()
    model: ModelSettings = ModelSettings()
    sft: SftSettings = SftSettings()
    grpo: GrpoSettings = GrpoSettings()
    eval: EvalSettings = EvalSettings()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _dir_name(v)

    @model_validator(mode="after")
    def _arms_run(self) -> PipelineConfig:
        """Each TRL arm's config as ``shopcomp grpo trl`` will read it, and its reward spec, are
        checked when the config loads (not after SFT)."""
        if self.grpo.backend != "trl":
            given = sorted(self.grpo.trainer) + sorted(f"{a.name}: {k}" for a in self.grpo.arms for k in a.trainer)
            if given:
                raise ValueError(
                    f"grpo.trainer and grpo.arms[].trainer are TRL settings, unused with grpo.backend: "
                    f"{self.grpo.backend} (got {', '.join(given)}); set them as Hydra overrides in grpo.verl"
                )
            return self
        from pydantic import ValidationError

        from shopping_companion.errors import ShopCompError
        from shopping_companion.assembly.reward_spec import load_reward_spec
        from shopping_companion.trainers.trl_train import TrlGrpoConfig

        for arm in self.grpo.arms:
            conf = self.trl_arm_config(arm, model="<sft model>", bench="<benchmark>", output_dir="<run>")
            try:
                TrlGrpoConfig.model_validate(conf)
            except ValidationError as e:
                raise ValueError(
                    f"arm {arm.name}: its TRL config (grpo.trainer / arms[].trainer / rows / lora / guards / extra, "
                    f"paths as in `shopcomp grpo trl`'s config) is refused: {validation_message(TrlGrpoConfig, e)}"
                ) from None
            try:
                load_reward_spec(arm.reward_config)
            except ShopCompError as e:
                raise ValueError(f"arm {arm.name}: reward_config: {e}") from None
        return self

    def trl_arm_config(
        self, arm: ArmConfig, *, model: str, bench: str, output_dir: str, task_ids: list[str] | None = None
    ) -> dict[str, Any]:
        """The ``shopcomp grpo trl`` config (TrlGrpoConfig keys) of one arm: the shared
        ``grpo.trainer`` then the arm's ``trainer`` over the run's seed and device, ``grpo.rows``
        on the train split (only ``task_ids`` when given: the ``select`` phase's choice), ``lora``,
        ``guards``, the run's ``env``; ``grpo.extra``'s dotted keys
        are set last."""
        g = self.grpo
        trainer = {
            "output_dir": output_dir,
            "seed": self.seed,
            "report_to": "none",
            "device": "cpu" if self.eval.device == "cpu" else "auto",
            **g.trainer,
            **arm.trainer,
        }
        conf: dict[str, Any] = {
            "model": model,
            "bench": bench,
            "data_dir": self.data_dir,
            "index_dir": self.index_dir,
            "reward_config": arm.reward_config,
            "rows": {"split": "train", **g.rows, **({"task_ids": list(task_ids)} if task_ids else {})},
            "trainer": trainer,
            "env": {"max_turns": self.env.max_turns, "max_tokens_per_turn": self.env.max_tokens_per_turn},
            "lora": g.lora,
            "guards": g.guards,
        }
        for key, value in g.extra.items():  # dotted keys, set last
            node = conf
            *head, last = key.split(".")
            for h in head:
                node = node.setdefault(h, {})
            node[last] = value
        return conf

    def grpo_sampling(self) -> dict[str, Any]:
        """The GRPO arms' rollout sampling (``temperature``, ``top_p``, ``top_k``): ``grpo.trainer``
        over ``shopcomp grpo trl``'s defaults (the ``select`` phase samples the same way)."""
        from shopping_companion.trainers.trl_train import TrlTrainerSettings

        defaults = TrlTrainerSettings.model_fields
        return {k: self.grpo.trainer.get(k, defaults[k].default) for k in ("temperature", "top_p", "top_k")}

    def phase_identity(self, phase: str) -> dict[str, Any]:
        """The settings phase ``phase`` depends on (besides its inputs' hashes, which the runner
        adds): a changed value makes the phase's stored output another run's."""
        d = self.model_dump(mode="json")
        common = {"seed": self.seed, "env": d["env"]}
        if phase == "bench":
            return {"benchmark": d["benchmark"]}
        if phase == "collect":
            # a teacher key added later counts only away from its default: runs made before it keep their identity
            teacher = {k: v for k, v in d["teacher"].items() if _TEACHER_KEYS_ADDED.get(k, object()) != v}
            return {**common, "teacher": teacher, "collect": d["collect"]}
        if phase == "model":
            return {"model": d["model"], "env": d["env"]}
        if phase == "sft":
            return {**common, "sft": d["sft"]}
        if phase.startswith("grpo:"):
            arm = next(a for a in d["grpo"]["arms"] if a["name"] == phase[5:])
            # ``select`` was added after pipeline runs existed: left out at its default (None)
            g = {k: v for k, v in d["grpo"].items() if k != "arms" and not (k == "select" and v is None)}
            return {**common, "grpo": g, "arm": arm}
        if phase == "select":
            return {
                **common,
                "select": d["grpo"]["select"],
                "sampling": self.grpo_sampling(),
                "rows": d["grpo"]["rows"],
            }
        if phase.startswith("eval:"):  # what changes one evaluation, not which evaluations run
            ev = {k: v for k, v in d["eval"].items() if k not in _EVAL_SELECTION}
            return {**common, "eval": ev}
        raise KeyError(phase)
