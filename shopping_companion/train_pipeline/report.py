"""The pipeline's report: ``report.md``, ``report.json`` and ``curves.png`` in the run directory.

- **Hand-offs**: every checkpoint the pipeline wrote or read, with the content hash of its
  weights, and the checks made on them (GRPO's first rollouts = the SFT weights; each evaluation
  loaded the checkpoint it names).
- **The paper-style table** (Table 2 of the paper, small scale): per model and split, Acc, Succ
  (all and per task type), pass^k, R_z, R_tool and R_fmt per stage, the format-valid rate (share
  of assistant turns holding a valid tool call or a valid final answer) and tool calls per episode.
- **Learning**: per GRPO arm, the task reward (R_z + R_tool) of the first and last 5 steps with a
  95% cluster-bootstrap interval of the difference, tool calls per trajectory, the share of
  groups without reward variance; ``curves.png`` plots every component per step for every arm.
- **Wall time** per phase.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shopping_companion.markdown import markdown_table
from shopping_companion.runs import scan_jsonl
from shopping_companion.train_pipeline.learning import (
    learning_delta,
    outcome_reward,
    process_reward,
    read_rollouts,
    step_means,
    task_reward,
    tool_calls,
)

__all__ = ["format_valid_rate", "short", "write_report"]

PLUMBING_NOTE = (
    "A nano model's scores are a plumbing check of the chain (data, hand-offs, rewards, learning signal), "
    "not a model result."
)


def short(sha: str | None) -> str:
    """The first 12 hex digits of a hash (``-`` for None)."""
    return sha[:12] if sha else "-"


def format_valid_rate(results: str | Path) -> dict[str, Any]:
    """Share of assistant turns that hold a valid action (a protocol tool call, or the stage's
    parsable final answer; :func:`~shopping_companion.rewards.format.valid_action_turns`) over the
    scored episodes of a results file: ``{"rate", "turns", "valid"}``."""
    from shopping_companion.rewards.format import valid_action_turns
    from shopping_companion.types import EpisodeResult

    turns = valid = 0
    p = Path(results)
    episodes = scan_jsonl(p, EpisodeResult.model_validate_json).records if p.is_file() else []
    for ep in episodes:
        if ep.error:
            continue
        for st in ep.stages:
            flags = valid_action_turns(st.trajectory)
            turns += len(flags)
            valid += sum(flags)
    return {"rate": (valid / turns) if turns else None, "turns": turns, "valid": valid}


def _eval_row(model: str, split: str, rec: dict[str, Any], ks: list[int]) -> dict[str, Any]:
    out = rec["outputs"]
    summ = (json.loads(Path(out["run_dir"], "summary.json").read_text(encoding="utf-8")) or {}).get("summary", {})
    rm = summ.get("reward_means", {})
    pk = next(iter((summ.get("pass_k") or {}).values()), {}).get("k", {})
    row = {
        "model": model,
        "split": split,
        "n": summ.get("n_scored"),
        "acc": summ.get("acc"),
        "succ": summ.get("succ"),
        "succ_by_type": {t: v.get("succ") for t, v in (summ.get("by_task_type") or {}).items()},
        "pass^k": {str(k): (pk.get(str(k)) or {}).get("pass^k") for k in ks},
        "tool_calls": summ.get("mean_total_tool_calls"),
        "format_valid": format_valid_rate(out["results"]),
        "weights_sha256": out.get("weights_sha256"),
    }
    for stage in (1, 2):
        for c in ("R_z", "R_tool", "R_fmt"):
            row[f"s{stage}.{c}"] = rm.get(f"stage{stage}.{c}")
    return row


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _checked_line(
    handoffs: list[dict[str, Any]], evals: dict[tuple[str, str], dict[str, Any]], arms: dict[str, dict[str, Any]]
) -> str:
    """What the hand-off checks covered, from the records (a check the pipeline could not make is
    named, not claimed)."""
    sft = next(h["weights_sha256"] for h in handoffs if h["checkpoint"] == "sft")
    grpo = [h for h in handoffs if h["checkpoint"].startswith("grpo ")]
    proven = [h["checkpoint"][5:] for h in grpo if h.get("first_rollout_weights_sha256") == sft]
    open_ = [h["checkpoint"][5:] for h in grpo if h.get("first_rollout_weights_sha256") != sft]
    parts = []
    if proven:
        parts.append("first rollouts sampled from the SFT weights: " + ", ".join(f"`{n}`" for n in proven))
    if open_:
        parts.append(
            "**first rollouts not checked** (no first-rollout hash recorded): " + ", ".join(f"`{n}`" for n in open_)
        )
    known = {h["weights_sha256"] for h in handoffs if h.get("weights_sha256")}
    for rec in arms.values():
        known |= {c.get("weights_sha256") for c in rec["outputs"].get("checkpoints") or [] if c.get("weights_sha256")}
    got = {k: (r.get("outputs") or {}).get("weights_sha256") for k, r in evals.items()}
    loaded = [f"{m}/{s}" for (m, s), h in got.items() if h and h in known]
    unknown = [f"{m}/{s}" for (m, s), h in got.items() if not (h and h in known)]
    if loaded:
        parts.append(f"{len(loaded)} evaluations loaded the weights of the checkpoint they name (`weights` column)")
    if unknown:
        parts.append("**evaluations not checked** (no recorded checkpoint hash to compare): " + ", ".join(unknown))
    return "Checked: " + "; ".join(parts) + "." if parts else "Checked: nothing (no GRPO arm, no evaluation)."


def _delta_ci(d: dict[str, Any]) -> str:
    return f"{d['delta']:+.3f} [{_fmt(d['ci_low'])}, {_fmt(d['ci_high'])}]"


def _curves(arms: dict[str, dict[str, Any]], path: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("task reward R_z + R_tool", task_reward),
        ("R_z", outcome_reward),
        ("R_tool", process_reward),
        ("R_fmt", lambda r: float(r["reward"].get("R_fmt", 0.0))),
        ("trained total", lambda r: float(r["reward"].get("score", 0.0))),
        ("tool calls / trajectory", tool_calls),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    drawn = []
    for ax, (title, key) in zip(axes.flat, panels):
        for name, rec in arms.items():
            records = read_rollouts(Path(rec["outputs"].get("dir", "")) / "rollouts.jsonl")
            if not records:
                continue
            means = step_means(records, key)
            xs = list(means)
            ax.plot(xs, list(means.values()), marker=".", label=name)
            drawn.append(name)
        ax.set_title(title)
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle("GRPO learning curves on the training prompts (mean per step)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return sorted(set(drawn))


def _learning(arms: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per GRPO arm: its rollout records' count, zero-std groups and the learning deltas of the
    task reward, tool calls, R_z and R_tool (or a ``note`` why there are none)."""
    learning = {}
    for name, rec in arms.items():
        records = read_rollouts(Path(rec["outputs"].get("dir", "")) / "rollouts.jsonl")
        entry: dict[str, Any] = {"trajectories": len(records), "zero_std_groups": rec["outputs"].get("zero_std_groups")}
        try:
            entry["task_reward"] = learning_delta(records, key=task_reward)
            entry["tool_calls"] = learning_delta(records, key=tool_calls)
            entry["R_z"] = learning_delta(records, key=outcome_reward)
            entry["R_tool"] = learning_delta(records, key=process_reward)
        except ValueError as e:
            entry["note"] = str(e)
        learning[name] = entry
    return learning


