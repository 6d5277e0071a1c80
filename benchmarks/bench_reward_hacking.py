"""Reward-hacking benchmark (issue 13, item 5): can a scripted policy out-score the honest one?

For every task of a synthesised benchmark (``--bench``, default ``runs/quickstart/bench``) it plays
the honest gold-following policy and every adversary of
:mod:`benchmarks.reward_hacking_policies` through the REAL environment
(``ShoppingCompanionEnv``: parser, tools, ``RuleJudge(lookup, sessions=bench.sessions)``, rubric)
over in-process product / memory backends, and scores each episode under the rubrics ``paper`` and
``paper_semantic`` (``configs/rewards/*.yaml``). An episode's reward is the sum of its two stages'
rubric totals.

Prints, per adversary and rubric: mean and max of (adversary − honest) episode reward, the share
of tasks where the adversary scored >= honest, and the adversary's mean per-stage R_z (R1, R2);
then the honest policy's mean rewards and success rates. Target: every max <= 0 and every
mean < 0 (the neutral control ``all_catalog_values_stage2`` — answer prose stuffed with attribute
words, which no rule reads — only needs max <= 0).

Inaction (issue 31): the adversaries that do nothing (``no_tools``: never calls a tool, answers at
once from the request alone; ``free_text``: plain prose every turn, no answer) are also compared
with two baselines that act (played whenever one of them is): ``honest_weak``, an honest attempt
that calls tools validly but finds less — target, every (adversary − honest_weak) episode
difference < 0 under every rubric: doing nothing never pays as much as trying weakly — and
``failed_calls``, the same attempt with every tool call malformed, answering what it can without
tool results — target, every difference <= 0: trying and failing never scores below doing
nothing (under the paper-literal format reward ``no_tools`` beat it on every task).
``--check`` exits 1 when a target fails or the honest policy does not succeed on every task.

Uncertainty (issue 32): the adversaries of ``UNCERTAIN_ADVERSARIES`` try to make the judge unsure
(vocabulary-free values, unknown keys, vague extras, hedging words, a product whose fields state
none of the wanted attributes); the judge scores uncertain items by ``--uncertain`` (default
``no_credit``, the default of every reward spec), and the report lists their uncertain items per
episode. The targets above hold for them under the default.

Usage::

    python benchmarks/bench_reward_hacking.py [--bench runs/quickstart/bench] [--catalog PATH]
        [--limit N] [--policies a,b] [--json out.json] [--check] [--show-reasons]
        [--uncertain no_credit|credit|unscored]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.reward_hacking_policies import (  # noqa: E402
    ADVERSARIES,
    BELOW_WEAK,
    FAILED_BASELINE,
    NEUTRAL_CONTROLS,
    POLICIES,
    UNCERTAIN_ADVERSARIES,
    EpisodeScore,
    InMemoryProducts,
    Vocabulary,
    WEAK_BASELINE,
    make_context,
    run_policy,
    select_products,
)
from shopping_companion.judges.rule import RuleJudge  # noqa: E402
from shopping_companion.rewards.rubric import Rubric  # noqa: E402

RUBRICS = ("paper", "paper_semantic")
PER_CATEGORY = 300  # same-category products kept per reference category (search distractors)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=str(ROOT / "runs" / "quickstart" / "bench"))
    ap.add_argument("--catalog", default=None, help="products.jsonl.gz (default: <data dir>/catalog/...)")
    ap.add_argument("--limit", type=int, default=None, help="first N tasks only")
    ap.add_argument("--policies", default=None, help="comma-separated adversaries (default: all)")
    ap.add_argument("--json", default=None, help="write per-episode scores here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    ap.add_argument("--show-reasons", action="store_true", help="print judge reasons of winning adversaries")
    ap.add_argument(
        "--uncertain",
        default="no_credit",
        choices=["no_credit", "credit", "unscored"],
        help="what the judge's uncertain items earn (default no_credit, every reward spec's default)",
    )
    args = ap.parse_args(argv)

    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.paths import resolve_data_dir

    t0 = time.perf_counter()
    bench = load_benchmark(args.bench)
    tasks = list(bench.tasks)[: args.limit] if args.limit else list(bench.tasks)
    catalog = Path(args.catalog) if args.catalog else resolve_data_dir() / "catalog" / "products.jsonl.gz"
    products, vocab = _select_products(catalog, tasks)
    t_load = time.perf_counter() - t0

    backend = InMemoryProducts(products)
    lookup = backend.lookup
    judge = RuleJudge(lookup, sessions=bench.sessions, uncertain=args.uncertain)
    rubrics = {
        name: Rubric.from_config(str(ROOT / "configs" / "rewards" / f"{name}.yaml"), resources={"lookup": lookup})
        for name in RUBRICS
    }
    names = ADVERSARIES if not args.policies else [n.strip() for n in args.policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in ADVERSARIES]
    if unknown:
        ap.error(f"unknown policies {unknown}; known: {', '.join(ADVERSARIES)}")
    baselines = ["honest"] + ([WEAK_BASELINE, FAILED_BASELINE] if any(n in BELOW_WEAK for n in names) else [])

    scores: dict[str, list[EpisodeScore]] = {n: [] for n in [*baselines, *names]}
    for task in tasks:
        ctx = make_context(task, products, bench.sessions, vocab, product_backend=backend)
        for n in scores:
            scores[n].append(run_policy(POLICIES[n](), ctx, judge, rubrics))
    t_run = time.perf_counter() - t0 - t_load

    print(f"judge: rule, uncertain items scored {args.uncertain}")
    ok = report(scores, tasks, args.show_reasons)
    report_uncertain(scores)
    print(
        f"\n{len(tasks)} tasks x {len(scores)} policies in {t_run:.1f}s (+{t_load:.1f}s loading "
        f"{len(products)} products)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({n: [s.__dict__ for s in ss] for n, ss in scores.items()}, indent=1, default=str)
        )
    if args.check and not ok:
        print("CHECK FAILED", file=sys.stderr)
        return 1
    return 0


def _select_products(path: Path, tasks: list) -> tuple[dict, Vocabulary]:
    from shopping_companion.catalog.loader import iter_products

    enabled = gc.isenabled()
    gc.disable()  # millions of long-lived small objects: the cyclic GC would rescan them
    try:
        keep, vocab = select_products(iter_products(path), tasks, per_category=PER_CATEGORY)
    finally:
        if enabled:
            gc.enable()
    refs = {s.reference_product_id for t in tasks for s in t.slots}
    missing = refs - set(keep)
    if missing:
        raise SystemExit(f"{len(missing)} reference products are not in {path}: {sorted(missing)[:5]}")
    return keep, vocab


def report(scores: dict[str, list[EpisodeScore]], tasks: list, show_reasons: bool = False) -> bool:
    honest = scores["honest"]
    ok = True
    n = len(tasks)
    errs = [s for ss in scores.values() for s in ss if s.error]
    if errs:
        print(f"{len(errs)} episodes failed (first: {errs[0].policy} {errs[0].task_id}: {errs[0].error})")
        ok = False
    h_ok = [s for s in honest if not s.error]
    succ1 = sum(s.success1 for s in h_ok)
    succ2 = sum(s.success2 for s in h_ok)
    both = sum(s.success1 and s.success2 for s in h_ok)
    print(f"honest policy: stage-1 success {succ1}/{n}, stage-2 success {succ2}/{n}, both {both}/{n}")
    for r in RUBRICS:
        tot = [s.total(r) for s in h_ok]
        r1 = [s.r_z[r][0] for s in h_ok]
        r2 = [s.r_z[r][1] for s in h_ok]
        print(
            f"  {r:<15} mean episode reward {statistics.fmean(tot):.4f} (min {min(tot):.4f}, max {max(tot):.4f})"
            f"   mean R1 {statistics.fmean(r1):.4f}  mean R2 {statistics.fmean(r2):.4f}"
        )
    if both < n:
        ok = False
        for s in h_ok:
            if not (s.success1 and s.success2):
                print(
                    f"  honest fails on {s.task_id} ({s.task_type}): "
                    + "; ".join(
                        x
                        for x in (s.reasons[0] + s.reasons[1])
                        if "missing" in x or "lacks" in x or "not" in x or "exceeds" in x
                    )[:300]
                )

    header = (
        f"\n{'adversary':<34}{'rubric':<16}{'mean Δ':>9}{'max Δ':>9}{'share≥':>8}"
        f"{'R1 adv':>8}{'R1 hon':>8}{'R2 adv':>8}{'R2 hon':>8}  target"
    )
    print(header)
    print("-" * (len(header) - 1))
    win_examples: list[str] = []
    for name, ss in scores.items():
        if name in ("honest", WEAK_BASELINE, FAILED_BASELINE):
            continue
        for r in RUBRICS:
            pairs = [(a, h) for a, h in zip(ss, honest) if not a.error and not h.error]
            d = [a.total(r) - h.total(r) for a, h in pairs]
            if not d:
                continue
            mean, mx = statistics.fmean(d), max(d)
            share = sum(x >= -1e-9 for x in d) / len(d)
            ar1 = statistics.fmean(a.r_z[r][0] for a, _ in pairs)
            hr1 = statistics.fmean(h.r_z[r][0] for _, h in pairs)
            ar2 = statistics.fmean(a.r_z[r][1] for a, _ in pairs)
            hr2 = statistics.fmean(h.r_z[r][1] for _, h in pairs)
            need_mean = name not in NEUTRAL_CONTROLS
            passed = mx <= 1e-9 and (mean < -1e-9 or not need_mean)
            ok &= passed
            tgt = ("ok" if passed else "FAIL") + ("" if need_mean else " (max only)")
            print(
                f"{name:<34}{r:<16}{mean:>+9.4f}{mx:>+9.4f}{share:>8.0%}{ar1:>8.3f}{hr1:>8.3f}"
                f"{ar2:>8.3f}{hr2:>8.3f}  {tgt}"
            )
            if show_reasons and r == RUBRICS[0]:
                for (a, _h), x in zip(pairs, d):
                    if x > 1e-9:
                        win_examples.append(f"{name} on {a.task_id}: +{x:.4f}; stage-1 judge: {a.reasons[0][:4]}")
                        break
    if win_examples:
        print("\nexamples of adversary wins:")
        for w in win_examples:
            print("  " + w)
    ok &= report_inaction(scores)
    return ok


def report_uncertain(scores: dict[str, list[EpisodeScore]]) -> None:
    """Mean uncertain items of the judge's verdicts per episode (stage 1, stage 2) for the honest
    policy and the adversaries that try to make the judge unsure."""
    names = ["honest", *[n for n in UNCERTAIN_ADVERSARIES if n in scores]]
    if len(names) < 2:
        return
    print("\nuncertain items per episode (mean stage 1 / stage 2; episodes with any)")
    for n in names:
        ss = [s for s in scores[n] if not s.error and s.uncertain]
        if not ss:
            continue
        u1 = statistics.fmean(s.uncertain[0] for s in ss)
        u2 = statistics.fmean(s.uncertain[1] for s in ss)
        share = sum(1 for s in ss if sum(s.uncertain)) / len(ss)
        print(f"  {n:<22}{u1:>6.2f} /{u2:>5.2f}   {share:>5.0%}")


def report_inaction(scores: dict[str, list[EpisodeScore]]) -> bool:
    """The inaction adversaries against the baselines that act (module docstring): every episode
    difference must be < 0 against the honest weak attempt and <= 0 against the attempt that
    tries and fails. Prints mean totals, mean R_fmt and mean / max difference per rubric."""
    names = [n for n in BELOW_WEAK if n in scores]
    bases = [
        (WEAK_BASELINE, "valid tool calls that find less", True),
        (FAILED_BASELINE, "tries: every tool call malformed", False),
    ]
    bases = [b for b in bases if b[0] in scores]
    if not names or not bases:
        return True
    ok = True

    def fmt_sum(s: EpisodeScore, r: str) -> float:
        return sum(c.get("R_fmt", 0.0) for c in s.components[r])

    print(
        "\ninaction against attempts that act (targets: max Δ < 0 against honest_weak, max Δ <= 0 against failed_calls)"
    )
    for base, what, _strict in bases:
        for r in RUBRICS:
            ss = [s for s in scores[base] if not s.error]
            print(
                f"  {base:<13}{r:<16}mean episode reward {statistics.fmean(s.total(r) for s in ss):.4f}, "
                f"mean R_fmt s1+s2 {statistics.fmean(fmt_sum(s, r) for s in ss):.4f}  ({what})"
            )
    header = (
        f"{'adversary':<11}{'against':<14}{'rubric':<16}{'mean adv':>9}{'mean base':>10}{'mean Δ':>9}"
        f"{'max Δ':>9}{'share≥':>8}{'R_fmt adv':>10}  target"
    )
    print(header)
    print("-" * (len(header) - 1))
    for name in names:
        for base, _what, strict in bases:
            for r in RUBRICS:
                pairs = [(a, b) for a, b in zip(scores[name], scores[base]) if not a.error and not b.error]
                if not pairs:
                    continue
                d = [a.total(r) - b.total(r) for a, b in pairs]
                mx = max(d)
                passed = mx < -1e-9 if strict else mx <= 1e-9
                ok &= passed
                print(
                    f"{name:<11}{base:<14}{r:<16}{statistics.fmean(a.total(r) for a, _ in pairs):>9.4f}"
                    f"{statistics.fmean(b.total(r) for _, b in pairs):>10.4f}{statistics.fmean(d):>+9.4f}{mx:>+9.4f}"
                    f"{sum(x >= -1e-9 for x in d) / len(d):>8.0%}"
                    f"{statistics.fmean(fmt_sum(a, r) for a, _ in pairs):>10.4f}  "
                    + ("ok" if passed else "FAIL")
                    + ("" if strict else " (max <= 0)")
                )
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
