"""Agreement between judges scoring the same results (App. E, "Multi-LLM Judge Consistency").

Input: a *verdict table* ``{judge_name: {item_key: Verdict}}`` — several judges' verdicts over the
same items, an item being one stage trajectory, keyed by any hashable the caller chooses; the
recommended key is ``(system, task_id, stage)`` (``system`` = the agent/policy evaluated, needed for
the per-system OPC). :func:`judge_all` builds the table by running judges over items.

Fields compared: the verdict fields ``q1 m1 c1 p2 q2 m2 n2 u2``, ``success`` (0/1) and ``reward``
(the outcome reward R_z of Eqs. 6–7, in [0, 1], so single and add-on items are on one scale).

Per judge pair and field, over the items both judged without failure and where the field applies:

- **exact agreement** — fraction of items with equal values;
- **Cohen's κ** — for the binary fields (q1, p2, q2, u2, success): ``(p_o − p_e) / (1 − p_e)`` with
  ``p_e`` from the two judges' marginals; ``nan`` when undefined (both judges constant and equal);
- **Pearson r** and **Spearman ρ** — ``nan`` when a vector is constant or has < 2 items.

**OPC** (Overall Performance Correlation, App. E): the mean ± standard deviation (population,
ddof = 0 — this reproduces the paper's 0.9547 ± 0.0289 from its Table 5) of the Pearson correlations
of every pair of judges' *score vectors*. Two vector choices are supported:

- ``by="system"`` (the paper's): one entry per evaluated system — the judge's mean of the field
  (default ``success``, i.e. the success rate) over that system's items;
- ``by="item"``: one entry per item — the judge's value of the field for it.

Only items every judge judged without failure enter OPC (so all vectors cover the same results);
pairs whose correlation is undefined are left out of the mean and counted. Spearman is reported
alongside. Failed verdicts are counted per judge and never compared as zeros.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Literal

from shopping_companion.markdown import markdown_table
from shopping_companion.types import EpisodeResult, Task, Trajectory, Verdict

__all__ = [
    "BINARY_FIELDS",
    "FIELDS",
    "AgreementReport",
    "OPCResult",
    "PairStats",
    "agreement_report",
    "cohen_kappa",
    "field_value",
    "items_from_results",
    "judge_all",
    "opc",
    "pearson",
    "score_vectors",
    "spearman",
]

FIELDS = ("q1", "m1", "c1", "p2", "q2", "m2", "n2", "u2", "success", "reward")
BINARY_FIELDS = frozenset({"q1", "p2", "q2", "u2", "success"})

VerdictTable = Mapping[str, Mapping[Hashable, Verdict]]


def field_value(v: Verdict, name: str) -> float | None:
    """The value of ``name`` for a non-failed verdict (None when it does not apply / is unset).

    ``success`` → 1.0/0.0; ``reward`` → R_z (Eqs. 6–7); other names → the verdict field.
    """
    if v.failed:
        return None
    if name == "success":
        return 1.0 if v.success else 0.0
    if name == "reward":
        from shopping_companion.rewards.outcome import outcome_reward

        try:
            return outcome_reward(v)
        except ValueError:
            return None
    x = getattr(v, name)
    return None if x is None else float(x)


# --------------------------------------------------------------------------- statistics


def cohen_kappa(a: Sequence[float], b: Sequence[float]) -> float:
    """Cohen's κ of two equally long label sequences; ``nan`` when empty or when p_e = 1."""
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa: lengths differ ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        return math.nan
    po = sum(1 for x, y in zip(a, b) if x == y) / n
    labels = set(a) | set(b)
    pe = sum((sum(1 for x in a if x == c) / n) * (sum(1 for y in b if y == c) / n) for c in labels)
    if pe >= 1.0:
        return math.nan
    return (po - pe) / (1.0 - pe)


def _corr(x: Sequence[float], y: Sequence[float], kind: str) -> float:
    if len(x) != len(y):
        raise ValueError(f"{kind}: lengths differ ({len(x)} vs {len(y)})")
    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    from scipy import stats

    r = stats.pearsonr(x, y)[0] if kind == "pearson" else stats.spearmanr(x, y)[0]
    return float(r)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson r; ``nan`` for fewer than 2 points or a constant vector."""
    return _corr(x, y, "pearson")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman ρ; ``nan`` for fewer than 2 points or a constant vector."""
    return _corr(x, y, "spearman")


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return math.nan, math.nan
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


# --------------------------------------------------------------------------- OPC


