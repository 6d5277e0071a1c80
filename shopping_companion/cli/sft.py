"""``shopcomp sft``: rejection-sample SFT data from a teacher, export it for LLaMA-Factory.

    shopcomp sft collect --config configs/sft/collect_example.yaml [--set backend.sampling.temperature=0.7]
    shopcomp sft collect --bench B --out runs/sft/collect --backend reference --trials 4 --temperature 0.6
    shopcomp sft export --collect runs/sft/collect --out runs/sft/export [--base-model ...] [--set key=value]
    shopcomp sft stats --collect runs/sft/collect
    llamafactory-cli train runs/sft/export/train_lora.yaml      # or scripts/run_sft.sh

``collect`` is configured by :class:`~shopping_companion.sft.config.CollectConfig` (YAML < flags <
``--set``); the teacher, judge and data are built by the evaluation's builders
(:mod:`shopping_companion.benchmark.run`). Errors are raised, never printed here: the group's one
handler (:class:`~shopping_companion.cli.common.ShopCompGroup`) prints them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from shopping_companion.cli.common import Flag, console, flag_command, flag_names, new_app, pick
from shopping_companion.cli.eval import EVAL_FLAGS, LIMITS_HELP

app = new_app(help="SFT (paper §6.1, App. D): rejection sampling, step-level examples, LLaMA-Factory export.")

_HEAD = pick(EVAL_FLAGS, "bench.path") + [
    Flag("--out DIR", "out", Path, "Collect directory (default runs/sft/collect)."),
    Flag("--trials, -n N", "trials", int, "Samples (episodes) per task (default 1)."),
    Flag("--strategies LIST", "strategies", str, "Environment mode[:hint], comma-separated (default two_stage:none)."),
    Flag("--split SPLIT", "bench.split", str, "Only train: test tasks never become training data."),
    Flag("--limit N", "bench.limit", int, "Only the first N train tasks."),
]
_KEEP_FLAGS = [
    Flag("--keep RULE", "keep.rule", str, "succ (episode Succ; default) | stage (each stage's success) | pref_acc."),
    Flag("--min-acc X", "keep.min_acc", float, "Stage-1 Acc threshold of --keep pref_acc (default 1.0)."),
    Flag("--stages LIST", "keep.stages", str, "Stages to keep: 1,2 (default) | 1 | 2."),
]
#: CollectConfig keys whose flags are ``shopcomp eval``'s (the same groups: teacher, sampling,
#: judge, simulator, rubric, environment, data)
_SHARED = ("backend", "judge", "simulator", "rubric", "env", "seed", "concurrency", "data", "bench.skip_missing_gold")

#: Every ``shopcomp sft collect`` flag and the :class:`~shopping_companion.sft.config.CollectConfig`
#: key it overrides (``docs/sft.md`` lists them): its own, then those it shares with ``shopcomp eval``.
COLLECT_FLAGS = _HEAD + [f for f in EVAL_FLAGS if f.key.split(".")[0] in _SHARED or f.key in _SHARED] + _KEEP_FLAGS


def _collect(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> None:
    run_collect(load_collect_config(config, sets, overrides))


def load_collect_config(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> Any:
    """The resolved :class:`~shopping_companion.sft.config.CollectConfig` (config file < flags <
    ``--set``), its ``bench.path`` made absolute; raises ConfigError naming each bad field."""
    from shopping_companion.config import load_model
    from shopping_companion.sft.config import CollectConfig

    cfg = load_model(CollectConfig, config, sets, overrides, names=flag_names(COLLECT_FLAGS))
    cfg.bench.path = Path(cfg.bench.path).expanduser().resolve()  # `sft export` finds it from config.yaml
    return cfg


def run_collect(cfg: Any) -> None:
    """Collect with ``cfg`` (:func:`~shopping_companion.sft.collect.collect_with_config`) and print
    the summary."""
    from shopping_companion.sft.collect import collect_with_config

    summary = collect_with_config(cfg, console)
    console.print(
        f"{summary.episodes} episodes ({summary.new_episodes} new, {summary.errors} errors), "
        f"Succ {summary.succ_rate:.3f}; kept {summary.kept} stage trajectories "
        f"{summary.kept_by_stage} → {escape(str(cfg.out))} ({summary.wall_s:.1f}s, "
        f"{summary.episodes_per_s:.3f} episodes/s)"
    )


flag_command(
    app,
    "collect",
    COLLECT_FLAGS,
    _collect,
    help=f"""Run a teacher on the train split, judge every trajectory, keep the successful stages.

    Settings come from --config collect.yaml (see configs/sft/collect_example.yaml), then the
    flags, then --set key=value. Resumable: rerun the same command to continue. The resolved
    configuration is written to OUT/config.yaml; another teacher, judge, sampling, rubric or
    environment is refused as a resume (use another --out).

    {LIMITS_HELP}

    Exit status: 0 done; 2 a configuration or data error; 4 an endpoint is down or unreachable
    (the episodes so far are kept; rerun to resume); 5 another process writes OUT; 1 a bug.
    """,
)


from shopping_companion.cli.sft_export import export, stats  # noqa: E402 - the kept stages: counts, LLaMA-Factory export

app.command()(stats)
app.command()(export)
