"""``shopcomp pipeline --check``: everything that can be checked before a GPU is needed.

It validates every phase's settings with the code that will use them (SynthConfig, CollectConfig,
the LLaMA-Factory training config by LLaMA-Factory's own argument parser in its environment,
``shopcomp grpo trl``'s config and reward spec, ``shopcomp grpo launch --check`` for verl arms,
EvalConfig), checks the interpreters of the training stacks and a teacher endpoint, and prints
one line per check. Problems are collected and raised together as one
:class:`~shopping_companion.errors.ConfigError` (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopping_companion.errors import ConfigError
from shopping_companion.train_pipeline.config import PipelineConfig

__all__ = ["check_pipeline"]


#: ``_run``'s status for a command that did not finish in time (not a refusal: not checked).
_TIMED_OUT = 124


def _run(cmd: list[str], timeout: float = 600) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return _TIMED_OUT, f"not checked: no answer within {timeout:g} s (a busy machine?); rerun --check"
    except OSError as e:
        return 1, str(e)
    return p.returncode, (p.stdout + p.stderr)[-2000:]


def _lf_parse(python: str, lf: dict[str, Any]) -> tuple[int, str]:
    """Parse a LLaMA-Factory training config with LLaMA-Factory's own ``get_train_args``."""
    with tempfile.TemporaryDirectory() as tmp:
        conf = {**lf, "output_dir": str(Path(tmp) / "out"), "dataset_dir": tmp}
        path = Path(tmp) / "train.json"
        path.write_text(json.dumps(conf), encoding="utf-8")
        code = "import json,sys; from llamafactory.hparams import get_train_args; get_train_args(json.load(open(sys.argv[1])))"
        return _run([python, "-c", code, str(path)], 300)


def _check_benchmark(cfg: PipelineConfig, good: Callable[[str], None], bad: Callable[[str], None]) -> str | None:
    """The benchmark (train and test tasks) or the synthesis settings and data directory; returns the benchmark path, if one is given and loads."""
    # benchmark
    bench_path = None
    if cfg.benchmark.path:
        from shopping_companion.assembly.data import load_benchmark

        try:
            b = load_benchmark(cfg.benchmark.path)
            bench_path = cfg.benchmark.path
            n_train = sum(t.split == "train" for t in b.tasks)
            n_test = len(b.tasks) - n_train
            if n_train and n_test:
                good(f"benchmark.path: {n_train} train / {n_test} test tasks")
            else:
                bad(f"benchmark.path: the pipeline needs train and test tasks; it has {n_train} train, {n_test} test")
        except Exception as e:  # noqa: BLE001 - reported as a problem
            bad(f"benchmark.path: {e}")
    else:
        from shopping_companion.benchmark.synthesis.config import SynthConfig
        from shopping_companion.paths import resolve_data_dir

        try:
            s = SynthConfig.model_validate(cfg.benchmark.synth)
            if 0 < s.test_fraction < 1:
                good(f"benchmark.synth: {s.n_tasks} tasks, test_fraction {s.test_fraction}")
            else:
                bad(
                    f"benchmark.synth.test_fraction: must be between 0 and 1 for a train and a test split; got {s.test_fraction}"
                )
        except ValueError as e:
            bad(f"benchmark.synth: {' '.join(str(e).split())[:300]}")
        try:
            good(f"data: {resolve_data_dir(cfg.data_dir)}")
        except Exception as e:  # noqa: BLE001
            bad(f"data_dir: {e}")
    return bench_path


def _check_teacher(cfg: PipelineConfig, good: Callable[[str], None], bad: Callable[[str], None]) -> None:
    """An OpenAI-compatible teacher answers a ping (the scripted one needs no check)."""
    t = cfg.teacher
    if t.kind == "openai":
        from shopping_companion.train_pipeline.run import ping_teacher

        try:
            ping_teacher(t)
            good(f"teacher: {t.model} answers at {t.base_url}")
        except Exception as e:  # noqa: BLE001 - a check reports every failure, it does not stop
            bad(" ".join(str(e).split())[:300])
    else:
        good("teacher: scripted (served on 127.0.0.1 during collection)")


def _check_collect(
    cfg: PipelineConfig, bench_path: str | None, good: Callable[[str], None], bad: Callable[[str], None]
) -> None:
    """The collection settings make a valid :class:`~shopping_companion.sft.config.CollectConfig`."""
    from shopping_companion.config import load_model

    # collect config
    from shopping_companion.sft.config import CollectConfig

    try:
        load_model(
            CollectConfig,
            None,
            [],
            {
                "bench": {"path": bench_path or "BENCH"},
                "backend": {"kind": "openai", "model": "teacher", "base_url": "http://127.0.0.1:1/v1"},
                "trials": cfg.collect.trials,
                "keep": {"rule": cfg.collect.keep},
                "env": {"max_turns": cfg.env.max_turns},
            },
        )
        good(f"collect: {cfg.collect.trials} trials per train task, keep {cfg.collect.keep}")
    except ConfigError as e:
        bad(f"collect: {e}")


