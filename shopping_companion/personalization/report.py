"""Judging and the report (`shopcomp personalize eval`): the shapes of the paper's Tables 3, 4, 7,
8, 9 and 11, dataset statistics per category (Table 6 shape), per-turn latency, judge agreement
(Table 10).

Files written to the run directory: ``judgments[_<judge>].jsonl`` (one line per dialogue and judge,
resumable), ``report.md``, ``dialogues.parquet`` (one row per dialogue), ``turns.parquet`` (one row
per turn), ``retrieval.png`` (SR@all and retrieval accuracy per variant) and, with judge scores,
``judge_scores.png``.

Table 8 tests: per judge metric and Overall, every retrieval variant vs Baseline and Full vs
Single, two-sided Wilcoxon signed-rank with Holm correction over the whole family and the
rank-biserial effect size. Without judge scores the same tests are run on the per-dialogue best
title-overlap ratio (labelled as such).
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from shopping_companion.errors import ConfigError
from shopping_companion.markdown import markdown_table
from shopping_companion.personalization.agents import VARIANTS
from shopping_companion.personalization.build import load_cases
from shopping_companion.personalization.judge import JUDGE_METRICS, TrajectoryJudge
from shopping_companion.personalization.llmjson import JSONAskError
from shopping_companion.personalization.metrics import holm, paired_wilcoxon, spearman
from shopping_companion.personalization.runner import read_dialogues, repair_torn_tail

__all__ = ["judge_run", "read_judgments", "write_report"]


def _check_inputs(run: Path, dataset: Path) -> None:
    """Raise :class:`ConfigError` naming the missing input (run directory, dialogues, dataset)."""
    if not (run / "dialogues.jsonl").is_file():
        raise ConfigError(
            f"run: {str(run / 'dialogues.jsonl')!r} missing; run `shopcomp personalize run --out {run}` first"
        )
    if not (dataset / "cases.jsonl").is_file():
        raise ConfigError(
            f"dataset: {str(dataset / 'cases.jsonl')!r} missing; pass the dataset directory written "
            "by `shopcomp personalize build`"
        )


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def read_judgments(path: str | os.PathLike[str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``{(case_id, variant, memory): judgment}`` of a judgments file (newest wins)."""
    out: dict[tuple, dict] = {}
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[(r["case_id"], r["variant"], r["memory"])] = r
    return out


def judge_run(
    run_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    judge: TrajectoryJudge,
    *,
    tag: str | None = None,
    concurrency: int = 1,
    progress: Callable[[dict], None] | None = None,
) -> Path:
    """Judge every dialogue of the run not yet judged by ``judge``; returns the judgments path.

    A judge failure (no valid JSON after retries) is recorded with ``error`` and retried next time.
    When dialogues are left to judge, the judge's endpoint is checked first (``backend.ping()``,
    :meth:`~shopping_companion.llm.openai_backend.OpenAIBackend.ping`): ``BackendError`` when it
    cannot be reached.
    """
    from concurrent.futures import ThreadPoolExecutor

    run = Path(run_dir)
    _check_inputs(run, Path(dataset_dir))
    profiles = {c.case.case_id: c.profile for c in load_cases(dataset_dir)}
    path = run / (f"judgments_{_safe(tag)}.jsonl" if tag else "judgments.jsonl")
    repair_torn_tail(path)  # an interrupted judge run may have left half a line
    done = {k for k, v in read_judgments(path).items() if not v.get("error")}
    todo = [
        d
        for d in read_dialogues(run / "dialogues.jsonl")
        if not d.get("error") and (d["case_id"], d["variant"], d["memory"]) not in done
    ]
    ping = getattr(getattr(judge.asker, "backend", None), "ping", None)
    if todo and callable(ping):
        ping()  # an endpoint that cannot be reached fails now (BackendError), not after minutes of retries

    def one(d: dict) -> dict:
        rec = {
            "case_id": d["case_id"],
            "variant": d["variant"],
            "memory": d["memory"],
            "judge": judge.name,
            "error": None,
        }
        try:
            s = judge.judge(profiles[d["case_id"]], [(t["query"], t["reply"]) for t in d["turns"]])
            rec.update(s.model_dump(), overall=s.overall)
        except JSONAskError as e:
            rec["error"] = str(e)[:1000]
        return rec

    with open(path, "a", encoding="utf-8") as fh:
        with ThreadPoolExecutor(max(1, concurrency)) as ex:
            for rec in ex.map(one, todo):
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
                if progress:
                    progress(rec)
    return path


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        if x != x:
            return "—"
        return f"{x:.{nd}f}"
    return str(x)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.2f}%"


