"""Benchmark statistics in the manner of the paper's App. A.1, and the needle "findability" measure.

:func:`compute_stats` returns a JSON-able dict; :func:`write_stats` writes ``stats.json``,
``stats.md`` and PNG histograms (matplotlib, Agg backend, no timestamps in the files, so the same
build gives the same bytes).

Reported:

* **categories** — the top 20 finest categories of the catalog's products (the product pool, as
  in the paper's figure) and of the benchmark's reference products, and the top-level categories;
* **history per user** — sessions and tokens per user (mean, median, std, min, max; tokens by
  :func:`~.common.count_tokens`, needles included);
* **wanted attributes per task** by task type (mean, median, quartiles, min, max);
* **alternatives** per task type (median, share with none, share at the cap);
* **needle depth** — relative position of needle sessions in the history (0 = oldest);
* **needle top-1 share** — the share of tasks whose top-ranked history turn for the *instruction*
  as query lies in a needle session: BM25 over the user's turns (tokens: the rule judge's
  normalisation; k1 = 0.9, b = 0.4, Lucene's idf), and MiniLM (the real ``mem_search`` of
  :class:`~shopping_companion.memory.store.MemoryStore`) on ``minilm_tasks`` tasks (a seeded
  sample; embedding every turn of a long history is the expensive part). Low shares mean the
  needles cannot be found by matching the request's words alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopping_companion.benchmark.synthesis.breadth import DEPARTMENTS, department
from shopping_companion.benchmark.synthesis.common import count_tokens
from shopping_companion.judges.rule import normalize_tokens
from shopping_companion.types import Product, Session, Task

__all__ = ["BM25TurnScorer", "compute_stats", "topic_queries", "write_stats"]

K1, B = 0.9, 0.4
TOKEN_METHOD = (
    "tokens = runs of word characters plus single punctuation marks (regex \\w+|[^\\w\\s]); "
    "0.89× the MiniLM WordPiece count on ShareGPT turns, 0.97× on SGD turns"
)


def _summary(xs: Sequence[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
    return {
        "n": len(s),
        "mean": round(statistics.fmean(s), 3),
        "median": round(statistics.median(s), 3),
        "std": round(statistics.pstdev(s), 3) if len(s) > 1 else 0.0,
        "q1": round(q[0], 3),
        "q3": round(q[2], 3),
        "min": s[0],
        "max": s[-1],
    }


class BM25TurnScorer:
    """BM25 over the turns of a user's history; per-session term statistics are cached."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[list[tuple[int, Counter[str]]], Counter[str]]] = {}

    def _session(self, s: Session) -> tuple[list[tuple[int, Counter[str]]], Counter[str]]:
        got = self._cache.get(s.session_id)
        if got is None:
            turns = []
            df: Counter[str] = Counter()
            for t in s.turns:
                toks = normalize_tokens(t.content)
                c = Counter(toks)
                turns.append((len(toks), c))
                df.update(c.keys())
            got = self._cache[s.session_id] = (turns, df)
        return got

    def top_session(self, query: str, history: Sequence[Session]) -> str | None:
        """Session id of the best-scoring turn (ties: earliest), None when nothing matches."""
        ranked = self.top_turns(query, history, 1)
        return ranked[0] if ranked else None

    def top_turns(self, query: str, history: Sequence[Session], k: int) -> list[str]:
        """Session ids of the ``k`` best-scoring turns, best first (a session once per turn it
        has among them; ties: earlier turn first); turns scoring 0 are never returned."""
        q = list(dict.fromkeys(normalize_tokens(query)))
        if not q:
            return []
        stats = [self._session(s) for s in history]
        n = sum(len(t) for t, _ in stats)
        if n == 0:
            return []
        avgdl = sum(length for t, _ in stats for length, _ in t) / n
        idf = {}
        for term in q:
            df = sum(d.get(term, 0) for _, d in stats)
            idf[term] = math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0
        scored: list[tuple[float, int, str]] = []
        order = 0
        for s, (turns, df) in zip(history, stats):
            if not any(df.get(t) for t in q):
                order += len(turns)
                continue
            for length, c in turns:
                score = 0.0
                for term in q:
                    tf = c.get(term)
                    if tf:
                        score += idf[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))
                if score > 1e-12:
                    scored.append((-round(score, 12), order, s.session_id))
                order += 1
        scored.sort()
        return [sid for _, _, sid in scored[:k]]