def _check_interpreters(cfg: PipelineConfig, good: Callable[[str], None], bad: Callable[[str], None]) -> dict[str, str]:
    """The SFT and RL interpreters import LLaMA-Factory and TRL or verl; returns ``{'sft'|'rl': python}`` of those that do."""
    from shopping_companion.train_pipeline.run import _python

    # interpreters
    pys: dict[str, str] = {}
    for what, module in (("sft", "llamafactory"), ("rl", "trl" if cfg.grpo.backend == "trl" else "verl")):
        try:
            py = _python(getattr(cfg.python, what), what)
        except ConfigError as e:
            bad(str(e))
            continue
        rc, out = _run([py, "-c", f"import {module}, shopping_companion; print({module}.__version__)"], 300)
        if rc == 0:
            pys[what] = py
            good(f"python.{what}: {py} has {module} {out.strip().splitlines()[-1]}")
        elif rc == _TIMED_OUT:
            bad(f"python.{what}: importing {module} with {py}: {out}")
        else:
            bad(f"python.{what}: {py} cannot import {module} ({out.strip().splitlines()[-1] if out.strip() else rc})")
    return pys


def _check_model(cfg: PipelineConfig, good: Callable[[str], None], bad: Callable[[str], None]) -> int | None:
    """The model directory (or hub id, or the nano model); returns its context length when known."""
    # model and context
    ctx = None
    if cfg.model.path:
        p = Path(cfg.model.path).expanduser()
        if (p / "config.json").is_file():
            ctx = json.loads((p / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
            good(f"model.path: {p} (context {ctx})")
        elif p.exists() or cfg.model.path.startswith((".", "/", "~")):
            bad(f"model.path: {cfg.model.path} is not a model directory (no config.json)")
        else:
            good(f"model.path: {cfg.model.path} (a hub id: it must be in the local cache of the training machines)")
    else:
        ctx = cfg.model.nano.max_position_embeddings
        good(
            f"model: nano ({cfg.model.nano.num_hidden_layers} layers, hidden {cfg.model.nano.hidden_size}, context {ctx})"
        )
    return ctx


def _check_sft(
    cfg: PipelineConfig, pys: dict[str, str], good: Callable[[str], None], bad: Callable[[str], None]
) -> None:
    """The SFT learning rate, and the training config through LLaMA-Factory's own parser (with its interpreter)."""
    # SFT config through LLaMA-Factory's own parser
    from shopping_companion.sft.export import paper_train_config

    lr = cfg.sft.args.get("learning_rate")
    if lr is not None and not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0):
        bad(f"sft.args.learning_rate: must be a number > 0; got {lr!r}")
    try:
        lf = paper_train_config(base_model=cfg.model.path or "MODEL", template=cfg.sft.template)
        lf.update({"finetuning_type": cfg.sft.finetuning, **cfg.sft.args})
        if cfg.sft.examples == "trajectory":
            lf["mask_history"] = False
        if "sft" in pys:
            rc, out = _lf_parse(pys["sft"], lf)
            gpu_note = ""
            if rc != 0 and "gpu" in out.lower():  # the config needs a GPU: check the rest with the CPU switches
                rc, out = _lf_parse(pys["sft"], {**lf, "use_cpu": True, "bf16": False, "fp16": False})
                gpu_note = "; it needs a GPU (bf16), so it was parsed here with use_cpu=true, bf16=false"
            if rc == _TIMED_OUT:
                bad(f"sft.args: LLaMA-Factory's parse of the training config: {out}")
            elif rc == 0:
                good(
                    f"sft: LLaMA-Factory accepts the training config ({cfg.sft.finetuning}, {cfg.sft.template}){gpu_note}"
                )
            else:
                bad(
                    f"sft.args: LLaMA-Factory refuses the training config: {out.strip().splitlines()[-1] if out.strip() else rc}"
                )
    except ConfigError as e:
        bad(f"sft: {e}")


def _check_grpo(
    cfg: PipelineConfig,
    ctx: int | None,
    pys: dict[str, str],
    bench_path: str | None,
    good: Callable[[str], None],
    bad: Callable[[str], None],
) -> None:
    """Each GRPO arm's reward spec and TRL config (room for the prompt in ``ctx``), or verl's ``grpo launch --check``."""
    # GRPO arms
    from shopping_companion.assembly.reward_spec import load_reward_spec

    for arm in cfg.grpo.arms:
        try:
            load_reward_spec(arm.reward_config).build_rubric()
        except Exception as e:  # noqa: BLE001
            bad(f"grpo.arms[{arm.name}].reward_config: {e}")
            continue
        if cfg.grpo.backend == "trl":
            from shopping_companion.trainers.trl_train import TrlGrpoConfig

            try:
                conf = TrlGrpoConfig.model_validate(
                    {
                        "model": "MODEL",
                        "bench": "BENCH",
                        "reward_config": arm.reward_config,
                        "rows": {"split": "train", **cfg.grpo.rows},
                        "trainer": {**cfg.grpo.trainer, **arm.trainer},
                        "env": {"max_turns": cfg.env.max_turns, "max_tokens_per_turn": cfg.env.max_tokens_per_turn},
                        "lora": cfg.grpo.lora,
                        "guards": cfg.grpo.guards,
                    }
                )
                need = conf.trainer.max_completion_length
                if ctx and need >= ctx:
                    bad(
                        f"grpo.trainer.max_completion_length: {need} response tokens leave no room for the prompt in "
                        f"the model's context of {ctx} (max_position_embeddings)"
                    )
                else:
                    good(f"grpo {arm.name}: TRL config and reward spec ({arm.reward_config})")
            except ValueError as e:
                bad(f"grpo {arm.name}: {' '.join(str(e).split())[:300]}")
        else:
            good(f"grpo {arm.name}: reward spec ({arm.reward_config}); verl launch --check runs in the grpo phase")
    if cfg.grpo.backend == "verl" and "rl" in pys and bench_path:
        rc, out = _run(
            [
                pys["rl"],
                "-m",
                "shopping_companion.cli",
                "grpo",
                "launch",
                "--variant",
                "outcome_tool",
                "--model",
                cfg.model.path or "Qwen/Qwen3-4B",
                "--rows-dir",
                str(Path(bench_path) / "grpo_rows"),
                "--check",
                *cfg.grpo.verl,
            ]
        )
        (good if rc == 0 else bad)(f"grpo launch --check: {out.strip().splitlines()[-1] if out.strip() else rc}")


def _check_eval(
    cfg: PipelineConfig, bench_path: str | None, good: Callable[[str], None], bad: Callable[[str], None]
) -> None:
    """The evaluation settings make a valid :class:`~shopping_companion.benchmark.run_config.EvalConfig`."""
    # evaluation
    from shopping_companion.benchmark.run_config import EvalConfig

    try:
        EvalConfig.model_validate(
            {
                "bench": {"path": bench_path or "BENCH"},
                "output": {"name": "check"},
                "backend": {"kind": "local", "model_path": "MODEL", "device": cfg.eval.device},
                "trials": cfg.eval.trials,
                "pass_k": cfg.eval.pass_k,
            }
        )
        good(f"eval: splits {cfg.eval.splits}, {cfg.eval.trials} trials, pass^k for k in {cfg.eval.pass_k}")
    except ValueError as e:
        bad(f"eval: {' '.join(str(e).split())[:300]}")


def check_pipeline(cfg: PipelineConfig, console: Any) -> list[str]:
    """Check ``cfg`` (module docstring); returns the lines printed. Raises :class:`ConfigError`
    listing every problem."""
    from shopping_companion.train_pipeline.run import phase_order

    ok: list[str] = []
    problems: list[str] = []

    def good(line: str) -> None:
        ok.append(line)
        console.print(f"ok   {line}", soft_wrap=True, markup=False, highlight=False)

    def bad(line: str) -> None:
        problems.append(line)
        console.print(f"FAIL {line}", soft_wrap=True, markup=False, highlight=False)

    good(f"config: phases {', '.join(phase_order(cfg))}")
    bench_path = _check_benchmark(cfg, good, bad)
    _check_teacher(cfg, good, bad)
    _check_collect(cfg, bench_path, good, bad)
    pys = _check_interpreters(cfg, good, bad)
    ctx = _check_model(cfg, good, bad)
    _check_sft(cfg, pys, good, bad)
    _check_grpo(cfg, ctx, pys, bench_path, good, bad)
    _check_eval(cfg, bench_path, good, bad)
    if problems:
        raise ConfigError(f"pipeline --check: {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    console.print(f"pipeline --check: {len(ok)} checks passed", soft_wrap=True, markup=False)
    return ok
