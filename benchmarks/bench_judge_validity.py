"""Judge validity: agreement of a judge with careful human labels on a hand-written probe set.

The labelled set lives in ``tests/fixtures/judge_validity/`` and was written by hand, with no
judge in the loop (issue 13, item 6):

- ``tasks.jsonl``: :class:`~shopping_companion.types.Task` records over every catalog source,
  single and add-on; reference products are real catalog products named by id;
- ``sessions.jsonl``: the tasks' histories (:class:`~shopping_companion.types.Session`), one
  needle session where the user states the preferences in their own words plus distractors;
- ``products.jsonl`` (optional): hand-written :class:`~shopping_companion.types.Product` records
  for edge cases the catalog lacks (``source: "handwritten"``); real products are never copied
  there, they are loaded by id from the catalog at run time;
- ``probes.jsonl``: one final answer per line, ``{"probe_id", "task_id", "stage", "tags",
  "answer", "returned_ids"?, "memory_session_ids"?, "label": {"success", "count", "h1"},
  "rationale"}``. ``count`` is m1 (stage 1) or m2 (stage 2); ``h1`` is the number of
  hallucinated identified preferences (stage 1, ``null`` for stage 2). ``returned_ids`` are the
  ids the trajectory's product tools returned (default: the recommended ids).

For every probe this module builds the :class:`~shopping_companion.types.Trajectory` the
environment would have produced (the answer parsed with the environment's own parser), judges
it, and compares the verdict with the label: stage success (``Verdict.success``), count
(``m1``/``m2``, exact) and, for stage 1, ``h1`` when the verdict has an ``h1`` field (judges
without one are reported as ``-``).

Usage::

    python benchmarks/bench_judge_validity.py [--data-dir PATH] [--judge rule|llm:MODEL[@URL]]
                                              [--show N] [--check] [--json OUT]

``--check`` exits 1 when success agreement < 0.97 or count agreement < 0.95 (issue 13 targets).
The catalog file is streamed once and only the referenced ids are kept (~6 s).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.catalog.loader import iter_products
from shopping_companion.envs.parsing import extract_rec_ids, parse_action, parse_preferences
from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import Product, Session, Step, Task, ToolCall, ToolResult, Trajectory, Verdict

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures" / "judge_validity"
CATALOG_REL = Path("catalog") / "products.jsonl.gz"

#: Issue 13 targets on this set.
TARGET_SUCCESS = 0.97
TARGET_COUNT = 0.95


# --------------------------------------------------------------------------- fixture


class ProbeLabel(BaseModel):
    """The human label: stage success, m1/m2 and (stage 1) the hallucination count."""

    model_config = ConfigDict(extra="forbid")
    success: bool
    count: int = Field(ge=0)
    h1: int | None = Field(default=None, ge=0)


class Probe(BaseModel):
    """One labelled final answer of one stage of one task."""

    model_config = ConfigDict(extra="forbid")
    probe_id: str
    task_id: str
    stage: int = Field(ge=1, le=2)
    tags: list[str] = Field(default_factory=list)
    answer: str
    returned_ids: list[str] | None = None
    memory_session_ids: list[str] | None = None
    label: ProbeLabel
    rationale: str = Field(min_length=1)


@dataclass
class Fixture:
    """The labelled set: tasks by id, sessions by id, probes in file order, hand-written products."""

    tasks: dict[str, Task]
    sessions: dict[str, Session]
    probes: list[Probe]
    handwritten: dict[str, Product] = field(default_factory=dict)

    def source_of(self, probe: Probe) -> str:
        """The catalog source of the probe's task (the source of its first reference product)."""
        return self.tasks[probe.task_id].slots[0].reference_product_id.split(":", 1)[0]


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: {e}") from e