def _formatted_table(header: list[str], rows: list[list[Any]]) -> str:
    """:func:`~shopping_companion.markdown.markdown_table` with numbers and None written by :func:`_f`."""
    return markdown_table(header, [[_f(c) for c in r] for r in rows])


def _paired_family(
    values: dict[str, dict[str, float]],
    metrics: list[str],
    comparisons: list[tuple[str, str]],
    by_metric: dict[str, dict[str, dict[str, float]]],
) -> list[dict[str, Any]]:
    rows = []
    for a, b in comparisons:
        for m in metrics:
            va, vb = by_metric[m].get(a, {}), by_metric[m].get(b, {})
            keys = sorted(set(va) & set(vb))
            if len(keys) < 2:
                continue
            res = paired_wilcoxon([va[k] for k in keys], [vb[k] for k in keys])
            rows.append({"comparison": f"{a} vs {b}", "metric": m, **res})
    adj = holm([r["p"] for r in rows])
    for r, p in zip(rows, adj):
        r["p_holm"] = p
    return rows


def _dataset_section(manifest: dict[str, Any]) -> list[str]:
    """Table 6: the dataset's statistics per category, its totals and image descriptions."""
    md: list[str] = []
    cats = manifest.get("categories", {})
    md += ["## Dataset statistics per category (Table 6 shape)", ""]
    md.append(
        _formatted_table(
            ["category", "source", "target users", "items", "reviews", "trajectories", "queries", "title sources"],
            [
                [
                    c,
                    s.get("source", ""),
                    s.get("target_users"),
                    s.get("items"),
                    s.get("reviews"),
                    s.get("trajectories"),
                    s.get("queries"),
                    ", ".join(f"{k}={v}" for k, v in sorted(s.get("title_sources", {}).items())),
                ]
                for c, s in sorted(cats.items())
            ],
        )
    )
    tot = [
        sum(s.get(k, 0) or 0 for s in cats.values())
        for k in ("target_users", "items", "reviews", "trajectories", "queries")
    ]
    md += [
        "",
        f"Totals: {tot[0]} users, {tot[1]} items, {tot[2]} reviews, {tot[3]} trajectories, {tot[4]} queries. "
        f"Profile builder: {manifest.get('profile_builder')}; query generator: {manifest.get('query_generator')}.",
        "",
    ]
    imgs = manifest.get("image_descriptions", {})
    n_desc = sum(v.get("described", 0) for v in imgs.values() if isinstance(v, dict))
    md += [
        f"Image descriptions: {n_desc} items described"
        + (
            ""
            if n_desc
            else " — absent (no vision-language endpoint), so the e^d view is missing and Full/NoRev/Single use e^m and e^r "
            "like TextRAG."
        ),
        "",
    ]
    return md


def _judge_section(
    main_j: dict, variants: list[str], by_v: dict[str, list[dict]], by_metric: dict[str, dict[str, dict[str, float]]]
) -> list[str]:
    """Table 3: mean judge scores per variant; fills ``by_metric[metric][variant][case_id]``."""
    md = ["## Automatic evaluation (Table 3 shape)", ""]
    if main_j:
        rows = []
        for m in JUDGE_METRICS + ("overall",):
            row = [m.upper() if m != "overall" else "Avg."]
            for v in variants:
                xs = [
                    main_j[(d["case_id"], v, "full")][m]
                    for d in by_v[v]
                    if (d["case_id"], v, "full") in main_j and not main_j[(d["case_id"], v, "full")].get("error")
                ]
                for d in by_v[v]:
                    j = main_j.get((d["case_id"], v, "full"))
                    if j and not j.get("error"):
                        by_metric[m][v][d["case_id"]] = float(j[m])
                row.append(_mean(xs))
            rows.append(row)
        md += [
            _formatted_table(["metric"] + variants, rows),
            "",
            f"Judge: {next(iter(main_j.values())).get('judge')}",
            "",
        ]
    else:
        md += [
            "Not run: the trajectory judge needs an OpenAI-compatible endpoint (`shopcomp personalize eval "
            "--judge-model M --judge-base-url URL`).",
            "",
        ]
    return md


