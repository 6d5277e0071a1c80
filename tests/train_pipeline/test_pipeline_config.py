"""`shopcomp pipeline`'s config and its phase bookkeeping (train_pipeline/config.py, run.py):
bad settings are refused naming the field, a finished phase is reused, a phase made with other
settings is refused, --fresh moves phases aside instead of deleting them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from shopping_companion.config import load_model
from shopping_companion.errors import ConfigError
from shopping_companion.train_pipeline.config import PipelineConfig
from shopping_companion.train_pipeline.run import Pipeline, phase_order

ROOT = Path(__file__).resolve().parents[2]


SELECT = "grpo.select={by: spread, trials: 4}"


def _cfg(tmp_path: Path, **sets: object) -> PipelineConfig:
    flags = {"runs_dir": str(tmp_path), **sets}
    return load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [], flags)


def test_shipped_configs_load_and_name_every_phase(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    assert phase_order(cfg)[:6] == ["bench", "collect", "model", "sft", "grpo:outcome_only", "grpo:outcome_tool"]
    assert len(phase_order(cfg)) == 6 + 4 * 2
    chosen = load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [SELECT], {})
    assert phase_order(chosen)[3:6] == ["sft", "select", "grpo:outcome_only"]
    paper = load_model(PipelineConfig, ROOT / "configs/pipeline/paper.yaml")
    assert paper.grpo.backend == "verl" and paper.sft.finetuning == "lora" and paper.model.path


def test_a_teacher_key_added_later_keeps_older_runs_identity_at_its_default() -> None:
    """``teacher.p_attribute_queries`` came after pipeline runs existed: at its default (0) the
    collect identity is what it was before the key (no such key), away from it the phase changes."""
    base = load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [], {})
    assert "p_attribute_queries" not in base.phase_identity("collect")["teacher"]
    assert base.phase_identity("collect")["teacher"]["p_stray"] == base.teacher.p_stray
    other = load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", ["teacher.p_attribute_queries=0.5"], {})
    assert other.phase_identity("collect")["teacher"]["p_attribute_queries"] == 0.5
    assert other.phase_identity("collect") != base.phase_identity("collect")


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["grpo.trainer_typo=1"], "grpo.trainer_typo"),
        (["eval.pass_k=[1, 4]"], "pass_k"),
        (["teacher.kind=openai"], "teacher.model"),
        (["grpo.arms=[{name: a}, {name: a}]"], "distinct"),
        (["grpo.arms=[{name: 'a/b'}]"], "directory name"),
        (["sft.finetuning=partial"], "sft.finetuning"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(tmp_path: Path, sets: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", sets)


def test_a_phase_is_reused_refused_or_moved_aside(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, name="t")
    out = io.StringIO()
    pipe = Pipeline(cfg, Console(file=out, width=200))
    calls: list[Path] = []

    def body(d: Path) -> dict:
        calls.append(d)
        (d / "made.txt").write_text("x")
        return {"path": str(d / "made.txt")}

    first = pipe._phase("bench", {"path": None}, body)
    assert first["status"] == "done" and len(calls) == 1
    again = Pipeline(cfg, Console(file=out, width=200))._phase("bench", {"path": None}, body)
    assert len(calls) == 1 and again["outputs"] == first["outputs"] and "reused" in out.getvalue()
    with pytest.raises(ConfigError, match=r"phase bench: .* --fresh bench"):
        Pipeline(cfg, Console(file=out, width=200))._phase("bench", {"path": "/elsewhere"}, body)
    fresh = Pipeline(cfg, Console(file=out, width=200), fresh=["bench"])
    fresh._move_aside_fresh()
    stale = [p for p in (tmp_path / "t").iterdir() if p.name.startswith("bench.stale-")]
    assert len(stale) == 1 and (stale[0] / "made.txt").read_text() == "x"  # moved, not deleted
    assert json.loads((stale[0] / "phase.json").read_text())["status"] == "done"
    with pytest.raises(ConfigError, match="unknown phase"):
        Pipeline(cfg, Console(file=out, width=200), fresh=["nope"])


def test_one_process_holds_a_run_directory(tmp_path: Path) -> None:
    from shopping_companion.errors import RunLockedError
    from shopping_companion.runs import exclusive

    cfg = _cfg(tmp_path, name="locked")
    (tmp_path / "locked").mkdir()
    with exclusive(tmp_path / "locked" / ".lock"):
        with pytest.raises(RunLockedError, match="another running pipeline"):
            Pipeline(cfg, Console(file=io.StringIO())).run()


def test_grpo_step_logs_follow_the_checkpoint_a_run_restarts_from(tmp_path: Path) -> None:
    from shopping_companion.trainers.trl_train import _align_step_logs

    out = tmp_path / "trl"
    out.mkdir()
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    (out / "rollouts.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 0, 1, 1, 2, 2)))
    _align_step_logs(out, out / "checkpoint-2")  # steps 1-2 are in the checkpoint; step 3 is redone
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert [json.loads(x)["step"] for x in (out / "rollouts.jsonl").read_text().splitlines()] == [0, 0, 1, 1]
    stale = sorted(p.name for p in out.iterdir() if ".stale-" in p.name)
    assert len(stale) == 2  # the files as they were, kept
    _align_step_logs(out, None)  # a fresh start: nothing of the old run stays live
    assert (out / "metrics.jsonl").read_text() == "" and (out / "rollouts.jsonl").read_text() == ""


@pytest.mark.parametrize("name", ["sft", "base", "..", ".", "a@1"])
def test_arm_names_cannot_collide_or_leave_the_run(name: str) -> None:
    with pytest.raises(ConfigError, match="grpo.arms"):
        load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [f"grpo.arms=[{{name: '{name}'}}]"])


def test_grpo_select_added_later_keeps_older_arms_identity_when_off() -> None:
    """``grpo.select`` came after pipeline runs existed: off (null, the shipped value) an arm's
    identity has no such key, as before; the select phase's identity holds the arms' sampling."""
    shipped = load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [], {})
    assert shipped.grpo.select is None
    assert "select" not in shipped.phase_identity("grpo:outcome_only")["grpo"]
    chosen = load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [SELECT], {})
    assert chosen.phase_identity("grpo:outcome_only")["grpo"]["select"] == {"by": "spread", "trials": 4}
    assert chosen.phase_identity("select")["sampling"] == {"temperature": 1.0, "top_p": 0.95, "top_k": 20}
    hotter = load_model(
        PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [SELECT, "grpo.trainer.temperature=1.2"], {}
    )
    assert hotter.phase_identity("select") != chosen.phase_identity("select")
    with pytest.raises(ConfigError, match="grpo.select needs backend trl"):
        load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [SELECT, "grpo.backend=verl"], {})


def test_eval_identity_holds_what_changes_an_evaluation_not_which_ones_run() -> None:
    """Which evaluations run (splits and their order, include_base, checkpoints) leaves the
    evaluations already made reusable (bench_learning after the pipeline); sampling settings do not."""
    base = load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", [], {})
    ident = base.phase_identity("eval:sft")
    for sets in (["eval.splits=[train, test]"], ["eval.include_base=false"], ["eval.checkpoints=all"]):
        assert (
            load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", sets, {}).phase_identity("eval:sft")
            == ident
        ), sets
    for sets in (["eval.temperature=0.9"], ["eval.trials=3"], ["seed=1"]):
        assert (
            load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", sets, {}).phase_identity("eval:sft")
            != ident
        ), sets


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["grpo.trainer={max_stepz: 2}"], "trainer.max_stepz"),
        (["grpo.arms=[{name: a, reward_config: outcom_only}]"], "outcom_only"),
        (["grpo.extra={trainer.max_stepz: 2}"], "trainer.max_stepz"),
        (["grpo.rows={limit: 0}"], "rows.limit"),
        ([SELECT, "grpo.rows={stages: [1, 2]}"], "grpo.select needs grpo.rows.limit"),
        ([SELECT, "grpo.rows.task_ids=[sc-0-00001]"], "set one of them"),
        (["grpo.select={by: spread, trials: 1}"], "grpo.select.trials"),
        (["grpo.select={by: mean}"], "grpo.select.by"),
    ],
)
def test_grpo_arm_settings_are_checked_when_the_config_loads(tmp_path: Path, sets: list[str], needle: str) -> None:
    """A typo in a GRPO setting fails at load (exit 2), not after SFT."""
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")) as e:
        load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", sets, {"runs_dir": str(tmp_path)})
    assert e.value.exit_code == 2


def test_a_phase_refused_before_making_anything_reruns_with_other_settings(tmp_path: Path) -> None:
    """A phase whose body refused its config (a child exiting 2) made nothing: the rerun with
    corrected settings runs it instead of demanding --fresh."""
    cfg = _cfg(tmp_path, name="t")
    out = io.StringIO()

    def refuse(d: Path) -> dict:
        raise ConfigError("trainer.max_stepz: not a field")

    with pytest.raises(ConfigError, match="max_stepz"):
        Pipeline(cfg, Console(file=out, width=200))._phase("bench", {"path": "/typo"}, refuse)
    assert json.loads((tmp_path / "t" / "bench" / "phase.json").read_text())["status"] == "refused"
    done = Pipeline(cfg, Console(file=out, width=200))._phase("bench", {"path": "/fixed"}, lambda d: {"ok": 1})
    assert done["status"] == "done" and done["outputs"] == {"ok": 1}


def _fixture_bench(src: str, dst: Path) -> None:
    """A benchmark directory from a test fixture's tasks and sessions, split train/test."""
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tests/fixtures" / src / "sessions.jsonl", dst / "sessions.jsonl")
    lines = (ROOT / "tests/fixtures" / src / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    tasks = [{**json.loads(line), "split": "train" if i % 2 else "test"} for i, line in enumerate(lines)]
    (dst / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    (dst / "manifest.json").write_text(json.dumps({"note": "fixture"}), encoding="utf-8")


def test_a_benchmark_replaced_at_its_path_is_not_reused(tmp_path: Path) -> None:
    """benchmark.path names a directory whose contents changed: the bench phase (and so every
    phase keyed on its tasks hash) is refused, not reused with the old hash."""
    import shutil

    b = tmp_path / "mybench"
    _fixture_bench("judge_validity", b)
    cfg = load_model(
        PipelineConfig,
        ROOT / "configs/pipeline/cpu_nano.yaml",
        [f"benchmark.path={b}"],
        {"runs_dir": str(tmp_path / "runs"), "name": "r"},
    )
    out = io.StringIO()
    first = Pipeline(cfg, Console(file=out, width=200)).phase_bench()
    assert Pipeline(cfg, Console(file=out, width=200)).phase_bench()["outputs"] == first["outputs"]  # reused
    shutil.rmtree(b)
    _fixture_bench("judge_validity_people", b)
    with pytest.raises(ConfigError, match=r"phase bench: .*tasks\.jsonl_sha256"):
        Pipeline(cfg, Console(file=out, width=200)).phase_bench()


def test_a_teacher_endpoint_that_does_not_answer_is_named_before_collection_loads(tmp_path: Path) -> None:
    """teacher.kind openai with nothing listening: the collect phase stops at once with the
    setting's name (exit 4), before minutes of loading the catalog and the memory index."""
    import socket

    from shopping_companion.errors import BackendError

    with socket.socket() as s:  # a free port on 127.0.0.1 with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = load_model(
        PipelineConfig,
        ROOT / "configs/pipeline/cpu_nano.yaml",
        ["teacher.kind=openai", "teacher.model=x", f"teacher.base_url=http://127.0.0.1:{port}/v1"],
        {"runs_dir": str(tmp_path), "name": "t"},
    )
    bench = {"outputs": {"path": str(tmp_path / "no-bench"), "tasks_sha256": "0" * 16}}
    with pytest.raises(BackendError, match=rf"teacher\.base_url: .*127\.0\.0\.1:{port}") as e:
        Pipeline(cfg, Console(file=io.StringIO(), width=200)).phase_collect(bench)
    assert e.value.exit_code == 4
    from shopping_companion.train_pipeline.check import _check_teacher

    good: list[str] = []
    bad: list[str] = []
    _check_teacher(cfg, good.append, bad.append)  # --check asks the same ping_teacher
    assert not good and bad == [" ".join(str(e.value).split())[:300]]


def test_trl_trainer_settings_are_refused_with_the_verl_backend() -> None:
    """verl reads only grpo.verl: TRL settings under grpo.trainer would be dropped without a word."""
    with pytest.raises(
        ConfigError, match=r"grpo\.trainer and grpo\.arms\[\]\.trainer are TRL settings.*processed_logprobs"
    ):
        load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", ["grpo.backend=verl"], {})
    paper = load_model(PipelineConfig, ROOT / "configs/pipeline/paper.yaml", [], {})
    assert paper.grpo.backend == "verl" and not paper.grpo.trainer


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["grpo.trainer.bogus=1"], "trainer.bogus: unknown field; allowed: beta"),
        (["grpo.trainer.max_steps=-3"], "trainer.max_steps: Input should be greater than or equal to 1, got -3"),
        (["grpo.trainer.num_generations=3"], "must be a multiple of trainer.num_generations (3)"),
        # cpu_nano warms up over 4 steps: a 2-step run would end before its learning rate is reached
        (["grpo.trainer.max_steps=2"], "trainer.extra_args.warmup_steps (4) must be below trainer.max_steps (2)"),
        (["grpo.trainer.extra_args={warmup_ratio: 1.5}"], "trainer.extra_args.warmup_ratio must be in [0, 1); got 1.5"),
        # every form TRL would take as 4 steps, or fail on only after the run had loaded everything
        (["grpo.trainer.max_steps=2", "grpo.trainer.extra_args={warmup_steps: 4.0}"], "warmup_steps (4) must be below"),
        (["grpo.trainer.extra_args={warmup_steps: '4'}"], "warmup_steps must be a finite number >= 0; got '4'"),
        (["grpo.trainer.extra_args={warmup_steps: -1}"], "warmup_steps must be a finite number >= 0; got -1"),
        (["grpo.trainer.extra_args={warmup_steps: true}"], "warmup_steps must be a finite number >= 0; got True"),
        (["grpo.trainer.extra_args={warmup_steps: [4]}"], "warmup_steps must be a finite number >= 0; got [4]"),
        (["grpo.trainer.extra_args={warmup_steps: .inf}"], "warmup_steps must be a finite number >= 0; got inf"),
        (["grpo.trainer.extra_args={warmup_ratio: '0.5'}"], "warmup_ratio must be a finite number >= 0; got '0.5'"),
        (["grpo.trainer.extra_args={warmup_ratio: .nan}"], "warmup_ratio must be a finite number >= 0; got nan"),
    ],
)
def test_an_arms_trl_settings_are_named_like_every_other_field(sets: list[str], needle: str) -> None:
    """The arm's TRL config errors read as the rest of the config's: allowed keys, the value
    given, and no pydantic "Value error," prefix (break test)."""
    with pytest.raises(ConfigError) as e:
        load_model(PipelineConfig, ROOT / "configs/pipeline/cpu_nano.yaml", sets, {})
    text = " ".join(str(e.value).split())
    assert needle in text and "Value error" not in text


def test_a_short_run_with_a_warmup_that_fits_is_accepted() -> None:
    cfg = load_model(
        PipelineConfig,
        ROOT / "configs/pipeline/cpu_nano.yaml",
        ["grpo.trainer.max_steps=5", "grpo.trainer.extra_args={warmup_steps: 4}"],
        {},
    )
    assert cfg.grpo.trainer["max_steps"] == 5
    # a fraction of the run (transformers reads warmup_steps below 1 so) and no warmup at all
    for extra in ("{warmup_steps: 0.5}", "{warmup_steps: null}", "{warmup_ratio: 0.1}"):
        load_model(
            PipelineConfig,
            ROOT / "configs/pipeline/cpu_nano.yaml",
            ["grpo.trainer.max_steps=2", f"grpo.trainer.extra_args={extra}"],
            {},
        )