def load_fixture(directory: str | Path = FIXTURE_DIR) -> Fixture:
    """Parse and validate every record of the labelled set (raises on the first invalid one)."""
    d = Path(directory)
    tasks = {t.task_id: t for t in (Task.model_validate(r) for r in _jsonl(d / "tasks.jsonl"))}
    sessions = {s.session_id: s for s in (Session.model_validate(r) for r in _jsonl(d / "sessions.jsonl"))}
    probes = [Probe.model_validate(r) for r in _jsonl(d / "probes.jsonl")]
    handwritten: dict[str, Product] = {}
    if (d / "products.jsonl").exists():
        for r in _jsonl(d / "products.jsonl"):
            p = Product.model_validate(r)
            if p.source != "handwritten":
                raise ValueError(f"products.jsonl: {p.product_id} must have source 'handwritten'")
            handwritten[p.product_id] = p
    return Fixture(tasks=tasks, sessions=sessions, probes=probes, handwritten=handwritten)


def recommended_ids(probe: Probe) -> list[str]:
    """The ``@REC::id@`` ids of a stage-2 answer (empty for stage 1)."""
    if probe.stage != 2:
        return []
    inner = parse_action(probe.answer).answer
    return extract_rec_ids(inner if inner is not None else probe.answer)[0]


def referenced_product_ids(fx: Fixture) -> set[str]:
    """Every product id the set names: reference products, recommended and returned ids."""
    ids = {s.reference_product_id for t in fx.tasks.values() for s in t.slots}
    for p in fx.probes:
        ids.update(recommended_ids(p))
        ids.update(p.returned_ids or [])
    return ids


def load_catalog_subset(ids: Iterable[str], data_dir: str | Path | None = None) -> dict[str, Product]:
    """Stream the catalog once and keep the products whose id is in ``ids``."""
    want = set(ids)
    path = resolve_data_dir(data_dir) / CATALOG_REL
    out: dict[str, Product] = {}
    for p in iter_products(path):
        if p.product_id in want:
            out[p.product_id] = p
            if len(out) == len(want):
                break
    return out


# --------------------------------------------------------------------------- trajectories


def build_trajectory(probe: Probe) -> Trajectory:
    """The trajectory the environment would record for this final answer.

    Stage 1: an optional ``mem_view`` step returning ``memory_session_ids``, then the answer turn;
    ``identified_preferences`` as the environment sets them (None when the answer does not parse).
    Stage 2: a ``product_view`` step returning ``returned_ids`` (default: the recommended ids), then
    the answer turn; ``recommended_ids`` from the ``@REC::id@`` markers.
    """
    steps: list[Step] = []
    if probe.stage == 1 and probe.memory_session_ids:
        call = ToolCall(name="mem_view", arguments={"session_ids": probe.memory_session_ids}, call_id="s1t0_0")
        steps.append(
            Step(
                assistant_text='<tool_call>{"name": "mem_view", "arguments": {"session_ids": '
                + json.dumps(probe.memory_session_ids)
                + "}}</tool_call>",
                tool_calls=[call],
                tool_results=[
                    ToolResult(
                        call_id=call.call_id,
                        name="mem_view",
                        content="(sessions)",
                        returned_ids=list(probe.memory_session_ids),
                    )
                ],
            )
        )
    rec = recommended_ids(probe)
    if probe.stage == 2:
        returned = list(probe.returned_ids) if probe.returned_ids is not None else list(rec)
        call = ToolCall(name="product_view", arguments={"product_ids": returned}, call_id="s2t0_0")
        steps.append(
            Step(
                assistant_text='<tool_call>{"name": "product_view", "arguments": {"product_ids": '
                + json.dumps(returned)
                + "}}</tool_call>",
                tool_calls=[call],
                tool_results=[
                    ToolResult(call_id=call.call_id, name="product_view", content="(products)", returned_ids=returned)
                ],
            )
        )
    parsed = parse_action(probe.answer)
    steps.append(Step(assistant_text=probe.answer))
    final = parsed.answer
    traj = Trajectory(
        task_id=probe.task_id,
        stage=probe.stage,
        steps=steps,
        final_answer=final,
        termination="answered" if final is not None else "max_turns",
    )
    if final is not None:
        if probe.stage == 1:
            prefs, err = parse_preferences(final)
            traj.identified_preferences = prefs if err is None else None
        else:
            traj.recommended_ids = rec
    return traj