#: Turns a retriever returns in the difficulty measures (``mem_search``'s default top_k).
TOP_K = 10


def topic_queries(task: Task) -> list[str]:
    """Queries that name the preference topic but no value: one per product slot with wanted
    preferences, ``"<product type> <attribute> <attribute> preference"`` (``"men's t-shirt
    colour sleeve length preference"``), the query an agent that knows *what* to look for would
    send to ``mem_search``."""
    out = []
    for i, slot in enumerate(task.slots):
        labels = list(dict.fromkeys(p.attribute for p in task.preferences if p.slot == i))
        if labels:
            item = slot.product_type.replace("pair of ", "")
            out.append(f"{item} {' '.join(labels)} preference")
    return out or [task.instruction]


def _verbatim(tasks: list[Task], sessions: dict[str, Session]) -> dict[str, Any]:
    """The share of needle sessions stating a wanted gold value verbatim (:mod:`.verify`)."""
    from shopping_companion.benchmark.synthesis import verify

    fn = verify.verbatim_share
    got = fn(tasks, sessions)
    return {
        "needle_sessions": round(got.sessions, 4),
        "wanted_preferences": round(got.preferences, 4),
        "n_needle_sessions": got.n_sessions,
        "n_wanted_preferences": got.n_preferences,
    }


def _sources(tasks: list[Task], catalog: Sequence[Product]) -> dict[str, Any]:
    """Per catalog source: products in the catalog, tasks whose references come from it (by type;
    :func:`~shopping_companion.benchmark.metrics.task_source`)."""
    from shopping_companion.benchmark.metrics import task_source

    pool = Counter(p.source for p in catalog)
    rows: dict[str, dict[str, Any]] = {s: {"catalog": n, "single": 0, "addon": 0} for s, n in pool.items()}
    for t in tasks:
        row = rows.setdefault(task_source(t), {"catalog": 0, "single": 0, "addon": 0})
        row[t.task_type] = row.get(t.task_type, 0) + 1
    n = len(tasks) or 1
    for row in rows.values():
        row["tasks"] = row["single"] + row["addon"]
        row["share"] = round(row["tasks"] / n, 4)
    used = [s for s, r in rows.items() if r["tasks"]]
    return {
        "by_source": dict(sorted(rows.items(), key=lambda kv: (-kv[1]["tasks"], kv[0]))),
        "sources_used": len(used),
        "max_share": max((rows[s]["share"] for s in used), default=0.0),
    }


def _provenance_share(tasks: list[Task], by_id: dict[str, Product]) -> dict[str, Any]:
    """Where the reference product's value of each wanted preference comes from, as the rule
    judge reads it: ``structured`` (the source's own field), an extractor's field (``title``,
    ``description``, ``features``, ``category``, ``details``, ``llm``), ``option``, ``brand``, or
    free text the judge read directly; plus the share of numeric limits."""
    from shopping_companion.judges.matching import default_reader, parse_constraint

    reader = default_reader()
    counts: Counter[str] = Counter()
    numeric = 0
    total = 0
    for t in tasks:
        for pref in t.preferences:
            if pref.polarity != "want" or pref.slot >= len(t.slots):
                continue
            ref = by_id.get(t.slots[pref.slot].reference_product_id or "")
            if ref is None:
                continue
            total += 1
            if parse_constraint(pref.value) is not None and reader.m.key(pref.attribute).kind == "quantity":
                numeric += 1
            ev = reader.check(ref, pref)
            if ev.source == "attribute":
                key = ev.detail.split(" ", 1)[1].split("=", 1)[0] if " " in ev.detail else ""
                src = ref.attribute_sources.get(key) if getattr(ref, "attribute_sources", None) else None
                counts[f"extracted:{src.source}" if src is not None else "structured"] += 1
            else:
                counts[ev.source if ev.known else "unknown"] += 1
    return {
        "wanted_preferences": total,
        "by_provenance": {k: {"n": v, "share": round(v / total, 4)} for k, v in counts.most_common()},
        "extracted_share": round(sum(v for k, v in counts.items() if k.startswith("extracted:")) / total, 4)
        if total
        else None,
        "numeric_share": round(numeric / total, 4) if total else None,
    }


