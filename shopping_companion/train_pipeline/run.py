"""``shopcomp pipeline``: the paper's whole training chain as one resumable command (docs/pipeline.md).

Phases, each in its own directory under ``<runs_dir>/<name>/`` with a ``phase.json`` recording its
identity, inputs, outputs, weight hashes and wall time:

1. ``bench``: reuse ``benchmark.path`` or build one (``shopcomp synth``'s builder) with a train and
   a test split;
2. ``collect``: rejection-sample the teacher on the train split (``shopcomp sft collect``'s code,
   through the OpenAI client; a scripted teacher is served on 127.0.0.1 for it);
3. ``model``: the base policy — ``model.path``, or a nano model built from a config with a
   tokenizer trained on the kept train-split trajectories;
4. ``sft``: export (decontaminated against the test split), a check that LLaMA-Factory tokenizes
   every example exactly as the policy's chat template renders it, LLaMA-Factory training, merge
   (LoRA);
5. ``grpo:<arm>``: GRPO per arm from the SFT weights (TRL on this node; verl on a cluster);
6. ``eval:<model>:<split>``: the same evaluation code for base, SFT and each arm's final
   checkpoint, on the test and the train split, ``trials`` per task (pass^k);
7. the report (``report.md``, ``report.json``, learning curves).

A phase whose ``phase.json`` says done with the same identity is reused; one with another
identity is refused (``--fresh PHASE`` moves it and every later phase aside, never deleting).
One process at a time holds a run directory (a lock on ``<run>/.lock``; a second one stops with
exit status 5).
Hand-offs are proven by content hashes of the weights (:func:`~shopping_companion.llm.weights.weights_sha256`):
GRPO's first rollouts must come from the SFT weights and every evaluation must have loaded the
checkpoint it names; otherwise :class:`~shopping_companion.errors.HandoffError` (exit 3).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from shopping_companion.config import config_hash, dump_yaml
from shopping_companion.errors import ConfigError, DataError, HandoffError, TrainingError
from shopping_companion.llm.teacher import teacher_knows
from shopping_companion.runs import file_sha256, read_json
from shopping_companion.train_pipeline.config import PipelineConfig, TeacherSettings
from shopping_companion.train_pipeline.report import short

__all__ = ["PHASE_FILE", "Pipeline", "phase_order", "ping_teacher"]

PHASE_FILE = "phase.json"
_REPO = Path(__file__).resolve().parents[2]


def phase_order(cfg: PipelineConfig) -> list[str]:
    """Every phase of ``cfg`` in the order they run."""
    arms = (["select"] if cfg.grpo.select is not None else []) + [f"grpo:{a.name}" for a in cfg.grpo.arms]
    models = (["base"] if cfg.eval.include_base else []) + ["sft"] + [a.name for a in cfg.grpo.arms]
    evals = [f"eval:{m}:{s}" for m in models for s in cfg.eval.splits]
    return ["bench", "collect", "model", "sft", *arms, *evals]


def _phase_dir(run_dir: Path, phase: str) -> Path:
    parts = phase.split(":")
    if parts[0] == "grpo":
        return run_dir / "grpo" / parts[1]
    if parts[0] == "eval":
        return run_dir / "eval" / parts[1] / parts[2]
    return run_dir / parts[0]


def _python(spec: str, what: str) -> str:
    for base in (_REPO, Path.cwd()):
        p = (base / spec) if not os.path.isabs(spec) else Path(spec)
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    found = shutil.which(spec)
    if found:
        return found
    raise ConfigError(
        f"python.{what}: {spec!r} is not an executable interpreter (relative paths are taken from the repository "
        f"root and the working directory); install the stack with scripts/install_{what}.sh or point python.{what} "
        "at an interpreter that has it"
    )


def ping_teacher(teacher: TeacherSettings) -> None:
    """Check that an ``openai`` teacher's endpoint answers (``OpenAIBackend.ping``); raises
    :class:`~shopping_companion.errors.BackendError` naming ``teacher.base_url`` when it does not.
    The run (before collection loads its resources) and ``--check`` both ask this."""
    from shopping_companion.assembly.endpoints import check_reachable
    from shopping_companion.llm.openai_backend import OpenAIBackend

    t = teacher
    check_reachable(
        OpenAIBackend(model=str(t.model), base_url=str(t.base_url), api_key_env=t.api_key_env), "teacher.base_url"
    )


class Pipeline:
    """Runs (or checks) the phases of one :class:`PipelineConfig` (module docstring).

    ``console``: where progress lines go (a rich Console or anything with ``print``).
    ``fresh``: phases to recompute (with every phase after them)."""

    def __init__(self, cfg: PipelineConfig, console: Any, fresh: list[str] | None = None) -> None:
        self.cfg = cfg
        self.console = console
        self.run_dir = cfg.run_dir.resolve()
        self.order = phase_order(cfg)
        self.fresh = list(fresh or [])
        unknown = [f for f in self.fresh if f not in self.order and f not in {"grpo", "eval"}]
        if unknown:
            raise ConfigError(f"--fresh: unknown phase(s) {unknown}; phases: {', '.join(self.order)}, grpo, eval")
        self.records: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ bookkeeping
    def say(self, text: str) -> None:
        self.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def _first_fresh(self) -> int | None:
        idx = []
        for f in self.fresh:
            for i, p in enumerate(self.order):
                if p == f or p.startswith(f + ":"):
                    idx.append(i)
        return min(idx) if idx else None

    def _move_aside_fresh(self) -> None:
        start = self._first_fresh()
        if start is None:
            return
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for phase in self.order[start:]:
            d = _phase_dir(self.run_dir, phase)
            if d.exists():
                target = d.with_name(f"{d.name}.stale-{stamp}")
                d.rename(target)
                self.say(f"--fresh: moved {d} aside to {target.name}")
        if any(p.startswith(("grpo:", "eval:")) for p in self.order[start:]):  # checkpoint evaluations (<arm>@<step>)
            for d in sorted((self.run_dir / "eval").glob("*@*")):
                if d.is_dir() and ".stale-" not in d.name:
                    d.rename(d.with_name(f"{d.name}.stale-{stamp}"))
                    self.say(f"--fresh: moved {d} aside")
        for name in ("report.md", "report.json", "curves.png"):
            report = self.run_dir / name
            if report.exists():
                report.rename(report.with_name(f"{name}.stale-{stamp}"))

    def _load(self, phase: str) -> dict[str, Any] | None:
        return read_json(_phase_dir(self.run_dir, phase) / PHASE_FILE)  # None: missing or torn

    def _phase(self, phase: str, inputs: dict[str, Any], body: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        """Run ``body(phase_dir)`` unless a finished record with the same identity exists."""
        from shopping_companion.runs import identity_changes

        identity = {
            "settings": self.cfg.phase_identity(phase.rsplit(":", 1)[0] if phase.startswith("eval:") else phase)
        }
        identity["inputs"] = inputs
        sha = config_hash(identity)
        d = _phase_dir(self.run_dir, phase)
        old = self._load(phase)
        if old is not None and old.get("status") != "refused" and old.get("identity_sha256") != sha:
            changes = identity_changes(old.get("identity"), identity)
            raise ConfigError(
                f"phase {phase}: {d} was made with other settings or inputs ("
                + "; ".join(changes[:6])
                + ("; …" if len(changes) > 6 else "")
                + f"). Rerun with --fresh {phase.split(':')[0]} to recompute it and every later phase (the old "
                "outputs are moved aside), or use another --name"
            )
        if old is not None and old.get("status") == "done":
            self.say(f"[{phase}] reused ({d}, finished {old.get('finished_at', '?')}, {old.get('wall_s', 0):.0f} s)")
            self.records[phase] = old
            return old
        d.mkdir(parents=True, exist_ok=True)
        record = {"phase": phase, "identity": identity, "identity_sha256": sha, "status": "running"}
        (d / PHASE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
        self.say(f"[{phase}] running → {d}")
        t0 = time.perf_counter()
        try:
            outputs = body(d)
        except ConfigError:  # refused before it made anything: a rerun may bring other settings
            record["status"] = "refused"
            (d / PHASE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
            raise
        record.update(
            status="done",
            outputs=outputs,
            wall_s=round(time.perf_counter() - t0, 2),
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        (d / PHASE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str), encoding="utf-8")
        self.say(f"[{phase}] done in {record['wall_s']:.1f} s")
        self.records[phase] = record
        return record

    def _sub(self, cmd: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
        """Run ``cmd`` with its output appended to ``log``; on failure raise naming the log's tail."""
        full_env = {**os.environ, **(env or {})}
        full_env.setdefault("PYTHONPATH", "")
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), full_env["PYTHONPATH"]) if p)
        with log.open("a", encoding="utf-8") as f:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            rc = subprocess.call(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=full_env, cwd=str(log.parent), preexec_fn=_die_with_parent
            )
        if rc != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
            if rc == 2 and "shopping_companion.cli" in cmd:  # our commands exit 2 on a refused config
                raise ConfigError(f"{what} refused its config (exit 2); last lines of {log}:\n" + "\n".join(tail))
            raise TrainingError(f"{what} failed (exit {rc}); last lines of {log}:\n" + "\n".join(tail))

    def _write_config(self) -> None:
        dump_yaml(self.cfg, self.run_dir / "config.yaml", header="shopcomp pipeline: the resolved config")

    # ------------------------------------------------------------------ run
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the run directory (created if missing; :class:`~shopping_companion.errors.RunLockedError`
        when another process holds it) with the ``--fresh`` phases moved aside."""
        from shopping_companion.runs import exclusive

        self.run_dir.mkdir(parents=True, exist_ok=True)
        with exclusive(self.run_dir / ".lock", what="pipeline", option="--name"):
            self._move_aside_fresh()
            yield

    def through_sft(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The phases up to SFT (run or reused), in order: ``(bench, collect, model, sft)`` records.
        Call it inside :meth:`locked`."""
        bench = self.phase_bench()
        collect = self.phase_collect(bench)
        base = self.phase_model(collect)
        return bench, collect, base, self.phase_sft(bench, collect, base)

    def run(self) -> dict[str, Any]:
        """Run every phase, then write the report; returns the report's data."""
        with self.locked():
            if not (self.run_dir / "config.yaml").exists():
                self._write_config()
            t0 = time.perf_counter()
            bench, collect, base, sft = self.through_sft()
            return self._after_sft(bench, collect, base, sft, t0)

    def _after_sft(
        self, bench: dict[str, Any], collect: dict[str, Any], base: dict[str, Any], sft: dict[str, Any], t0: float
    ) -> dict[str, Any]:
        """GRPO arms, evaluations and the report, from the SFT phase's records."""
        from shopping_companion.train_pipeline.report import write_report

        arms = {a.name: self.phase_grpo(a, bench, sft) for a in self.cfg.grpo.arms}
        models: dict[str, dict[str, Any]] = {}
        if self.cfg.eval.include_base:
            models["base"] = base["outputs"]
        models["sft"] = sft["outputs"]
        for name, rec in arms.items():
            if self.cfg.eval.checkpoints == "all":  # every saved checkpoint but the final one, by step
                for c in rec["outputs"].get("checkpoints") or []:
                    if c["path"] != rec["outputs"]["path"]:
                        models[f"{name}@{c['step']}"] = c
            models[name] = rec["outputs"]
        evals = {}
        for m, out in models.items():
            for split in self.cfg.eval.splits:
                evals[(m, split)] = self.phase_eval(m, split, out, bench)
        data = write_report(self, bench, collect, base, sft, arms, evals, time.perf_counter() - t0)
        self._write_config()  # only now: a refused rerun leaves the config of the outputs in place
        self.say(f"report: {self.run_dir / 'report.md'}")
        return data

    # ------------------------------------------------------------------ phases
    def phase_bench(self) -> dict[str, Any]:
        from shopping_companion.assembly.data import benchmark_tasks_sha256
        from shopping_companion.assembly.data import load_benchmark

        given = self.cfg.benchmark.path

        def body(d: Path) -> dict[str, Any]:
            if given:
                path = Path(given).expanduser().resolve()
            else:
                from shopping_companion.benchmark.synth import build_from_data
                from shopping_companion.benchmark.synthesis.config import SynthConfig

                synth = SynthConfig.model_validate(self.cfg.benchmark.synth)
                path = d / "benchmark"
                build_from_data(
                    path,
                    synth,
                    data_dir=self.cfg.data_dir,
                    index_dir=self.cfg.index_dir,
                    sharegpt=synth.sharegpt_share > 0,
                    console=self.console,
                )
            b = load_benchmark(path)
            train = [t for t in b.tasks if t.split == "train"]
            test = [t for t in b.tasks if t.split == "test"]
            if not train or not test:
                raise DataError(
                    f"benchmark {path}: the pipeline needs train and test tasks (has {len(train)} train, "
                    f"{len(test)} test); "
                    + (
                        "benchmark.path must name a benchmark with both splits"
                        if given
                        else "set benchmark.synth.test_fraction between 0 and 1"
                    )
                )
            return {
                "path": str(path),
                "tasks_sha256": benchmark_tasks_sha256(b.tasks),
                "train": len(train),
                "test": len(test),
            }

        inputs: dict[str, Any] = {"path": str(given) if given else None}
        if given:  # a benchmark replaced at the same path is another input
            root = Path(given).expanduser()
            for name in ("tasks.jsonl", "sessions.jsonl"):
                f = root / name
                inputs[f"{name}_sha256"] = file_sha256(f) if f.is_file() else None
        return self._phase("bench", inputs, body)

    def phase_collect(self, bench: dict[str, Any]) -> dict[str, Any]:
        def body(d: Path) -> dict[str, Any]:
            from shopping_companion.config import load_model
            from shopping_companion.sft.collect import collect_with_config
            from shopping_companion.sft.config import CollectConfig

            t = self.cfg.teacher
            with self._teacher(bench) as (base_url, model, key_env):
                cfg = load_model(
                    CollectConfig,
                    None,
                    [],
                    {
                        "bench": {"path": bench["outputs"]["path"]},
                        "out": str(d / "collect"),
                        "backend": {
                            "kind": "openai",
                            "base_url": base_url,
                            "model": model,
                            "api_key_env": key_env,
                            "sampling": {
                                "temperature": self.cfg.collect.temperature,
                                "top_k": 0,
                                "max_tokens": self.cfg.env.max_tokens_per_turn,
                            },
                        },
                        "trials": self.cfg.collect.trials,
                        "concurrency": self.cfg.collect.concurrency,
                        "seed": self.cfg.seed,
                        "env": {"max_turns": self.cfg.env.max_turns},
                        "keep": {"rule": self.cfg.collect.keep, "min_acc": self.cfg.collect.min_acc},
                        "data": {"data_dir": self.cfg.data_dir, "index_dir": self.cfg.index_dir},
                    },
                )
                summary = collect_with_config(cfg, self.console)
            if summary.kept == 0:
                raise TrainingError(
                    f"collect: the teacher succeeded on no train task ({summary.episodes} episodes, Succ "
                    f"{summary.succ_rate:.3f}); nothing to fine-tune on"
                )
            kept = d / "collect" / "kept.jsonl"
            return {
                "dir": str(d / "collect"),
                "teacher": f"scripted teacher served on 127.0.0.1 ({teacher_knows(t.answer_from)}; not a model)"
                if t.kind == "scripted"
                else f"{t.model} at {t.base_url}",
                "episodes": summary.episodes,
                "succ_rate": summary.succ_rate,
                "kept": summary.kept,
                "kept_by_stage": summary.kept_by_stage,
                "kept_sha256": file_sha256(kept),
            }

        return self._phase("collect", {"bench": bench["outputs"]["tasks_sha256"]}, body)

    @contextlib.contextmanager
    def _teacher(self, bench: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
        t = self.cfg.teacher
        if t.kind == "openai":
            ping_teacher(t)  # before collection loads its resources (minutes)
            yield str(t.base_url), str(t.model), t.api_key_env
            return
        from shopping_companion.assembly.data import load_benchmark
        from shopping_companion.llm.policy_server import PolicyServer
        from shopping_companion.llm.teacher import ScriptedTeacher

        tasks = load_benchmark(bench["outputs"]["path"]).tasks
        from shopping_companion.benchmark.synthesis.verify import states_value

        teacher = ScriptedTeacher(
            tasks, **t.scripted_settings(), states=lambda p, text: states_value(p.attribute, p.value, text)
        )
        with PolicyServer(teacher, model="scripted-teacher") as srv:
            self.say(
                f"[collect] scripted teacher ({teacher_knows(t.answer_from)}; not a model) served at {srv.base_url}"
            )
            yield srv.base_url, "scripted-teacher", "SHOPCOMP_SCRIPTED_TEACHER_KEY"

    def phase_model(self, collect: dict[str, Any]) -> dict[str, Any]:
        from shopping_companion.llm.weights import weights_sha256

        m = self.cfg.model

        def body(d: Path) -> dict[str, Any]:
            if m.path:
                path = m.path
                local = Path(path).expanduser()
                looks_local = local.exists() or path.startswith((".", "/", "~"))
                if looks_local and not (local / "config.json").is_file():
                    raise DataError(
                        f"model.path (--model): {path!r} is not a model directory (no config.json); give a local "
                        "checkpoint directory or a hub id"
                    )
                sha = weights_sha256(local) if (local / "config.json").is_file() else None
                return {
                    "path": str(local.resolve()) if local.exists() else path,
                    "weights_sha256": sha,
                    "kind": "given",
                }
            from shopping_companion.sft.collect import read_kept
            from shopping_companion.trainers.nano import build_nano_model, stage_phrases

            texts = []
            for k in read_kept(collect["outputs"]["dir"]):
                texts += [msg.content or "" for msg in k.trajectory.messages if msg.role != "system"]
            out = build_nano_model(d / "base", texts, m.nano, phrases=stage_phrases(self.cfg.env.max_turns))
            return {
                "path": str(out),
                "weights_sha256": weights_sha256(out),
                "kind": "nano",
                "parameters": _n_params(out),
            }

        inputs = {"kept": collect["outputs"]["kept_sha256"]} if not m.path else {"path": m.path}
        return self._phase("model", inputs, body)

    def phase_sft(self, bench: dict[str, Any], collect: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
        from shopping_companion.llm.weights import weights_sha256

        s = self.cfg.sft

        def body(d: Path) -> dict[str, Any]:
            from shopping_companion.assembly.data import load_benchmark
            from shopping_companion.sft.collect import read_kept
            from shopping_companion.sft.examples import step_examples, trajectory_examples
            from shopping_companion.sft.export import export_dataset

            b = load_benchmark(bench["outputs"]["path"])
            kept = read_kept(collect["outputs"]["dir"])
            examples = step_examples(kept)
            left_out = 0
            overrides: dict[str, Any] = {"finetuning_type": s.finetuning, **s.args}
            if s.examples == "trajectory":
                examples, left_out = trajectory_examples(examples)
                overrides["mask_history"] = False
            base_path = base["outputs"]["path"]
            local_base = Path(base_path).is_dir()
            summary = export_dataset(
                examples,
                d / "export",
                test_tasks=[t for t in b.tasks if t.split == "test"],
                train_tasks=[t for t in b.tasks if t.split == "train"],
                sessions=b.sessions,
                template=s.template,
                base_model=base_path,
                overrides=overrides,
                tokenizer=base_path if local_base else None,
                provenance={"collect": collect["outputs"]["dir"], "pipeline": self.cfg.name},
            )
            self.say(
                f"[sft] {summary.examples} {s.examples}-level examples ({left_out} trajectories left out), "
                f"median {summary.lengths.get('median')} tokens"
            )
            sft_py = _python(self.cfg.python.sft, "sft")
            log = d / "sft.log"
            if local_base:  # the hand-off check: LLaMA-Factory's tokens == the chat template's tokens
                self._sub(
                    [
                        sft_py,
                        "-m",
                        "shopping_companion.sft.lf_check",
                        "--model",
                        base_path,
                        "--data",
                        str(summary.data_file),
                        "--template",
                        s.template,
                        "--out",
                        str(d / "lf_check.json"),
                    ],
                    log,
                    "the LLaMA-Factory tokenization check",
                )
            cli = str(Path(sft_py).with_name("llamafactory-cli"))
            self._sub([cli, "train", str(summary.train_yaml)], log, "LLaMA-Factory SFT", env={"WANDB_MODE": "disabled"})
            trained = Path(_yaml(summary.train_yaml)["output_dir"])
            if s.finetuning == "lora":
                self._sub([cli, "export", str(summary.merge_yaml)], log, "merging the LoRA adapter")
                model_dir = Path(_yaml(summary.merge_yaml)["export_dir"])
            else:
                model_dir = trained
            sha = weights_sha256(model_dir)
            if sha == base["outputs"].get("weights_sha256"):
                raise HandoffError(
                    f"sft: the model SFT wrote ({model_dir}) has the base model's weights ({short(sha)}): "
                    "training changed nothing (check learning_rate, the data and LLaMA-Factory's log in "
                    f"{log})"
                )
            check = read_json(d / "lf_check.json")
            return {
                "path": str(model_dir),
                "weights_sha256": sha,
                "examples": summary.examples,
                "export": str(d / "export"),
                "train_loss": (read_json(trained / "train_results.json") or {}).get("train_loss"),
                "lf_check": check,
            }

        inputs = {"kept": collect["outputs"]["kept_sha256"], "base": base["outputs"].get("weights_sha256")}
        return self._phase("sft", inputs, body)

    def phase_select(self, bench: dict[str, Any], sft: dict[str, Any]) -> dict[str, Any]:
        """The ``select`` phase (``grpo.select``): the SFT model plays every train task ``trials``
        times at the GRPO sampling settings (the evaluation code); the ``rows.limit`` tasks whose
        R_z varied most are the ones GRPO trains on (:func:`~shopping_companion.train_pipeline.select.select_by_spread`)."""
        from shopping_companion.train_pipeline.select import select_by_spread

        if "select" in self.records:  # one choice for every arm of this invocation
            return self.records["select"]
        sel = self.cfg.grpo.select
        assert sel is not None
        expected = sft["outputs"]["weights_sha256"]
        sampling = self.cfg.grpo_sampling()

        def body(d: Path) -> dict[str, Any]:
            run_dir, loaded, _ = self._play(
                "select (the SFT model)", sft["outputs"], "train", sel.trials, sampling, bench, d
            )
            chosen = select_by_spread(run_dir / "results.jsonl", int(self.cfg.grpo.rows["limit"]))
            self.say(
                f"[select] GRPO trains on {len(chosen['task_ids'])} of {chosen['candidates']} train tasks "
                f"(R_z varied across {sel.trials} trials in {chosen['stages_with_spread']} of their "
                f"{2 * len(chosen['task_ids'])} stages; {chosen['stages_with_spread_all']} of "
                f"{2 * chosen['candidates']} over all train tasks)"
            )
            if chosen["stages_with_spread"] == 0:
                self.say(
                    f"[select] warning: R_z was the same in all {sel.trials} trials of each of the "
                    f"{chosen['candidates']} train tasks, so the choice is benchmark order and GRPO's groups will "
                    "likely have no reward variance; raise grpo.select.trials or the sampling temperature"
                )
            return {**chosen, "run_dir": str(run_dir), "weights_sha256": loaded}

        return self._phase("select", {"sft": expected, "bench": bench["outputs"]["tasks_sha256"]}, body)

    def phase_grpo(self, arm: Any, bench: dict[str, Any], sft: dict[str, Any]) -> dict[str, Any]:
        g = self.cfg.grpo
        expected = sft["outputs"]["weights_sha256"]
        inputs: dict[str, Any] = {"sft": expected, "bench": bench["outputs"]["tasks_sha256"]}
        task_ids = None
        if g.select is not None:
            task_ids = self.phase_select(bench, sft)["outputs"]["task_ids"]
            inputs["task_ids"] = task_ids

        def body(d: Path) -> dict[str, Any]:
            if g.backend == "verl":
                return self._grpo_verl(arm, bench, sft, d)
            conf = self.cfg.trl_arm_config(
                arm,
                model=sft["outputs"]["path"],
                bench=bench["outputs"]["path"],
                output_dir=str(d / "trl"),
                task_ids=task_ids,
            )
            conf_path = d / "trl.yaml"
            dump_yaml(conf, conf_path, header=f"shopcomp pipeline {self.cfg.name}: GRPO arm {arm.name}")
            rl_py = _python(self.cfg.python.rl, "rl")
            self._sub(
                [rl_py, "-m", "shopping_companion.cli", "grpo", "trl", "--config", str(conf_path)],
                d / "grpo.log",
                f"GRPO arm {arm.name}",
                env={"TRL_EXPERIMENTAL_SILENCE": "1"},
            )
            summary = read_json(d / "trl" / "summary.json") or {}
            first = summary.get("first_rollout_weights_sha256")
            if first != expected:
                raise HandoffError(
                    f"grpo arm {arm.name}: its first rollouts sampled from weights {short(first)} (model "
                    f"{summary.get('model')}), not the SFT model's {short(expected)} ({sft['outputs']['path']}); "
                    "the SFT → RL hand-off is broken"
                )
            ckpts = summary.get("checkpoints") or []
            if not ckpts:
                raise TrainingError(f"grpo arm {arm.name}: no checkpoint was written ({d / 'trl'})")
            final = ckpts[-1]
            sha = (summary.get("checkpoint_weights_sha256") or {}).get(final)
            return {
                "path": final,
                "checkpoints": [
                    {
                        "path": c,
                        "step": int(c.rsplit("-", 1)[-1]),
                        "weights_sha256": (summary.get("checkpoint_weights_sha256") or {}).get(c),
                    }
                    for c in ckpts
                ],
                "weights_sha256": sha,
                "steps": summary.get("steps"),
                "dir": str(d / "trl"),
                "initial_weights_sha256": summary.get("initial_weights_sha256"),
                "first_rollout_weights_sha256": first,
                "zero_std_groups": summary.get("zero_std_groups"),
                "wall_s": summary.get("wall_s"),
            }

        return self._phase(f"grpo:{arm.name}", inputs, body)

    def _grpo_verl(self, arm: Any, bench: dict[str, Any], sft: dict[str, Any], d: Path) -> dict[str, Any]:
        """verl on a Ray cluster: prepare the rows, then ``shopcomp grpo launch`` (needs GPUs)."""
        rl_py = _python(self.cfg.python.rl, "rl")
        rows = d / "rows"
        self._sub(
            [
                rl_py,
                "-m",
                "shopping_companion.cli",
                "grpo",
                "prepare",
                "--bench",
                bench["outputs"]["path"],
                "--out",
                str(rows),
                "--reward-config",
                arm.reward_config if isinstance(arm.reward_config, str) else json.dumps(arm.reward_config),
            ],
            d / "grpo.log",
            "grpo prepare",
        )
        variant = "outcome_only" if arm.reward_config == "outcome_only" else "outcome_tool"
        cmd = [
            rl_py,
            "-m",
            "shopping_companion.cli",
            "grpo",
            "launch",
            "--variant",
            variant,
            "--model",
            sft["outputs"]["path"],
            "--rows-dir",
            str(rows),
            f"trainer.experiment_name={self.cfg.name}-{arm.name}",
            f"trainer.default_local_dir={d / 'checkpoints'}",
            *self.cfg.grpo.verl,
        ]
        self._sub(cmd + ["--check"], d / "grpo.log", f"grpo launch --check ({arm.name})")
        self._sub(cmd, d / "grpo.log", f"verl GRPO arm {arm.name}")
        steps = sorted(
            (p for p in (d / "checkpoints").glob("global_step_*") if p.is_dir()),
            key=lambda p: int(p.name.split("_")[-1]),
        )
        if not steps:
            raise TrainingError(f"grpo arm {arm.name}: verl wrote no checkpoint under {d / 'checkpoints'}")
        merged = d / "merged"
        self._sub(
            [
                rl_py,
                "-m",
                "verl.model_merger",
                "merge",
                "--backend",
                "fsdp",
                "--local_dir",
                str(steps[-1] / "actor"),
                "--target_dir",
                str(merged),
            ],
            d / "grpo.log",
            "verl model merger",
        )
        from shopping_companion.llm.weights import weights_sha256

        return {
            "path": str(merged),
            "weights_sha256": weights_sha256(merged),
            "steps": int(steps[-1].name.split("_")[-1]),
        }

    def _play(
        self,
        what: str,
        out: dict[str, Any],
        split: str,
        trials: int,
        sampling: dict[str, Any],
        bench: dict[str, Any],
        d: Path,
    ) -> tuple[Path, str | None, Any]:
        """Play the checkpoint ``out`` (``path``, ``weights_sha256``) on ``split`` with the
        evaluation code (``shopcomp eval``), ``trials`` episodes per task, into ``d/run``; returns
        ``(run_dir, weights_sha256 it loaded, the run's outcome)``. Raises :class:`HandoffError`
        (naming ``what``) when the loaded weights are not the checkpoint's."""
        from shopping_companion.benchmark.run import run_benchmark
        from shopping_companion.benchmark.run_config import EvalConfig

        e = self.cfg.eval
        cfg = EvalConfig.model_validate(
            {
                "bench": {"path": bench["outputs"]["path"], "split": split},
                "output": {"name": "run", "runs_dir": str(d)},
                "backend": {
                    "kind": "local",
                    "model_path": out["path"],
                    "device": e.device,
                    "batch_size": e.concurrency,
                    "sampling": {**sampling, "max_tokens": self.cfg.env.max_tokens_per_turn},
                },
                "trials": trials,
                "pass_k": [k for k in e.pass_k if k <= trials] or [1],
                "seed": self.cfg.seed,
                "concurrency": e.concurrency,
                "env": {"max_turns": self.cfg.env.max_turns},
                "data": {"data_dir": self.cfg.data_dir, "index_dir": self.cfg.index_dir},
            }
        )
        outcome = run_benchmark(cfg, self.console, progress=False)
        run_dir = d / "run"
        loaded = ((read_json(run_dir / "summary.json") or {}).get("meta") or {}).get("weights_sha256")
        expected = out.get("weights_sha256")
        if expected and loaded != expected:
            raise HandoffError(
                f"{what}: the evaluation loaded weights {short(loaded)} from {out['path']}, but the checkpoint "
                f"is {short(expected)}: it played another model than it names"
            )
        return run_dir, loaded, outcome

    def phase_eval(self, model: str, split: str, out: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
        e = self.cfg.eval
        expected = out.get("weights_sha256")

        def body(d: Path) -> dict[str, Any]:
            sampling = {"temperature": e.temperature, "top_p": e.top_p, "top_k": 0}
            run_dir, loaded, outcome = self._play(f"eval {model} ({split})", out, split, e.trials, sampling, bench, d)
            return {
                "run_dir": str(run_dir),
                "results": str(run_dir / "results.jsonl"),
                "weights_sha256": loaded,
                "episodes": getattr(outcome, "n_results", None),
            }

        return self._phase(
            f"eval:{model}:{split}", {"model": expected, "bench": bench["outputs"]["tasks_sha256"]}, body
        )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when the pipeline process dies, even by SIGKILL, so no orphaned
    trainer keeps writing into a phase directory another run may take over."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def _n_params(path: Path) -> int | None:
    cfg = read_json(Path(path) / "config.json") or {}
    try:
        h, i, n, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
        q = cfg["num_attention_heads"] * cfg["head_dim"]
        kv = cfg["num_key_value_heads"] * cfg["head_dim"]
        return v * h + n * (h * q * 2 + h * kv * 2 + 3 * h * i + 2 * h + 2 * cfg["head_dim"]) + h
    except (KeyError, TypeError):
        return None


if __name__ == "__main__":  # pragma: no cover - run through `shopcomp pipeline`
    sys.exit("use: shopcomp pipeline --config configs/pipeline/<name>.yaml")