# --------------------------------------------------------------------------- agreement


@dataclass
class Row:
    """One judged probe: the label, the verdict and whether they agree."""

    probe: Probe
    task: Task
    source: str
    verdict: Verdict | None
    error: str | None = None

    @property
    def judge_count(self) -> float | None:
        if self.verdict is None:
            return None
        return self.verdict.m1 if self.probe.stage == 1 else self.verdict.m2

    @property
    def judge_h1(self) -> int | None:
        v = self.verdict
        h = getattr(v, "h1", None) if v is not None else None
        return int(h) if isinstance(h, (int, float)) else None

    @property
    def success_ok(self) -> bool:
        return self.verdict is not None and not self.verdict.failed and self.verdict.success == self.probe.label.success

    @property
    def count_ok(self) -> bool:
        c = self.judge_count
        return c is not None and abs(float(c) - self.probe.label.count) < 1e-9

    @property
    def h1_ok(self) -> bool | None:
        """None when the label has no h1 (stage 2) or the judge reports none."""
        if self.probe.label.h1 is None or self.judge_h1 is None:
            return None
        return self.judge_h1 == self.probe.label.h1


def run_agreement(judge: Any, fx: Fixture) -> list[Row]:
    """Judge every probe; a judge exception is recorded on the row (and counts as disagreement)."""
    rows: list[Row] = []
    for p in fx.probes:
        task = fx.tasks[p.task_id]
        try:
            v = judge.judge(task, build_trajectory(p))
            rows.append(Row(p, task, fx.source_of(p), v))
        except Exception as e:  # noqa: BLE001 - reported, never hidden
            rows.append(Row(p, task, fx.source_of(p), None, f"{type(e).__name__}: {e}"))
    return rows


def _rate(rows: list[Row], key: Callable[[Row], bool | None]) -> tuple[float | None, int]:
    vals = [k for k in (key(r) for r in rows) if k is not None]
    return (sum(vals) / len(vals) if vals else None), len(vals)


def summarize(rows: list[Row]) -> dict[str, Any]:
    """Agreement overall and per stage / task type / source / tag (success, count, h1)."""

    def block(rs: list[Row]) -> dict[str, Any]:
        s, n = _rate(rs, lambda r: r.success_ok)
        c, _ = _rate(rs, lambda r: r.count_ok)
        h, nh = _rate(rs, lambda r: r.h1_ok)
        pos = sum(r.probe.label.success for r in rs)
        return {"n": n, "n_label_success": pos, "success": s, "count": c, "h1": h, "n_h1": nh}

    groups: dict[str, dict[str, list[Row]]] = {k: defaultdict(list) for k in ("stage", "task_type", "source", "tag")}
    for r in rows:
        groups["stage"][f"stage {r.probe.stage}"].append(r)
        groups["task_type"][r.task.task_type].append(r)
        groups["source"][r.source].append(r)
        for t in r.probe.tags:
            groups["tag"][t].append(r)
    return {
        "overall": block(rows),
        **{g: {k: block(v) for k, v in sorted(d.items())} for g, d in groups.items()},
        "errors": sum(r.error is not None for r in rows),
    }


def meets_targets(summary: Mapping[str, Any]) -> bool:
    o = summary["overall"]
    return (o["success"] or 0) >= TARGET_SUCCESS and (o["count"] or 0) >= TARGET_COUNT


# --------------------------------------------------------------------------- judges


def make_lookup(products: Mapping[str, Product]) -> Callable[[list[str]], dict[str, Product]]:
    def lookup(ids: list[str]) -> dict[str, Product]:
        return {i: products[i] for i in ids if i in products}

    return lookup