def _retrieval_section(
    variants: list[str], by_v: dict[str, list[dict]], by_metric: dict[str, dict[str, dict[str, float]]]
) -> list[str]:
    """Tables 4 and 9: retrieval accuracy and SR@all per variant; fills ``by_metric['title_overlap']``."""
    md = ["## Retrieval accuracy (Table 4 shape) and target-ASIN retrieval (Table 9 shape)", ""]
    rows = []
    for v in variants:
        ds_ = by_v[v]
        real = [d for d in ds_ if d["title_source"] != "reviews"]
        hits = [d["first_hit_turn"] for d in ds_ if d["first_hit_turn"] is not None]
        rec_hits = [d for d in ds_ if d.get("first_rec_hit_turn") is not None]
        retr = VARIANTS[v].product_retrieval
        rows.append(
            [
                v,
                _pct(_mean([float(d["retrieval_correct"]) for d in real])) if real else "—",
                len(real),
                _pct(_mean([float(d["retrieval_correct"]) for d in ds_])),
                _f(len(hits) / len(ds_), 3) if retr and ds_ else "—",
                _f(_mean(hits)) if retr else "—",
                _f(len(rec_hits) / len(ds_), 3) if ds_ else "—",
                len(ds_),
            ]
        )
        for d in ds_:
            by_metric["title_overlap"][v][d["case_id"]] = float(d["overlap_max"])
    md.append(
        _formatted_table(
            [
                "variant",
                "Acc. (real titles)",
                "n real",
                "Acc. (all)",
                "SR@all",
                "first-hit turn",
                "recommended SR@all",
                "dialogues",
            ],
            rows,
        )
    )
    md += [
        "",
        "Acc.: best per-turn token-overlap ratio of the target title with the reply > 0.3 (paper footnote 6); "
        "'real titles' excludes targets whose title is a placeholder (no metadata). SR@all: share of dialogues whose "
        "retrieved top-k products (K^p) contain the target ASIN in some turn; first-hit turn averaged over hits only. "
        "Recommended SR@all: the same for the agent's final ranking a_t.",
        "",
    ]
    return md


def _calls_section(
    variants: list[str],
    by_v: dict[str, list[dict]],
    by_metric: dict[str, dict[str, dict[str, float]]],
    main_j: dict,
    latency: dict[str, float] | None,
) -> list[str]:
    """Table 7: role calls per turn, the judge average and turn latency per variant."""
    md = ["## Role calls per turn (Table 7 shape) and per-turn latency", ""]
    rows = []
    for v in variants:
        turns = [t for d in by_v[v] for t in d["turns"]]
        calls = _mean([len(t["calls"]) for t in turns])
        lat = sorted(t.get("latency_s", 0.0) for t in turns)
        avg = None
        if main_j:
            avg = _mean(list(by_metric["overall"][v].values()))
        rows.append(
            [
                v,
                calls,
                avg,
                _f(statistics.median(lat) * 1000, 1) if lat else "—",
                _f(lat[int(0.95 * (len(lat) - 1))] * 1000, 1) if lat else "—",
                _f(latency.get(v) * 1000, 2) if latency and v in latency else "—",
            ]
        )
    md.append(
        _formatted_table(
            [
                "variant",
                "role calls / turn",
                "Auto. Avg.",
                "turn latency median (ms)",
                "p95 (ms)",
                "overhead vs local test server (ms)",
            ],
            rows,
        )
    )
    md.append("")
    return md


