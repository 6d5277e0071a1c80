"""Does training with our rewards make a policy better? A learning check that can fail.

Runs the CPU chain of ``configs/pipeline/cpu_nano.yaml`` (benchmark, scripted teacher, SFT of a nano
model with LLaMA-Factory; phases already finished in the same run directory are reused) and then
four GRPO arms from the same SFT weights, same seed and budget:

- ``outcome_only`` (R_z + R_fmt) and ``outcome_tool`` (R_z + R_tool + R_fmt): the real arms;
- ``negated``: the paper rubric with every weight −1 (a negative control: its task reward must not rise);
- ``frozen``: the paper rubric with learning rate 0 (a null control: its task reward must stay flat).

It reports, on the training prompts, each arm's mean task reward (R_z + R_tool, format excluded)
over its last 5 GRPO steps minus its first 5, paired by prompt (each training prompt's mean in
the last window minus its mean in the first), with a 95% cluster-bootstrap interval over prompts
(``shopping_companion.train_pipeline.learning``; the unpaired difference is printed beside it),
tool calls per trajectory first → last, the same Δ of R_z and of R_tool alone (which part moved;
reported, not checked), and the format-valid rate (share of assistant turns holding a valid tool call or a valid final
answer) of the SFT model against the base model, on the training prompts (``--split``; the other
split is reported too).

    .venv/bin/python benchmarks/bench_learning.py [--runs-dir runs/pipeline] [--check] [--set key=value ...]

``--check`` exits 1 when a condition fails:
- SFT format-valid rate >= 0.9 (``--split``, default the train split);
- each real arm: Δ > 0 and its interval's low end > 0; tool calls per trajectory over the last 5
  steps >= 0.9 × the first 5 (no collapse);
- negated arm: its interval's low end <= 0 (not rising);
- frozen arm: its interval contains 0 (within noise).

The last line printed is machine-readable: ``RESULT key=value ...``; a run that cannot be judged
(a locked run directory, a refused config, a broken hand-off, fewer than 2 × ``--window`` GRPO
steps) prints ``FAIL <reason>`` and ``RESULT pass=0 ... stopped=<status>`` and exits with the
pipeline's status for it (2 config, 3 hand-off, 5 locked; 1 otherwise). A nano model's scores are a
plumbing check of the chain, not a model result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NEGATED = {
    "name": "negated_paper",
    "rewards": [
        {"name": "outcome", "weight": -1.0},
        {"name": "tool_wise", "weight": -1.0},
        {"name": "format", "weight": -1.0},
    ],
}


def _positive_int(text: str) -> int:
    """``--window``: an integer >= 1 (refused by argparse, exit 2)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {n}")
    return n