def make_judge(spec: str, products: Mapping[str, Product], sessions: Mapping[str, Session]) -> Any:
    """``rule`` → :class:`RuleJudge` (``lookup``, ``sessions``); ``llm:MODEL[@URL]`` → LLMJudge."""
    lookup = make_lookup(products)
    if spec == "rule":
        from shopping_companion.judges.rule import RuleJudge

        return RuleJudge(lookup, sessions=dict(sessions))
    if spec.startswith("llm:") and len(spec) > 4:
        from shopping_companion.judges.llm import LLMJudge

        model, _, url = spec[4:].partition("@")
        return LLMJudge.from_openai(model, url or None, lookup=lookup)
    raise SystemExit(f"--judge {spec!r}: expected rule, llm:MODEL or llm:MODEL@URL")


# --------------------------------------------------------------------------- report


def _fmt(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.3f}"


def print_report(summary: Mapping[str, Any], rows: list[Row], show: int, out=sys.stdout) -> None:
    def line(name: str, b: Mapping[str, Any]) -> None:
        h = f"{_fmt(b['h1'])} (n={b['n_h1']})" if b["n_h1"] else "   -  "
        print(
            f"  {name:<44} n={b['n']:>4} true={b['n_label_success']:>4}  success {_fmt(b['success'])}"
            f"  count {_fmt(b['count'])}  h1 {h}",
            file=out,
        )

    print("Judge validity on the hand-labelled set", file=out)
    line("overall", summary["overall"])
    for g in ("stage", "task_type", "source", "tag"):
        print(f"per {g.replace('_', ' ')}:", file=out)
        for k, b in summary[g].items():
            line(k, b)
    if summary["errors"]:
        print(f"judge errors: {summary['errors']}", file=out)
    bad = [r for r in rows if not (r.success_ok and r.count_ok and r.h1_ok is not False)]
    print(f"disagreements: {len(bad)} of {len(rows)}" + (f" (showing {min(show, len(bad))})" if bad else ""), file=out)
    for r in bad[:show]:
        v = r.verdict
        lab = r.probe.label
        got = (
            "ERROR " + (r.error or "") if v is None else (f"success={v.success} count={r.judge_count} h1={r.judge_h1}")
        )
        print(f"- {r.probe.probe_id} [stage {r.probe.stage}; {', '.join(r.probe.tags)}]", file=out)
        print(f"    label: success={lab.success} count={lab.count} h1={lab.h1} — {r.probe.rationale}", file=out)
        print(f"    judge: {got}", file=out)
        if v is not None:
            print("    reasons: " + " | ".join(v.reasons[:8]), file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=None, help="data directory holding catalog/products.jsonl.gz")
    ap.add_argument("--fixture-dir", default=str(FIXTURE_DIR))
    ap.add_argument("--judge", default="rule", help="rule | llm:MODEL | llm:MODEL@BASE_URL")
    ap.add_argument("--show", type=int, default=20, help="disagreeing probes to print")
    ap.add_argument(
        "--check", action="store_true", help=f"exit 1 below {TARGET_SUCCESS} success / {TARGET_COUNT} count"
    )
    ap.add_argument("--json", default=None, help="write the summary as JSON here")
    args = ap.parse_args(argv)

    fx = load_fixture(args.fixture_dir)
    ids = referenced_product_ids(fx)
    products = {**load_catalog_subset(ids - set(fx.handwritten), args.data_dir), **fx.handwritten}
    missing = sorted(ids - set(products))
    # ids a probe names on purpose as non-existent stay missing; anything else is a fixture error
    print(
        f"{len(fx.tasks)} tasks, {len(fx.probes)} probes, {len(products)} products loaded"
        + (f", {len(missing)} ids not in the catalog: {', '.join(missing)}" if missing else "")
    )
    judge = make_judge(args.judge, products, fx.sessions)
    rows = run_agreement(judge, fx)
    summary = summarize(rows)
    print_report(summary, rows, args.show)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    if args.check and not meets_targets(summary):
        o = summary["overall"]
        print(
            f"FAIL: success agreement {o['success']:.3f} (target {TARGET_SUCCESS}), "
            f"count agreement {o['count']:.3f} (target {TARGET_COUNT})"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