@dataclass
class OPCResult:
    """OPC: ``mean`` ± ``std`` (ddof 0) of the pairwise Pearson r over ``n_pairs`` defined pairs.

    ``pairs`` maps (judge A, judge B) to Pearson r; ``spearman_*`` likewise for Spearman ρ;
    ``labels`` are the vector positions (systems or items) and ``vectors`` the judges' scores.
    """

    mean: float
    std: float
    n_pairs: int
    n_undefined: int
    pairs: dict[tuple[str, str], float]
    spearman_mean: float
    spearman_std: float
    spearman_pairs: dict[tuple[str, str], float]
    by: str = "vector"
    field: str = ""
    labels: list[Any] = dc_field(default_factory=list)
    vectors: dict[str, list[float]] = dc_field(default_factory=dict)


def opc(
    vectors: Mapping[str, Sequence[float]], *, by: str = "vector", field_name: str = "", labels: Sequence[Any] = ()
) -> OPCResult:
    """OPC of judges' score vectors (all the same length): mean ± std (ddof 0) of pairwise Pearson.

    Raises ``ValueError`` for fewer than two judges or vectors of different lengths.
    """
    names = list(vectors)
    if len(names) < 2:
        raise ValueError("OPC needs at least two judges")
    lens = {len(v) for v in vectors.values()}
    if len(lens) != 1:
        raise ValueError(f"OPC: score vectors have different lengths {sorted(lens)}")
    pr: dict[tuple[str, str], float] = {}
    sr: dict[tuple[str, str], float] = {}
    for a, b in itertools.combinations(names, 2):
        pr[(a, b)] = pearson(list(vectors[a]), list(vectors[b]))
        sr[(a, b)] = spearman(list(vectors[a]), list(vectors[b]))
    m, s = _mean_std(list(pr.values()))
    sm, ss = _mean_std(list(sr.values()))
    n_def = sum(1 for r in pr.values() if not math.isnan(r))
    return OPCResult(
        m,
        s,
        n_def,
        len(pr) - n_def,
        pr,
        sm,
        ss,
        sr,
        by,
        field_name,
        list(labels),
        {k: list(v) for k, v in vectors.items()},
    )


def _common_items(table: VerdictTable, stage: int | None) -> list[Hashable]:
    judges = list(table)
    keys = set(table[judges[0]])
    for j in judges[1:]:
        keys &= set(table[j])
    out = [
        k
        for k in keys
        if all(not table[j][k].failed for j in judges) and (stage is None or table[judges[0]][k].stage == stage)
    ]
    try:
        return sorted(out)  # type: ignore[type-var]
    except TypeError:
        return sorted(out, key=repr)


def _default_system(key: Hashable) -> Any:
    if isinstance(key, tuple) and key:
        return key[0]
    raise ValueError(f"OPC by system: item key {key!r} is not a tuple starting with the system; pass system_of=...")


def score_vectors(
    table: VerdictTable,
    *,
    by: Literal["system", "item"] = "system",
    field_name: str = "success",
    stage: int | None = None,
    system_of: Callable[[Hashable], Any] | None = None,
) -> tuple[list[Any], dict[str, list[float]]]:
    """``(labels, {judge: vector})`` over the items every judge judged without failure.

    ``by="system"``: per system (``system_of(key)``, default ``key[0]``), the mean of the field over
    its items (success rate for ``success``); ``by="item"``: the field per item. ``stage`` keeps only
    items of that stage. Items where the field is None for some judge are skipped.
    """
    items = _common_items(table, stage)
    items = [k for k in items if all(field_value(table[j][k], field_name) is not None for j in table)]
    if by == "item":
        return items, {j: [float(field_value(table[j][k], field_name)) for k in items] for j in table}  # type: ignore[arg-type]
    if by != "system":
        raise ValueError(f"by: must be 'system' or 'item', got {by!r}")
    sys_of = system_of or _default_system
    groups: dict[Any, list[Hashable]] = {}
    for k in items:
        groups.setdefault(sys_of(k), []).append(k)
    try:
        labels = sorted(groups)
    except TypeError:
        labels = sorted(groups, key=repr)
    vecs = {
        j: [sum(float(field_value(table[j][k], field_name)) for k in groups[s]) / len(groups[s]) for s in labels]  # type: ignore[arg-type]
        for j in table
    }
    return labels, vecs


# --------------------------------------------------------------------------- the report


@dataclass
class PairStats:
    """One judge pair on one field: ``n`` compared items, exact ``agreement``, ``kappa`` (binary
    fields, else None), ``pearson``, ``spearman``."""

    judge_a: str
    judge_b: str
    field: str
    n: int
    agreement: float
    kappa: float | None
    pearson: float
    spearman: float