def _paired_section(variants: list[str], by_metric: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Table 8: paired Wilcoxon tests against the baseline (and Full vs Single), Holm-corrected."""
    md = ["## Paired comparisons (Table 8 shape)", ""]
    comps = [(v, "baseline") for v in variants if v != "baseline" and "baseline" in variants]
    if "full" in variants and "single" in variants:
        comps.append(("full", "single"))
    metrics = [m for m in ("gpc", "cis", "it", "overall") if by_metric.get(m)] or ["title_overlap"]
    if metrics == ["title_overlap"]:
        md += ["No judge scores: tests run on the per-dialogue best title-overlap ratio instead.", ""]
    fam = _paired_family({}, metrics, comps, by_metric)
    md.append(
        _formatted_table(
            ["comparison", "metric", "n", "non-zero", "W", "p", "Holm p", "r (rank-biserial)"],
            [
                [
                    r["comparison"],
                    r["metric"],
                    r["n"],
                    r["n_nonzero"],
                    r["statistic"],
                    _f(r["p"], 4),
                    _f(r["p_holm"], 4),
                    _f(r["r"], 3),
                ]
                for r in fam
            ],
        )
    )
    md.append("")
    return md


def _agreement_section(jsets: dict[str, dict]) -> list[str]:
    """Table 10: Spearman agreement of the first two judges (nothing with fewer)."""
    md: list[str] = []
    if len(jsets) >= 2:
        md += ["## Agreement between judges (Table 10 shape)", ""]
        names = list(jsets)
        a, b = jsets[names[0]], jsets[names[1]]
        keys = [k for k in a if k in b and not a[k].get("error") and not b[k].get("error")]
        md.append(
            _formatted_table(
                ["metric"] + [m.upper() for m in ("gpc", "cis", "it", "overall")] + ["n"],
                [
                    ["Spearman ρ"]
                    + [
                        spearman([a[k][m] for k in keys], [b[k][m] for k in keys])
                        for m in ("gpc", "cis", "it", "overall")
                    ]
                    + [len(keys)]
                ],
            )
        )
        md += ["", f"{names[0]} vs {names[1]}.", ""]
    return md


def _memory_section(ok: list[dict], main_j: dict) -> list[str]:
    """Table 11: the dialogue-memory ablation of Full (nothing with one memory mode)."""
    md: list[str] = []
    abl = [d for d in ok if d["variant"] == "full"]
    mems = [m for m in ("full", "none", "summary", "top1") if any(d["memory"] == m for d in abl)]
    if len(mems) > 1:
        md += ["## Dialogue memory ablation on Full (Table 11 shape)", ""]
        rows = []
        for m in mems:
            ds_ = [d for d in abl if d["memory"] == m]
            js = [main_j.get((d["case_id"], "full", m)) for d in ds_]
            js = [j for j in js if j and not j.get("error")]
            hits = [d for d in ds_ if d["first_hit_turn"] is not None]
            rows.append(
                [
                    m,
                    _mean([j["overall"] for j in js]),
                    _mean([j["it"] for j in js]),
                    _mean([j["cis"] for j in js]),
                    _f(len(hits) / len(ds_), 3),
                    _pct(_mean([float(d["retrieval_correct"]) for d in ds_])),
                    _f(_mean([float(d.get("first_rec_hit_turn") is not None) for d in ds_]), 3),
                    len(ds_),
                ]
            )
        md.append(
            _formatted_table(
                ["memory", "Overall", "IT", "CIS", "SR@all", "Acc. (all)", "recommended SR@all", "dialogues"], rows
            )
        )
        md += [
            "",
            "Retrieval (K^p) does not depend on memory, so SR@all is equal across memory modes; the judge columns "
            "and the recommended ranking can differ.",
            "",
        ]
    return md


def _write_parquet(run: Path, dialogues: list[dict], main_j: dict) -> None:
    """``dialogues.parquet`` (with the main judge's scores) and ``turns.parquet`` in ``run``."""
    import pandas as pd

    # parquet + plots
    rows_d = [{k: v for k, v in d.items() if k != "turns"} for d in dialogues]
    for r in rows_d:
        for m in JUDGE_METRICS + ("overall",):
            j = main_j.get((r["case_id"], r["variant"], r["memory"]))
            r[f"judge_{m}"] = j.get(m) if j and not j.get("error") else None
    pd.DataFrame(rows_d).to_parquet(run / "dialogues.parquet", index=False)
    rows_t = [
        {
            "case_id": d["case_id"],
            "variant": d["variant"],
            "memory": d["memory"],
            "turn": t["turn"],
            "query": t["query"],
            "reply": t["reply"],
            "retrieved": t.get("retrieved", []),
            "recommended": t.get("recommended", []),
            "n_calls": len(t["calls"]),
            "latency_s": t.get("latency_s"),
        }
        for d in dialogues
        for t in d["turns"]
    ]
    pd.DataFrame(rows_t).to_parquet(run / "turns.parquet", index=False)


def _write_plots(
    run: Path,
    variants: list[str],
    by_v: dict[str, list[dict]],
    by_metric: dict[str, dict[str, dict[str, float]]],
    main_j: dict,
) -> None:
    """``retrieval.png`` and, with judge scores, ``judge_scores.png`` in ``run``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(variants))
    sr = [len([d for d in by_v[v] if d["first_hit_turn"] is not None]) / max(1, len(by_v[v])) for v in variants]
    acc = [_mean([float(d["retrieval_correct"]) for d in by_v[v]]) or 0 for v in variants]
    ax.bar([i - 0.2 for i in x], sr, 0.4, label="SR@all (target ASIN in K^p)")
    ax.bar([i + 0.2 for i in x], acc, 0.4, label="retrieval accuracy (title overlap > 0.3)")
    ax.set_xticks(list(x), variants)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(run / "retrieval.png", dpi=120)
    plt.close(fig)
    if main_j:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        w = 0.8 / len(JUDGE_METRICS)
        for k, m in enumerate(JUDGE_METRICS):
            ax.bar(
                [i + k * w for i in x],
                [_mean(list(by_metric[m][v].values())) or 0 for v in variants],
                w,
                label=m.upper(),
            )
        ax.set_xticks([i + 0.3 for i in x], variants)
        ax.set_ylim(0, 5)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(run / "judge_scores.png", dpi=120)
        plt.close(fig)


def write_report(
    run_dir: str | os.PathLike[str],
    dataset_dir: str | os.PathLike[str],
    judgments: list[str | os.PathLike[str]] | None = None,
    latency: dict[str, float] | None = None,
) -> Path:
    """Write ``report.md``, parquet files and PNGs into ``run_dir`` (module docstring)."""
    import matplotlib

    matplotlib.use("Agg")

    run = Path(run_dir)
    ds = Path(dataset_dir)
    _check_inputs(run, ds)
    manifest = json.loads((ds / "manifest.json").read_text()) if (ds / "manifest.json").exists() else {}
    dialogues = [d for d in read_dialogues(run / "dialogues.jsonl")]
    ident = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    jpaths = [Path(p) for p in (judgments or [])]
    if not jpaths:
        jpaths = sorted(run.glob("judgments*.jsonl"))
    jsets = {p.stem: read_judgments(p) for p in jpaths}
    main_j = next(iter(jsets.values()), {})
    ok = [d for d in dialogues if not d.get("error")]
    md: list[str] = ["# Personalised shopping RAG benchmark — report", ""]
    md += ["Paper: *Personalization Matters* (Gao et al., 2026). Shapes of Tables 3, 4, 7, 8, 9, 11 and 6.", ""]
    md += ["## Run identity", "", "```json", json.dumps(ident, indent=2), "```", ""]
    if ident.get("engine_kind") == "extractive":
        md += [
            "**Role engine: extractive rule-based baseline (not a language model).** Replies are assembled from the "
            "retrieved evidence by fixed rules; judge scores of such replies do not measure an LLM.",
            "",
        ]
    md += [f"Dialogues: {len(dialogues)} ({len(dialogues) - len(ok)} with errors).", ""]

    md += _dataset_section(manifest)

    base = [d for d in ok if d["memory"] == "full"]
    variants = [v for v in VARIANTS if any(d["variant"] == v for d in base)]
    by_v = {v: [d for d in base if d["variant"] == v] for v in variants}

    by_metric: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    md += _judge_section(main_j, variants, by_v, by_metric)
    md += _retrieval_section(variants, by_v, by_metric)
    md += _calls_section(variants, by_v, by_metric, main_j, latency)
    md += _paired_section(variants, by_metric)
    md += _agreement_section(jsets)
    md += _memory_section(ok, main_j)

    # example
    if ok:
        d = next((x for x in ok if x["variant"] == "full"), ok[0])
        md += ["## Example dialogue", "", f"{d['case_id']} / {d['variant']} / memory={d['memory']}", ""]
        for t in d["turns"][:3]:
            md += [f"**User:** {t['query']}", "", f"**Assistant:** {t['reply'][:700]}", ""]

    _write_parquet(run, dialogues, main_j)
    if variants:
        _write_plots(run, variants, by_v, by_metric, main_j)
        md += ["![retrieval](retrieval.png)", ""]
    rp = run / "report.md"
    rp.write_text("\n".join(md), encoding="utf-8")
    return rp