def _stopped(reason: str, code: int) -> int:
    """A run that could not be judged: the reason and a machine-readable last line."""
    print(f"FAIL {reason}")
    print(f"RESULT pass=0 failed=1 stopped={code} reason={json.dumps(reason[:300])}")
    return code


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from shopping_companion.config import load_model
    from shopping_companion.train_pipeline.config import ArmConfig, PipelineConfig
    from shopping_companion.train_pipeline.run import Pipeline

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--config", default=str(ROOT / "configs/pipeline/cpu_nano.yaml"), help="pipeline YAML (default cpu_nano)"
    )
    ap.add_argument("--runs-dir", default=None, help="parent of the run directory (default: the config's)")
    ap.add_argument("--name", default=None, help="run name (default: the config's)")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="config override KEY=VALUE (dotted key, YAML value); repeatable",
    )
    ap.add_argument("--fresh", action="append", default=[], help="recompute this phase and later ones (e.g. grpo)")
    ap.add_argument("--window", type=_positive_int, default=5, help="steps at each end compared (>= 1; default 5)")
    ap.add_argument(
        "--split",
        default="train",
        choices=["train", "test"],
        help="split of the checked format-valid rate (default train: the training prompts)",
    )
    ap.add_argument("--check", action="store_true", help="exit 1 when a learning condition fails")
    a = ap.parse_args(argv)

    from shopping_companion.errors import ShopCompError

    console = Console(stderr=True, soft_wrap=True)
    flags = {"runs_dir": a.runs_dir, "name": a.name}
    try:
        cfg = load_model(PipelineConfig, a.config, a.sets, {k: v for k, v in flags.items() if v is not None})
    except ShopCompError as e:
        return _stopped(f"{type(e).__name__}: {e}", e.exit_code)
    real = list(cfg.grpo.arms)
    controls = [
        ArmConfig(name="negated", reward_config=NEGATED),
        ArmConfig(name="frozen", reward_config="paper", trainer={"learning_rate": 0.0}),
    ]
    cfg.grpo.arms = real + controls
    other = "test" if a.split == "train" else "train"
    cfg.eval.splits = [a.split, other]  # format-valid rates of base and SFT; the other split is reported
    steps = cfg.grpo.trainer.get("max_steps")
    if isinstance(steps, int) and steps < 2 * a.window:  # refused now, not after every arm has trained
        return _stopped(
            f"--window {a.window}: two windows need at least {2 * a.window} GRPO steps; "
            f"grpo.trainer.max_steps is {steps}",
            2,
        )

    t0 = time.perf_counter()
    try:
        pipe = Pipeline(cfg, console, fresh=a.fresh)  # an unknown --fresh phase: FAIL and RESULT, exit 2
        rows, fv, fv_other = _run(pipe, cfg, a, other)
    except ShopCompError as e:  # a locked run (5), a refused config (2), a broken hand-off (3), ...
        return _stopped(f"{type(e).__name__}: {e}", e.exit_code)
    except ValueError as e:  # too few GRPO steps for two windows, and the like
        return _stopped(str(e), 1)
    wall = time.perf_counter() - t0
    return _verdict(cfg, a, real, rows, fv, fv_other, other, wall)


def _run(pipe, cfg, a, other):
    """Run or reuse the chain and the four arms; the learning statistics per arm."""
    from shopping_companion.train_pipeline.learning import (
        learning_delta,
        outcome_reward,
        process_reward,
        read_rollouts,
        task_reward,
        tool_calls,
    )
    from shopping_companion.train_pipeline.report import format_valid_rate

    with pipe.locked():
        bench, collect, base, sft = pipe.through_sft()
        fv, fv_other = {}, {}
        for name, rec in (("base", base), ("sft", sft)):
            ev = pipe.phase_eval(name, a.split, rec["outputs"], bench)
            fv[name] = format_valid_rate(ev["outputs"]["results"])
            ev = pipe.phase_eval(name, other, rec["outputs"], bench)
            fv_other[name] = format_valid_rate(ev["outputs"]["results"])
        arms = {arm.name: pipe.phase_grpo(arm, bench, sft) for arm in cfg.grpo.arms}
    rows = {}
    for name, rec in arms.items():
        records = read_rollouts(Path(rec["outputs"]["dir"]) / "rollouts.jsonl")
        rows[name] = {
            "task": learning_delta(records, window=a.window, key=task_reward),
            "tools": learning_delta(records, window=a.window, key=tool_calls),
            "R_z": learning_delta(records, window=a.window, key=outcome_reward),
            "R_tool": learning_delta(records, window=a.window, key=process_reward),
            "zero_std": (rec["outputs"].get("zero_std_groups") or {}).get("mean"),
        }
    return rows, fv, fv_other


