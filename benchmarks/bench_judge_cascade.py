"""LLM-judge calls a cascade saves (issue 32, item 2): how many stages the rule judge is unsure of.

A :class:`~shopping_companion.judges.cascade.CascadeJudge` sends a stage to the LLM judge exactly
when the rule judge's verdict has an uncertain item (``Verdict.uncertain > 0``; a no-answer verdict
never). The LLM judge alone asks once per stage with a final answer. So, judging every stage with
the rule judge over the benchmark's sessions and the catalog, this script counts

- ``LLM-only``: stages with a final answer (the paper's protocol: one request each);
- ``cascade``: those with an uncertain item (one request each, only the uncertain items decided);
- ``saved`` = 1 − cascade / LLM-only, and the ratio LLM-only / cascade;
- prompt characters of those requests (the LLM judge's own prompts, built, never sent);

for two policies on the quickstart benchmark (``runs/quickstart/bench``, built by
``shopcomp quickstart``):

``reference``
    the trajectories the quickstart recorded for the reference policy (``runs/quickstart/results.jsonl``,
    the rule-based baseline), re-judged;
``paraphrase``
    a scripted policy that plays the honest gold-following episode of
    ``benchmarks/reward_hacking_policies.py`` in the real environment but words every stage-1 value
    the way a shopper talks ("long sleeves" → "sleeves down to the wrist", "Black" → "something in
    black", "at most 170 cm" → "no more than 1.7 metres"); stage 2 recommends the reference product(s).

Prints per policy and stage: stages, LLM-only and cascade calls, the share saved, the median
uncertain items per stage and per uncertain stage, the median LLM calls per episode, and the
uncertain items by reason. Usage::

    python benchmarks/bench_judge_cascade.py [--bench runs/quickstart/bench]
        [--results runs/quickstart/results.jsonl] [--catalog PATH] [--limit N] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.reward_hacking_policies import (  # noqa: E402
    Honest,
    InMemoryProducts,
    _pref,
    make_context,
    select_products,
)
from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv  # noqa: E402
from shopping_companion.envs.tools import ToolBox  # noqa: E402
from shopping_companion.judges.rule import RuleJudge  # noqa: E402
from shopping_companion.types import Verdict  # noqa: E402

#: Everyday wordings of common values, written as a shopper would say them (not from the lexicon).
EVERYDAY = {
    "long sleeves": "sleeves down to the wrist",
    "short sleeves": "short sleeves that stop above the elbow",
    "quarter sleeves": "sleeves that end just below the elbow",
    "solid": "plain, just one colour",
    "printed": "with a print on it",
    "regular fit": "a normal fit, not tight",
    "round neck": "a simple round neckline",
    "mandarin collar": "a short stand-up collar",
    "shirt collar": "a proper collar like a shirt",
    "casual": "for everyday, nothing formal",
    "everyday": "something I can use every day",
    "plastic": "made of plastic",
    "leather": "real leather",
    "cotton": "pure cotton",
    "synthetic": "man-made material",
    "high rise": "sits high on the waist",
    "light fade": "a slightly faded wash",
    "digital": "a digital display, with numbers",
    "transparent": "see-through",
    "clear": "see-through",
    "organic": "organic only",
}
FRAMES = ("something in {v}", "{v} if you have it", "I'd go for {v}", "preferably {v}")


def everyday(attribute: str, value: str, k: int) -> str:
    """The shopper's wording of one gold value: a table entry, a bound in other units, or the value
    in an everyday frame (the ``k``-th)."""
    low = value.strip().lower()
    if low in EVERYDAY:
        return EVERYDAY[low]
    words = low.split()
    if len(words) == 4 and words[:2] == ["at", "most"] and words[3] == "cm":
        try:
            return f"no more than {float(words[2]) / 100:g} metres"
        except ValueError:
            pass
    return FRAMES[k % len(FRAMES)].format(v=low)


class Paraphrase(Honest):
    """The honest gold-following policy with every stage-1 value in everyday words."""

    name = "paraphrase"
    description = "honest episode; stage-1 values reworded into everyday language"

    def stage1_prefs(self, ctx):
        return [_pref(g, value=everyday(g.attribute, g.value, k)) for k, g in enumerate(ctx.task.preferences)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=str(ROOT / "runs" / "quickstart" / "bench"))
    ap.add_argument("--results", default=str(ROOT / "runs" / "quickstart" / "results.jsonl"))
    ap.add_argument("--catalog", default=None, help="products.jsonl.gz (default: <data dir>/catalog/...)")
    ap.add_argument("--limit", type=int, default=None, help="first N tasks only")
    ap.add_argument("--json", default=None, help="write the counts here")
    args = ap.parse_args(argv)

    from shopping_companion.benchmark.report import final_results, read_results
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.catalog.loader import iter_products
    from shopping_companion.paths import resolve_data_dir

    t0 = time.perf_counter()
    bench = load_benchmark(args.bench)
    tasks = list(bench.tasks)[: args.limit] if args.limit else list(bench.tasks)
    by_id = {t.task_id: t for t in tasks}
    results_path = Path(args.results)
    if not results_path.is_file():
        raise SystemExit(f"{results_path}: no recorded reference-policy results; run `shopcomp quickstart` first")
    recorded = [r for r in final_results(read_results(results_path)) if r.task_id in by_id and r.stages]
    wanted = {i for r in recorded for st in r.stages for i in st.trajectory.recommended_ids}
    catalog = Path(args.catalog) if args.catalog else resolve_data_dir() / "catalog" / "products.jsonl.gz"
    extra: dict[str, Any] = {}

    def stream():
        for p in iter_products(catalog):
            if p.product_id in wanted:
                extra[p.product_id] = p
            yield p

    gc.disable()  # millions of long-lived small objects: the cyclic GC would rescan them
    try:
        products, vocab = select_products(stream(), tasks)
    finally:
        gc.enable()
    products = {**extra, **products}
    backend = InMemoryProducts(products)
    judge = RuleJudge(backend.lookup, sessions=bench.sessions)
    prompts = _PromptSizes(backend.lookup)
    t_load = time.perf_counter() - t0

    rows: dict[str, list[list[Verdict]]] = {"reference": [], "paraphrase": []}
    sizes: dict[str, list[tuple[Verdict, int]]] = {"reference": [], "paraphrase": []}
    for r in recorded:
        task = by_id[r.task_id]
        vs = [judge.judge(task, st.trajectory) for st in r.stages]
        rows["reference"].append(vs)
        sizes["reference"] += [(v, prompts(task, st.trajectory, v)) for v, st in zip(vs, r.stages)]
    policy = Paraphrase()
    for task in tasks:
        ctx = make_context(task, products, bench.sessions, vocab, product_backend=backend)
        env = ShoppingCompanionEnv(
            task, ToolBox(ctx.product_backend, ctx.memory_backend), judge, EnvConfig(max_turns=20)
        )
        env.reset(seed=0)
        while not env.done:
            env.step(policy.respond(ctx, env.stage, len(env.trajectory.steps), env.messages))
        res = env.episode_result(policy=policy.name)
        rows["paraphrase"].append([st.verdict for st in res.stages])
        sizes["paraphrase"] += [(st.verdict, prompts(task, st.trajectory, st.verdict)) for st in res.stages]
    t_run = time.perf_counter() - t0 - t_load

    print(
        f"quickstart benchmark {args.bench}: {len(tasks)} tasks; reference results {results_path} ({len(recorded)} episodes)"
    )
    print(
        "a cascade asks the LLM judge for a stage iff the rule judge is uncertain about one of its items; "
        "the LLM judge alone asks for every stage with a final answer\n"
    )
    head = (
        f"{'policy':<12}{'stage':<7}{'stages':>7}{'LLM-only':>9}{'cascade':>9}{'saved':>8}{'ratio':>7}"
        f"{'med unc/stage':>14}{'med unc/unc stage':>18}{'prompt chars saved':>20}"
    )
    print(head)
    print("-" * len(head))
    out: dict[str, Any] = {}
    for name, eps in rows.items():
        for stage in (1, 2, None):
            vs = [v for ep in eps for v in ep if stage is None or v.stage == stage]
            sz = [(v, n) for v, n in sizes[name] if stage is None or v.stage == stage]
            c = _counts(vs, sz)
            out.setdefault(name, {})[f"stage{stage}" if stage else "all"] = c
            print(
                f"{name:<12}{stage or 'both'!s:<7}{c['stages']:>7}{c['llm_only_calls']:>9}{c['cascade_calls']:>9}"
                f"{_pct(c['saved_share']):>8}{_ratio(c['ratio']):>7}{c['median_uncertain_per_stage']:>14g}"
                f"{_num(c['median_uncertain_per_uncertain_stage']):>18}{_pct(c['prompt_chars_saved_share']):>20}"
            )
        calls = [sum(1 for v in ep if _asks(v)) for ep in eps]
        reasons = Counter(it["reason"] for ep in eps for v in ep for it in v.items if not it["confident"])
        out[name]["median_llm_calls_per_episode"] = statistics.median(calls) if calls else None
        out[name]["reasons"] = dict(reasons.most_common())
        print(
            f"{'':<12}median LLM calls per episode: cascade {statistics.median(calls) if calls else 0:g}, LLM-only "
            f"{statistics.median([sum(1 for v in ep if _answered(v)) for ep in eps]) if eps else 0:g}; uncertain "
            "items by reason: " + (", ".join(f"{k} {n}" for k, n in reasons.most_common()) or "none")
        )
    print(f"\n{len(tasks)} tasks, 2 policies in {t_run:.1f}s (+{t_load:.1f}s loading {len(products)} products)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def _answered(v: Verdict) -> bool:
    """The LLM judge alone asks for this stage (it has a final answer)."""
    return not v.no_answer and not v.failed


def _asks(v: Verdict) -> bool:
    """A cascade asks the LLM judge for this stage (:class:`CascadeJudge`'s condition)."""
    return not v.failed and v.uncertain > 0


class _PromptSizes:
    """Characters of the LLM judge's prompt for a stage (built with its own prompt code, never sent;
    0 for a stage it would not be asked about)."""

    def __init__(self, lookup: Any) -> None:
        from shopping_companion.judges.llm import LLMJudge
        from shopping_companion.llm.openai_backend import OpenAIBackend

        # the backend is never called: build_messages only renders the prompt
        self.judge = LLMJudge(OpenAIBackend("judge", base_url="http://127.0.0.1:9/v1", api_key="unused"), lookup)

    def __call__(self, task: Any, traj: Any, v: Verdict) -> int:
        if not _answered(v):
            return 0
        return sum(len(m["content"]) for m in self.judge.build_messages(task, traj))


def _counts(vs: list[Verdict], sizes: list[tuple[Verdict, int]]) -> dict[str, Any]:
    only = sum(_answered(v) for v in vs)
    casc = sum(_asks(v) for v in vs)
    unc = [v.uncertain for v in vs]
    chars_all = sum(n for v, n in sizes if _answered(v))
    chars_casc = sum(n for v, n in sizes if _asks(v))
    return {
        "stages": len(vs),
        "llm_only_calls": only,
        "cascade_calls": casc,
        "saved_share": (1 - casc / only) if only else None,
        "ratio": (only / casc) if casc else None,
        "median_uncertain_per_stage": statistics.median(unc) if unc else 0,
        "median_uncertain_per_uncertain_stage": statistics.median([u for u in unc if u]) if any(unc) else None,
        "prompt_chars_llm_only": chars_all,
        "prompt_chars_cascade": chars_casc,
        "prompt_chars_saved_share": (1 - chars_casc / chars_all) if chars_all else None,
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _ratio(x: float | None) -> str:
    return "∞" if x is None else f"{x:.1f}x"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:g}"


if __name__ == "__main__":
    raise SystemExit(main())