def _ability_counts(tasks: list[Task]) -> dict[str, Any]:
    """Tasks per ability (in :data:`~shopping_companion.types.ABILITIES` order; ``untagged``: none)
    and per stress variant (``original``: none), each as ``{"single", "addon", "all"}`` counts."""
    from shopping_companion.types import ABILITIES, STRESS_VARIANTS

    def count(names: list[str], of: Any) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for name in names:
            sub = [t for t in tasks if name in of(t)]
            if sub:
                out[name] = {
                    "single": sum(t.task_type == "single" for t in sub),
                    "addon": sum(t.task_type == "addon" for t in sub),
                    "all": len(sub),
                }
        return out

    return {
        "abilities": count([*ABILITIES, "untagged"], lambda t: t.abilities or ["untagged"]),
        "stress": count(["original", *STRESS_VARIANTS], lambda t: [t.stress or "original"]),
    }


def _sample(tasks: list[Task], k: int | None, seed: int) -> list[Task]:
    if k is None or k >= len(tasks):
        return list(tasks)
    return sorted(tasks, key=lambda t: hashlib.sha1(f"{seed}:{t.task_id}".encode()).hexdigest())[:k]


def compute_stats(
    tasks: list[Task],
    sessions: dict[str, Session],
    catalog: Sequence[Product],
    *,
    embedder: Any = None,
    minilm_tasks: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The statistics of a benchmark (module docstring). ``catalog``: the product pool.
    ``embedder``: MiniLM embedder for the MiniLM top-1 share (skipped when None or
    ``minilm_tasks == 0``)."""
    by_type: dict[str, list[Task]] = {"single": [], "addon": []}
    for t in tasks:
        by_type.setdefault(t.task_type, []).append(t)
    tok_cache: dict[str, int] = {}

    def stok(sid: str) -> int:
        if sid not in tok_cache:
            tok_cache[sid] = sum(count_tokens(x.content) for x in sessions[sid].turns)
        return tok_cache[sid]

    n_sessions = [len(t.history) for t in tasks]
    n_tokens = [sum(stok(r.session_id) for r in t.history) for t in tasks]
    ref_ids = {pid for t in tasks for pid in t.reference_product_ids}
    by_id = {p.product_id: p for p in catalog if p.product_id in ref_ids}
    ref_products = [by_id[pid] for t in tasks for pid in t.reference_product_ids if pid in by_id]
    depth = []
    for t in tasks:
        pos = {r.session_id: i for i, r in enumerate(t.history)}
        for sid in t.needle_session_ids:
            depth.append(pos[sid] / max(1, len(t.history) - 1))

    t0 = time.perf_counter()
    bm25 = BM25TurnScorer()
    top1_bm25: dict[str, list[bool]] = {k: [] for k in by_type}
    top10_bm25: dict[str, list[bool]] = {k: [] for k in by_type}
    topic10_bm25: dict[str, list[bool]] = {k: [] for k in by_type}
    for t in tasks:
        hist = [sessions[r.session_id] for r in t.history]
        needles = set(t.needle_session_ids)
        ranked = bm25.top_turns(t.instruction, hist, TOP_K)
        top1_bm25[t.task_type].append(bool(ranked) and ranked[0] in needles)
        top10_bm25[t.task_type].append(bool(needles & set(ranked)))
        found: set[str] = set()
        for q in topic_queries(t):
            found |= needles & set(bm25.top_turns(q, hist, TOP_K))
        topic10_bm25[t.task_type].append(found == needles)

    t1 = time.perf_counter()
    top1_minilm: dict[str, list[bool]] = {k: [] for k in by_type}
    top10_minilm: dict[str, list[bool]] = {k: [] for k in by_type}
    topic10_minilm: dict[str, list[bool]] = {k: [] for k in by_type}
    if embedder is not None and minilm_tasks != 0:
        from shopping_companion.memory.store import MemoryStore

        for t in _sample(tasks, minilm_tasks, seed):
            store = MemoryStore.from_pool(sessions, t.history, embedder)
            needles = set(t.needle_session_ids)
            hits = [h["session_id"] for h in store.search([t.instruction], top_k=TOP_K)]
            top1_minilm[t.task_type].append(bool(hits) and hits[0] in needles)
            top10_minilm[t.task_type].append(bool(needles & set(hits)))
            found = set()
            for q in topic_queries(t):
                found |= needles & {h["session_id"] for h in store.search([q], top_k=TOP_K)}
            topic10_minilm[t.task_type].append(found == needles)

    t2 = time.perf_counter()
    verbatim = _verbatim(tasks, sessions)

    def share(d: dict[str, list[bool]]) -> dict[str, Any]:
        allv = [x for v in d.values() for x in v]
        out: dict[str, Any] = {
            k: {"n": len(v), "share": round(sum(v) / len(v), 4) if v else None} for k, v in d.items()
        }
        out["all"] = {"n": len(allv), "share": round(sum(allv) / len(allv), 4) if allv else None}
        return out

    alt: dict[str, Any] = {}
    for k, ts in by_type.items():
        vals = [t.n_alternatives for t in ts if t.n_alternatives is not None]
        capped = [t for t in ts if t.verification and t.verification.alternatives_capped]
        alt[k] = {
            **_summary(vals),
            "share_zero": round(sum(v == 0 for v in vals) / len(vals), 4) if vals else None,
            "share_capped": round(len(capped) / len(ts), 4) if ts else None,
        }
    budget = [
        t.verification.over_budget_share
        for t in by_type.get("addon", [])
        if t.verification and t.verification.over_budget_share is not None
    ]
    return {
        "tasks": {
            "total": len(tasks),
            "by_type": {k: len(v) for k, v in by_type.items()},
            "by_split": dict(sorted(Counter(t.split for t in tasks).items())),
            "by_type_split": dict(sorted(Counter(f"{t.task_type}/{t.split}" for t in tasks).items())),
            "products_per_addon": _summary([t.n_products for t in by_type.get("addon", [])]),
            "by_ability": _ability_counts(tasks),
        },
        "categories": {
            "catalog_top20": Counter(p.category or "(none)" for p in catalog).most_common(20),
            "catalog_top_level_top20": Counter(
                (p.category_path[0] if p.category_path else "(none)") for p in catalog
            ).most_common(20),
            "reference_top20": Counter(p.category or "(none)" for p in ref_products).most_common(20),
            "reference_top_level": Counter(
                (p.category_path[0] if p.category_path else "(none)") for p in ref_products
            ).most_common(20),
            "catalog_products": len(catalog),
        },
        "history": {
            "sessions_per_user": _summary(n_sessions),
            "tokens_per_user": _summary(n_tokens),
            "token_method": TOKEN_METHOD,
        },
        "attributes_per_task": {k: _summary([len(t.preferences) for t in v]) for k, v in by_type.items()},
        "dont_care_per_task": {k: _summary([len(t.dont_care) for t in v]) for k, v in by_type.items()},
        "alternatives": alt,
        "addon_over_budget_share": _summary(budget),
        "needles": {
            "per_task": {k: _summary([len(t.needle_session_ids) for t in v]) for k, v in by_type.items()},
            "relative_depth": _summary(depth),
        },
        "needle_top1": {"bm25": share(top1_bm25), "minilm": share(top1_minilm)},
        "needle_top10": {"bm25": share(top10_bm25), "minilm": share(top10_minilm)},
        "needle_topic_top10": {"bm25": share(topic10_bm25), "minilm": share(topic10_minilm)},
        "needle_verbatim": verbatim,
        "sources": _sources(tasks, catalog),
        "departments": {
            "catalog": Counter(department(p) for p in catalog).most_common(),
            "reference": Counter(department(p) for p in ref_products).most_common(),
        },
        "provenance": _provenance_share(tasks, by_id),
        "changes": {
            "tasks_with_changes": sum(1 for t in tasks if t.changes),
            "sessions_replaced": sum(1 for t in tasks for c in t.changes if c.kind == "session_replaced"),
        },
        "_timings": {"stats_bm25_s": round(t1 - t0, 2), "stats_minilm_s": round(t2 - t1, 2)},  # build log only
        "_series": {  # raw series for the plots (not in stats.md)
            "sessions": n_sessions,
            "tokens": n_tokens,
            "attributes": {k: [len(t.preferences) for t in v] for k, v in by_type.items()},
            "alternatives": {k: [t.n_alternatives or 0 for t in v] for k, v in by_type.items()},
        },
    }


# --------------------------------------------------------------------------- writing


def _fmt(s: dict[str, Any]) -> str:
    if not s or not s.get("n"):
        return "–"
    return (
        f"{s['mean']:,} (median {s['median']:,}, std {s['std']:,}, IQR {s['q1']:,}–{s['q3']:,}, "
        f"range {s['min']:,}–{s['max']:,}; n={s['n']})"
    )


def _share(x: dict[str, Any]) -> str:
    return "–" if x.get("share") is None else f"{100 * x['share']:.1f}% (n={x['n']})"


_PNGS = ("categories.png", "history.png", "attributes.png", "alternatives.png")


def _plots(d: Path, st: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = {"Software": None}
    written = []
    series = st["_series"]

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    for ax, key, title in (
        (axes[0], "catalog_top_level_top20", "Product pool: top-level categories"),
        (axes[1], "catalog_top20", "Product pool: top 20 categories"),
        (axes[2], "reference_top20", "Reference products: top 20 categories"),
    ):
        items = st["categories"][key]
        names = [str(n)[:28] for n, _ in items][::-1]
        ax.barh(names, [c for _, c in items][::-1], color="#4c72b0")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(d / "categories.png", dpi=90, metadata=meta)
    plt.close(fig)
    written.append("categories.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].hist(series["sessions"], bins=20, color="#55a868")
    axes[0].set_title("Sessions per user")
    axes[1].hist([x / 1000 for x in series["tokens"]], bins=20, color="#c44e52")
    axes[1].set_title("Tokens per user (thousands)")
    fig.tight_layout()
    fig.savefig(d / "history.png", dpi=90, metadata=meta)
    plt.close(fig)
    written.append("history.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    attrs = series["attributes"]
    hi = max([max(v) for v in attrs.values() if v] + [1])
    bins = [x - 0.5 for x in range(0, hi + 2)]
    for k, color in (("single", "#4c72b0"), ("addon", "#dd8452")):
        if attrs.get(k):
            ax.hist(attrs[k], bins=bins, alpha=0.7, label=f"{k} (mean {statistics.fmean(attrs[k]):.1f})", color=color)
    ax.set_xlabel("wanted attributes per task")
    ax.legend()
    fig.tight_layout()
    fig.savefig(d / "attributes.png", dpi=90, metadata=meta)
    plt.close(fig)
    written.append("attributes.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, color in (("single", "#4c72b0"), ("addon", "#dd8452")):
        vals = series["alternatives"].get(k) or []
        if vals:
            ax.hist([math.log10(1 + v) for v in vals], bins=20, alpha=0.7, label=k, color=color)
    ax.set_xlabel("log10(1 + alternatives)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(d / "alternatives.png", dpi=90, metadata=meta)
    plt.close(fig)
    written.append("alternatives.png")
    return written


def _calibration_md(cal: dict[str, Any]) -> str:
    """The reference policy's Succ by source and task type (``cal`` from :mod:`..calibrate`)."""
    rows = [
        f"Reference policy ({cal.get('policy', 'reference')}) Succ by source and task type "
        f"({cal.get('episodes', 0)} episodes):",
        "",
        "| source | single | addon | all |",
        "|---|---|---|---|",
    ]

    def cell(x: dict[str, Any] | None) -> str:
        if not x or not x.get("n"):
            return "–"
        return f"{100 * x['succ']:.1f}% (n={x['n']})"

    for name, r in cal.get("by_source", {}).items():
        rows.append(f"| {name} | {cell(r.get('single'))} | {cell(r.get('addon'))} | {cell(r.get('all'))} |")
    for key, what in (("by_ability", "memory ability"), ("by_stress", "stress variant")):
        table = cal.get(key) or {}
        if all(set(row) <= {"untagged", "original"} for row in table.values()):
            continue
        rows += [
            "",
            f"Reference policy Acc and Succ per {what}:",
            "",
            f"| strategy | {what} | Acc | Succ |",
            "|---|---|---|---|",
        ]
        for strategy, row in table.items():
            for g, c in row.items():
                acc = "–" if c.get("acc") is None else f"{100 * c['acc']:.1f}%"
                rows.append(f"| {strategy} | {g} | {acc} | {cell(c)} |")
    return "\n".join(rows)


def _ability_rows(by: dict[str, Any]) -> list[str]:
    """The tasks-per-ability (and per stress variant, when there are variants) table of stats.md."""
    rows = ["## Abilities", "", "| ability | single | addon | all |", "|---|---|---|---|"]
    rows += [f"| {k} | {v['single']} | {v['addon']} | {v['all']} |" for k, v in by.get("abilities", {}).items()]
    stress = by.get("stress", {})
    if set(stress) - {"original"}:
        rows += ["", "| stress variant | single | addon | all |", "|---|---|---|---|"]
        rows += [f"| {k} | {v['single']} | {v['addon']} | {v['all']} |" for k, v in stress.items()]
    return [*rows, ""] if len(rows) > 4 else []


def _findability_rows(st: dict[str, Any]) -> list[str]:
    """The rows of the needle-findability table, then the verbatim-needle share and the calibration (when known)."""
    lines: list[str] = []
    for name in ("bm25", "minilm"):
        for label, key in (
            ("bare top-1", "needle_top1"),
            ("bare top-10", "needle_top10"),
            ("topic top-10", "needle_topic_top10"),
        ):
            x = st.get(key, {}).get(name)
            if not x:
                continue
            lines.append(
                f"| {name} | {label} | {_share(x.get('single', {}))} | {_share(x.get('addon', {}))} | "
                f"{_share(x['all'])} |"
            )
    vb = st.get("needle_verbatim") or {}
    if vb:
        lines += [
            "",
            f"Needle sessions that state a wanted gold value verbatim: {100 * vb['needle_sessions']:.1f}% of "
            f"{vb['n_needle_sessions']}; wanted preferences stated verbatim: {100 * vb['wanted_preferences']:.1f}% of "
            f"{vb['n_wanted_preferences']} (lower = preferences said the way people talk).",
        ]
    cal = st.get("calibration")
    if cal:
        lines += ["", _calibration_md(cal)]
    return lines


def _category_tables(st: dict[str, Any]) -> list[str]:
    """The top-20 category tables of the product pool and the reference products, and their plot."""
    lines: list[str] = []
    for title, ka, kb in (
        ("Top-level categories", "catalog_top_level_top20", "reference_top_level"),
        ("Finest categories", "catalog_top20", "reference_top20"),
    ):
        lines += [f"{title}:", "", "| product pool | n | reference products | n |", "|---|---|---|---|"]
        cat, ref = st["categories"][ka], st["categories"][kb]
        for i in range(max(len(cat), len(ref))):
            a = cat[i] if i < len(cat) else ("", "")
            b = ref[i] if i < len(ref) else ("", "")
            lines.append(f"| {a[0]} | {a[1]} | {b[0]} | {b[1]} |")
        lines.append("")
    lines += ["![categories](categories.png)", ""]
    return lines


def _source_sections(st: dict[str, Any]) -> list[str]:
    """The sources, departments and attribute-provenance sections (each when the statistics have it)."""
    lines: list[str] = []
    src = st.get("sources")
    if src:
        lines += [
            "## Sources",
            "",
            f"Reference products come from {src['sources_used']} of {len(src['by_source'])} catalog "
            f"source{'s' if len(src['by_source']) != 1 else ''}; the largest holds {100 * src['max_share']:.1f}% "
            "of the tasks (a build restricted to fewer sources than 1 / max_source_share cannot meet the cap).",
            "",
            "| source | products in the catalog | tasks | share | single | add-on |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in src["by_source"].items():
            lines.append(
                f"| {name} | {r['catalog']:,} | {r['tasks']} | {100 * r['share']:.1f}% | {r['single']} | {r['addon']} |"
            )
        lines.append("")
    deps = st.get("departments")
    if deps:
        cat, ref = dict(deps["catalog"]), dict(deps["reference"])
        lines += [
            "## Departments (top level, the same for every source)",
            "",
            f"Departments among the reference products (not counting Other): "
            f"{sum(1 for k, v in ref.items() if v and k != 'Other')}.",
            "",
            "| department | products in the pool | reference products |",
            "|---|---|---|",
        ]
        for name in DEPARTMENTS:
            if cat.get(name) or ref.get(name):
                lines.append(f"| {name} | {cat.get(name, 0):,} | {ref.get(name, 0)} |")
        lines.append("")
    prov = st.get("provenance")
    if prov and prov.get("wanted_preferences"):
        lines += [
            "## Attribute provenance of wanted preferences",
            "",
            "Where the reference product's value comes from, as the rule judge reads it (`structured`: the "
            "source's own field; `extracted:<field>`: the attribute extractor read it from that field).",
            "",
            "| provenance | preferences | share |",
            "|---|---|---|",
        ]
        for k, v in prov["by_provenance"].items():
            lines.append(f"| {k} | {v['n']} | {100 * v['share']:.1f}% |")
        lines += [
            "",
            f"Extracted: {100 * (prov['extracted_share'] or 0):.1f}%; numeric limits: "
            f"{100 * (prov['numeric_share'] or 0):.1f}% of {prov['wanted_preferences']} wanted preferences.",
            "",
        ]
    return lines


def write_stats(directory: str | Path, st: dict[str, Any], verification: dict[str, Any] | None = None) -> list[str]:
    """Write ``stats.json``, ``stats.md`` and the PNGs into ``directory``; returns the file names."""
    d = Path(directory)
    public = {k: v for k, v in st.items() if not k.startswith("_")}
    if verification is not None:
        public["verification"] = verification
    (d / "stats.json").write_text(
        json.dumps(public, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    # the plots need the raw series, which stats.json does not keep: a rewrite from stats.json
    # (e.g. calibration) leaves the PNGs of the build in place
    pngs = _plots(d, st) if "_series" in st else [n for n in _PNGS if (d / n).is_file()]
    t = st["tasks"]
    lines = [
        "# Benchmark statistics",
        "",
        f"{t['total']} tasks: "
        + ", ".join(f"{k} {v}" for k, v in t["by_type"].items())
        + "; "
        + ", ".join(f"{k} {v}" for k, v in t["by_split"].items())
        + ".",
        "",
        *_ability_rows(t.get("by_ability") or {}),
        "## Wanted attributes per task",
        "",
        "| task type | attributes per task |",
        "|---|---|",
    ]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in st["attributes_per_task"].items()]
    lines += [
        "",
        f"Products per add-on deal: {_fmt(t['products_per_addon'])}",
        "",
        "![attributes](attributes.png)",
        "",
        "## History per user",
        "",
        f"- sessions: {_fmt(st['history']['sessions_per_user'])}",
        f"- tokens: {_fmt(st['history']['tokens_per_user'])}",
        f"- token counting: {st['history']['token_method']}",
        "- needle sessions per task: " + "; ".join(f"{k} {_fmt(v)}" for k, v in st["needles"]["per_task"].items()),
        f"- needle relative depth (0 = oldest): {_fmt(st['needles']['relative_depth'])}",
        f"- tasks whose haystack was denoised: {st['changes']['tasks_with_changes']} "
        f"({st['changes']['sessions_replaced']} sessions replaced)",
        "",
        "![history](history.png)",
        "",
        "## Difficulty calibration",
        "",
        "Needle findability over each user's history, turn by turn. *bare top-1 / top-10*: the task's",
        "instruction is the query and a needle turn ranks first / is among the top 10 turns (lower = the",
        "request's words alone do not find the preferences). *topic top-10*: one query per product",
        "naming its type and the attributes asked about, no value (`"
        + "men's t-shirt colour sleeve length preference"
        + "`); every needle session",
        "has a turn among the top 10 (higher = an agent that knows what to look for finds them).",
        f"MiniLM is the real `mem_search` on a sample of tasks; BM25 scores every task (k1 = {K1}, b = {B}).",
        "",
        "| retriever | measure | single | addon | all |",
        "|---|---|---|---|---|",
    ]
    lines += _findability_rows(st)

    lines += [
        "",
        "## Alternatives (other products / bundles the rule judge accepts)",
        "",
        "| task type | alternatives | share with none | share at cap |",
        "|---|---|---|---|",
    ]
    for k, v in st["alternatives"].items():
        z = "–" if v.get("share_zero") is None else f"{100 * v['share_zero']:.1f}%"
        c = "–" if v.get("share_capped") is None else f"{100 * v['share_capped']:.1f}%"
        lines.append(f"| {k} | {_fmt(v)} | {z} | {c} |")
    lines += [
        "",
        f"Add-on budget tightness (share of one-product substitutions that break the budget): "
        f"{_fmt(st['addon_over_budget_share'])}",
        "",
        "![alternatives](alternatives.png)",
        "",
        "## Categories (top 20)",
        "",
    ]
    lines += _category_tables(st)

    lines += _source_sections(st)

    if verification is not None:
        lines += ["## Verification", "", "```json", json.dumps(verification, indent=2, sort_keys=True), "```", ""]
    (d / "stats.md").write_text("\n".join(lines), encoding="utf-8")
    return ["stats.json", "stats.md", *pngs]