def _handoffs(base: dict[str, Any], sft: dict[str, Any], arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The checkpoints handed from phase to phase (base, SFT, each GRPO arm) with their weights' hashes."""
    handoffs = [
        {
            "checkpoint": "base",
            "path": base["outputs"]["path"],
            "weights_sha256": base["outputs"].get("weights_sha256"),
        },
        {"checkpoint": "sft", "path": sft["outputs"]["path"], "weights_sha256": sft["outputs"]["weights_sha256"]},
    ]
    for name, rec in arms.items():
        o = rec["outputs"]
        handoffs.append(
            {
                "checkpoint": f"grpo {name}",
                "path": o["path"],
                "weights_sha256": o.get("weights_sha256"),
                "first_rollout_weights_sha256": o.get("first_rollout_weights_sha256"),
            }
        )
    return handoffs


def write_report(
    pipe: Any,
    bench: dict[str, Any],
    collect: dict[str, Any],
    base: dict[str, Any],
    sft: dict[str, Any],
    arms: dict[str, dict[str, Any]],
    evals: dict[tuple[str, str], dict[str, Any]],
    wall_s: float,
) -> dict[str, Any]:
    """Write ``report.md``, ``report.json`` and ``curves.png`` into ``pipe.run_dir`` (module
    docstring); returns the report's data."""
    cfg = pipe.cfg
    run_dir: Path = pipe.run_dir
    ks = list(cfg.eval.pass_k)
    rows = [_eval_row(m, s, rec, ks) for (m, s), rec in evals.items()]
    learning = _learning(arms)
    drawn = _curves(arms, run_dir / "curves.png") if arms else []
    handoffs = _handoffs(base, sft, arms)
    phases = {p: r.get("wall_s") for p, r in pipe.records.items()}
    data = {
        "name": cfg.name,
        "benchmark": bench["outputs"],
        "teacher": collect["outputs"].get("teacher"),
        "collect": {k: collect["outputs"].get(k) for k in ("episodes", "succ_rate", "kept", "kept_by_stage")},
        "sft": {k: sft["outputs"].get(k) for k in ("examples", "train_loss", "lf_check")},
        "handoffs": handoffs,
        "table": rows,
        "learning": learning,
        "curves": "curves.png" if drawn else None,
        "wall_s": {"total_this_invocation": round(wall_s, 1), "phases": phases},
        "note": PLUMBING_NOTE if base["outputs"].get("kind") == "nano" else None,
        "select": {
            k: pipe.records["select"]["outputs"].get(k)
            for k in ("task_ids", "candidates", "stages_with_spread", "stages_with_spread_all")
        }
        if "select" in pipe.records
        else None,
    }
    (run_dir / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True, default=str), encoding="utf-8")

    L = [f"# Pipeline report: {cfg.name}", ""]
    if cfg.description:
        L += [cfg.description, ""]
    if data["note"]:
        L += [f"**{PLUMBING_NOTE}**", ""]
    b = bench["outputs"]
    L += [
        f"- Benchmark: `{b['path']}` ({b['train']} train / {b['test']} test tasks, tasks hash {b['tasks_sha256']})",
        f"- SFT teacher: {data['teacher']}; {collect['outputs']['episodes']} episodes, Succ "
        f"{_fmt(collect['outputs']['succ_rate'])}, kept {collect['outputs']['kept']} stage trajectories",
        f"- Base model: `{base['outputs']['path']}` ({base['outputs'].get('kind')}"
        + (f", {base['outputs']['parameters']:,} parameters" if base["outputs"].get("parameters") else "")
        + ")",
        f"- SFT: {cfg.sft.finetuning} fine-tuning with LLaMA-Factory on {sft['outputs']['examples']} {cfg.sft.examples}-level "
        f"examples, train loss {_fmt(sft['outputs'].get('train_loss'))}; LLaMA-Factory tokenization check: "
        + (
            f"{sft['outputs']['lf_check']['records']} examples, {sft['outputs']['lf_check']['mismatches']} differ"
            if sft["outputs"].get("lf_check")
            else "not run (base model not local)"
        ),
        f"- GRPO ({cfg.grpo.backend}): arms " + ", ".join(f"`{a.name}` ({a.reward_config})" for a in cfg.grpo.arms),
    ]
    if data["select"]:
        o = data["select"]
        L.append(
            f"- GRPO tasks: {len(o['task_ids'])} of {o['candidates']} train tasks, chosen by the SFT model's "
            f"reward spread over {cfg.grpo.select.trials} trials (R_z varied in {o['stages_with_spread']} of their "
            f"{2 * len(o['task_ids'])} stages; {o['stages_with_spread_all']} of {2 * o['candidates']} over all): "
            + ", ".join(f"`{t}`" for t in o["task_ids"])
        )
    L += ["", "## Hand-offs (content hashes of the weights)", ""]
    hand_rows = []
    for h in handoffs:
        fr = h.get("first_rollout_weights_sha256")
        hand_rows.append(
            [h["checkpoint"], f"`{short(h['weights_sha256'])}`", f"`{short(fr)}`" if fr else "", f"`{h['path']}`"]
        )
    L.append(markdown_table(["checkpoint", "weights", "first rollouts", "path"], hand_rows))
    L += ["", _checked_line(handoffs, evals, arms), ""]
    L += ["## Results (same evaluation code for every model)", "", "`n`: scored episodes (tasks × trials).", ""]
    rewards = [f"S{s} {c}" for s in (1, 2) for c in ("R_z", "R_tool", "R_fmt")]
    columns = ["model", "split", "n", "Acc", "Succ", *(f"pass^{k}" for k in ks), *rewards]
    result_rows = []
    for r in rows:
        fv = r["format_valid"]
        result_rows.append(
            [r["model"], r["split"], _fmt(r["n"]), _fmt(r["acc"]), _fmt(r["succ"])]
            + [_fmt(r["pass^k"].get(str(k))) for k in ks]
            + [_fmt(r[f"s{s}.{c}"]) for s in (1, 2) for c in ("R_z", "R_tool", "R_fmt")]
            + [f"{_fmt(fv['rate'])} ({fv['valid']}/{fv['turns']})", _fmt(r["tool_calls"], 2)]
            + [f"`{short(r['weights_sha256'])}`"]
        )
    L.append(markdown_table([*columns, "format-valid", "tool calls", "weights"], result_rows))
    L += ["", "Succ by task type: " + "; ".join(f"{r['model']}/{r['split']} {r['succ_by_type']}" for r in rows), ""]
    L += [
        "## Learning (training prompts, per-trajectory rollout records)",
        "",
        "Task reward = R_z + R_tool (format excluded); Δ = mean of the last 5 steps − the first 5, paired by "
        "prompt (each prompt against itself; `pairing: none` = all groups, unpaired), 95% cluster bootstrap; "
        "unpaired Δ = every trajectory of the last window − the first.",
        "",
    ]
    learn_rows = []
    for name, e in learning.items():
        tr, tc, z = e.get("task_reward"), e.get("tool_calls"), e.get("zero_std_groups") or {}
        if tr is None:
            learn_rows.append([name, e["trajectories"], e.get("note", "–"), *[""] * 6, _fmt(z.get("mean"), 2)])
            continue
        learn_rows.append(
            [name, e["trajectories"], f"{tr['first']:.3f} → {tr['last']:.3f}"]
            + [f"{tr['delta']:+.3f} [{_fmt(tr['ci_low'])}, {_fmt(tr['ci_high'])}]", f"{tr['pairing']} ({tr['units']})"]
            + [f"{tr['delta_unpaired']:+.3f}", _delta_ci(e["R_z"]), _delta_ci(e["R_tool"])]
            + [f"{tc['first']:.2f} → {tc['last']:.2f}", _fmt(z.get("mean"), 2)]
        )
    columns = ["arm", "trajectories", "task reward first → last", "Δ [95% CI]", "pairing (units)", "unpaired Δ"]
    columns += ["R_z Δ [95% CI]", "R_tool Δ [95% CI]", "tool calls first → last", "zero-std groups"]
    L.append(markdown_table(columns, learn_rows))
    sft_sha = sft["outputs"]["weights_sha256"]
    for name, rec in arms.items():
        if rec["outputs"].get("weights_sha256") == sft_sha:
            L += [
                "",
                f"**Warning: GRPO arm `{name}` ended with the SFT weights unchanged** (no group had a reward "
                "difference to learn from, or the learning rate is 0); its rows above are the SFT model's.",
            ]
    if drawn:
        L += ["", "![learning curves](curves.png)"]
    L += ["", "## Wall time per phase (s)", ""]
    L.append(markdown_table(["phase", "seconds"], [[p, _fmt(s, 1)] for p, s in phases.items()]))
    L += ["", f"This invocation: {wall_s:.1f} s (reused phases count their original time above)."]
    (run_dir / "report.md").write_text("\n".join(L) + "\n", encoding="utf-8")
    return data