@dataclass
class AgreementReport:
    """Per-field and per-pair agreement, failures per judge, and OPC (module docstring)."""

    judges: list[str]
    n_items: int
    failures: dict[str, int]
    pairs: list[PairStats]
    opc: OPCResult | None = None

    def field_summary(self) -> dict[str, dict[str, float]]:
        """Per field: ``pairs``, ``items`` (mean per pair), mean ``agreement``, mean ``kappa``,
        mean ``pearson`` over the pairs that compared at least one item."""
        out: dict[str, dict[str, float]] = {}
        for f in FIELDS:
            ps = [p for p in self.pairs if p.field == f and p.n > 0]
            if not ps:
                continue
            kap = [p.kappa for p in ps if p.kappa is not None and not math.isnan(p.kappa)]
            prs = [p.pearson for p in ps if not math.isnan(p.pearson)]
            out[f] = {
                "pairs": float(len(ps)),
                "items": sum(p.n for p in ps) / len(ps),
                "agreement": sum(p.agreement for p in ps) / len(ps),
                "kappa": sum(kap) / len(kap) if kap else math.nan,
                "pearson": sum(prs) / len(prs) if prs else math.nan,
            }
        return out

    def pair(self, a: str, b: str, field_name: str = "success") -> PairStats:
        """The stats of judges ``a`` and ``b`` (either order) on one field; KeyError if absent."""
        for p in self.pairs:
            if p.field == field_name and {p.judge_a, p.judge_b} == {a, b}:
                return p
        raise KeyError((a, b, field_name))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (nan becomes None)."""

        def clean(x: Any) -> Any:
            if isinstance(x, float) and math.isnan(x):
                return None
            if isinstance(x, dict):
                return {(" | ".join(map(str, k)) if isinstance(k, tuple) else str(k)): clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x

        d: dict[str, Any] = {
            "judges": self.judges,
            "n_items": self.n_items,
            "failures": self.failures,
            "fields": clean(self.field_summary()),
            "pairs": [clean(p.__dict__) for p in self.pairs],
        }
        if self.opc is not None:
            o = self.opc
            d["opc"] = clean(
                {
                    "mean": o.mean,
                    "std": o.std,
                    "n_pairs": o.n_pairs,
                    "n_undefined": o.n_undefined,
                    "by": o.by,
                    "field": o.field,
                    "pairs": o.pairs,
                    "spearman_mean": o.spearman_mean,
                    "spearman_std": o.spearman_std,
                    "labels": [str(x) for x in o.labels],
                    "vectors": o.vectors,
                }
            )
        return d

    def to_markdown(self) -> str:
        """The report as Markdown tables."""

        def f(x: float | None, nd: int = 3) -> str:
            return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"

        lines = [
            "## Judge agreement",
            "",
            f"Judges: {', '.join(self.judges)} · items: {self.n_items} · failed verdicts (excluded, never scored): "
            + ", ".join(f"{j} {n}" for j, n in self.failures.items()),
            "",
        ]
        fields = [
            [name, int(s["pairs"]), f"{s['items']:.0f}", f(s["agreement"])]
            + [f(s["kappa"]) if name in BINARY_FIELDS else "–", f(s["pearson"])]
            for name, s in self.field_summary().items()
        ]
        columns = ["field", "judge pairs", "items per pair", "exact agreement", "Cohen's κ", "Pearson r"]
        lines.append(markdown_table(columns, fields, align=["", *["right"] * 5]))
        pairs = []
        for a, b in itertools.combinations(self.judges, 2):
            try:
                s, r = self.pair(a, b, "success"), self.pair(a, b, "reward")
            except KeyError:
                continue
            pairs.append([a, b, s.n, f(s.agreement), f(s.kappa), f(r.pearson), f(r.spearman)])
        columns = ["judge A", "judge B", "items", "success agreement", "success κ", "R_z Pearson", "R_z Spearman"]
        lines += ["", markdown_table(columns, pairs, align=["", "", *["right"] * 5])]
        if self.opc is not None:
            o = self.opc
            lines += [
                "",
                f"OPC (Pearson of per-{o.by} {o.field} vectors, mean ± std over judge pairs): "
                f"**{f(o.mean, 4)} ± {f(o.std, 4)}** ({o.n_pairs} pair(s)"
                + (f", {o.n_undefined} undefined" if o.n_undefined else "")
                + f", {len(o.labels)} {o.by}(s)); Spearman {f(o.spearman_mean, 4)} ± {f(o.spearman_std, 4)}.",
            ]
        return "\n".join(lines) + "\n"


def agreement_report(
    table: VerdictTable,
    *,
    fields: Sequence[str] = FIELDS,
    opc_by: Literal["system", "item"] | None = "system",
    opc_field: str = "success",
    opc_stage: int | None = 2,
    system_of: Callable[[Hashable], Any] | None = None,
) -> AgreementReport:
    """Compare every pair of judges of ``table`` on ``fields`` and compute OPC (module docstring).

    ``opc_by=None`` skips OPC; ``opc_stage`` restricts OPC to one stage (default 2: Succ).
    Raises ``ValueError`` for fewer than two judges or an unknown field.
    """
    judges = list(table)
    if len(judges) < 2:
        raise ValueError("agreement needs at least two judges")
    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise ValueError(f"unknown fields {bad}; known: {list(FIELDS)}")
    all_keys: set[Hashable] = set()
    for j in judges:
        all_keys |= set(table[j])
    failures = {j: sum(1 for v in table[j].values() if v.failed) for j in judges}
    pairs: list[PairStats] = []
    for a, b in itertools.combinations(judges, 2):
        common = [k for k in table[a] if k in table[b] and not table[a][k].failed and not table[b][k].failed]
        for name in fields:
            xs, ys = [], []
            for k in common:
                va, vb = table[a][k], table[b][k]
                if va.stage != vb.stage:
                    raise ValueError(f"item {k!r}: judges {a} and {b} judged different stages")
                x, y = field_value(va, name), field_value(vb, name)
                if x is None or y is None:
                    continue
                xs.append(x)
                ys.append(y)
            n = len(xs)
            agree = sum(1 for x, y in zip(xs, ys) if abs(x - y) < 1e-9) / n if n else math.nan
            kappa = cohen_kappa(xs, ys) if name in BINARY_FIELDS else None
            pairs.append(PairStats(a, b, name, n, agree, kappa, pearson(xs, ys), spearman(xs, ys)))
    result = None
    if opc_by is not None:
        labels, vecs = score_vectors(table, by=opc_by, field_name=opc_field, stage=opc_stage, system_of=system_of)
        result = opc(vecs, by=opc_by, field_name=opc_field, labels=labels)
    return AgreementReport(judges, len(all_keys), failures, pairs, result)


def judge_all(
    judges: Sequence[Any], items: Mapping[Hashable, tuple[Task, Trajectory]]
) -> dict[str, dict[Hashable, Verdict]]:
    """Run every judge over every item: ``{judge.name: {key: Verdict}}``.

    A judge with ``judge_many`` (the LLM judge: concurrent, cached) gets all items at once; others
    are called item by item. Judge names must be distinct.
    """
    names = [j.name for j in judges]
    if len(set(names)) != len(names):
        raise ValueError(f"judge names must be distinct, got {names}")
    keys = list(items)
    pairs = [items[k] for k in keys]
    out: dict[str, dict[Hashable, Verdict]] = {}
    for j in judges:
        if hasattr(j, "judge_many"):
            vs = j.judge_many(pairs)
        else:
            vs = [j.judge(t, tr) for t, tr in pairs]
        out[j.name] = dict(zip(keys, vs))
    return out


def items_from_results(
    results: Iterable[EpisodeResult], tasks: Mapping[str, Task], *, stages: Sequence[int] = (1, 2)
) -> tuple[dict[Hashable, tuple[Task, Trajectory]], dict[Hashable, Verdict]]:
    """Items to re-judge from evaluation results (``results.jsonl`` lines of one or more systems).

    Returns ``(items, recorded)``: ``items`` maps ``(policy, task_id, stage, trial)`` to
    ``(task, trajectory)`` for :func:`judge_all`; ``recorded`` maps the same keys to the verdict stored
    at evaluation time (a judge's column of the table for free). Results whose task is not in
    ``tasks`` raise ``KeyError`` naming it; duplicate keys keep the last line (a resumed run).
    """
    items: dict[Hashable, tuple[Task, Trajectory]] = {}
    recorded: dict[Hashable, Verdict] = {}
    for res in results:
        if res.task_id not in tasks:
            raise KeyError(f"result for task {res.task_id!r}: the task is not in the benchmark given")
        task = tasks[res.task_id]
        for st in res.stages:
            z = st.trajectory.stage
            if z not in stages:
                continue
            key = (res.policy, res.task_id, z, res.trial)
            items[key] = (task, st.trajectory)
            recorded[key] = st.verdict
    return items, recorded