def _verdict(cfg, a, real, rows, fv, fv_other, other, wall) -> int:
    """Print the table, the failed conditions and the RESULT line; the exit status."""
    fails = []
    sft_fv, base_fv = fv["sft"]["rate"] or 0.0, fv["base"]["rate"] or 0.0
    if sft_fv < 0.9:
        fails.append(f"SFT format-valid rate {sft_fv:.3f} < 0.9")
    for arm in real:
        t, k = rows[arm.name]["task"], rows[arm.name]["tools"]
        if not (t["delta"] > 0 and t["ci_low"] is not None and t["ci_low"] > 0):
            ci = f"[{t['ci_low']:+.3f}, {t['ci_high']:+.3f}]" if t["ci_low"] is not None else "[no interval]"
            fails.append(f"{arm.name}: task reward Δ {t['delta']:+.3f} {ci} not above 0")
        if k["last"] < 0.9 * k["first"]:
            fails.append(f"{arm.name}: tool calls per trajectory fell {k['first']:.2f} → {k['last']:.2f}")
    neg, frz = rows["negated"]["task"], rows["frozen"]["task"]
    if neg["ci_low"] is not None and neg["ci_low"] > 0:
        fails.append(f"negated: task reward rose, Δ {neg['delta']:+.3f} [{neg['ci_low']:.3f}, {neg['ci_high']:.3f}]")
    if frz["ci_low"] is not None and not (frz["ci_low"] <= 0 <= frz["ci_high"]):
        fails.append(f"frozen: task reward moved, Δ {frz['delta']:+.3f} [{frz['ci_low']:.3f}, {frz['ci_high']:.3f}]")

    print(
        f"bench_learning ({cfg.run_dir}, {wall:.0f} s this invocation; a nano model: a plumbing check, not a model result)"
    )
    print(
        f"format-valid rate ({a.split} split): base {base_fv:.3f} ({fv['base']['valid']}/{fv['base']['turns']} turns), "
        f"SFT {sft_fv:.3f} ({fv['sft']['valid']}/{fv['sft']['turns']})"
    )
    print(
        f"format-valid rate ({other} split, reported only): base {fv_other['base']['rate'] or 0:.3f}, "
        f"SFT {fv_other['sft']['rate'] or 0:.3f}"
    )
    print("arm           task first → last  Δ [95% CI]              paired  unpaired Δ  tools first → last  zero-std")
    for name, r in rows.items():
        t, k = r["task"], r["tools"]
        ci = f"[{t['ci_low']:+.3f}, {t['ci_high']:+.3f}]" if t["ci_low"] is not None else "[–]"
        z = f"{r['zero_std']:.2f}" if r["zero_std"] is not None else "–"
        by = f"{t['units']}" if t["pairing"] == "prompt" else "no"
        print(
            f"{name:13s} {t['first']:.3f} → {t['last']:.3f}  {t['delta']:+.3f} {ci:18s}  {by:6s}  "
            f"{t['delta_unpaired']:+.3f}      {k['first']:.2f} → {k['last']:.2f}         {z}"
        )
    print("which part moved (reported, not checked): Δ [95% CI] of R_z (outcome) and R_tool (tool-wise process)")
    for name, r in rows.items():
        parts = "  ".join(
            f"{c} {r[c]['delta']:+.3f} [{r[c]['ci_low']:+.3f}, {r[c]['ci_high']:+.3f}]"
            if r[c]["ci_low"] is not None
            else f"{c} {r[c]['delta']:+.3f}"
            for c in ("R_z", "R_tool")
        )
        print(f"{name:13s} {parts}")
    for f in fails:
        print(f"FAIL {f}")
    fields = {
        "sft_format_valid": f"{sft_fv:.3f}",
        "base_format_valid": f"{base_fv:.3f}",
        f"sft_format_valid_{other}": f"{fv_other['sft']['rate'] or 0:.3f}",
        **{f"{n}_delta": f"{r['task']['delta']:.4f}" for n, r in rows.items()},
        **{f"{n}_ci_low": f"{r['task']['ci_low']:.4f}" for n, r in rows.items() if r["task"]["ci_low"] is not None},
        **{f"{n}_ci_high": f"{r['task']['ci_high']:.4f}" for n, r in rows.items() if r["task"]["ci_high"] is not None},
        **{f"{n}_tool_calls_last": f"{r['tools']['last']:.2f}" for n, r in rows.items()},
        **{f"{n}_{c}_delta": f"{r[c]['delta']:.4f}" for n, r in rows.items() for c in ("R_z", "R_tool")},
        "failed": str(len(fails)),
        "pass": "1" if not fails else "0",
    }
    (cfg.run_dir / "bench_learning.json").write_text(
        json.dumps({"format_valid": fv, f"format_valid_{other}": fv_other, "arms": rows, "fails": fails}, indent=2),
        encoding="utf-8",
    )
    print("RESULT " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 1 if (a.check and fails) else 0


if __name__ == "__main__":
    sys.exit(main())
