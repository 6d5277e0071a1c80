"""Rule-judge throughput on synthetic trajectories built from real catalog products.

Builds ``--n`` judged items (default 10,000): half stage 1 (identified preferences: all, some
dropped, some with a wrong value), half stage 2 (a product tool call returning 10 real ids, then a
recommendation: the reference product(s), a same-category alternative, a shuffled or partly replaced
bundle, or a random product). Half are single-product tasks, half add-on deals of 2–3 products of one
real shop with a voucher and budget. Gold preferences are real attribute values of the reference
products.

Prints, for ``--runs`` passes over all items (the first pass is cold: normalisation caches empty),
the median trajectories/s (wall clock) over all passes, the cold pass, the warm median, the median per
CPU-second of this process (robust when other processes share the cores), and per stage.
Target: ≥ 2,000 trajectories/s on 2 cores (issue 13: the value matcher reads synonyms, units and product text). Usage::

    python benchmarks/bench_judge.py [--n 10000] [--runs 5] [--products 30000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import defaultdict

from shopping_companion.catalog.loader import iter_products
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import (
    Preference,
    Product,
    ProductSlot,
    SessionRef,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Voucher,
)

_SKIP_VALUES = {"na", "n/a", "none", "", "-", "nan"}


def _prefs(p: Product, rng: random.Random, slot: int, k: int) -> list[Preference]:
    items = [(a, v) for a, v in p.attributes.items() if v and v.strip().lower() not in _SKIP_VALUES and a != "year"]
    rng.shuffle(items)
    return [Preference(slot=slot, attribute=a, value=v) for a, v in items[:k]]


def _slot(p: Product) -> ProductSlot:
    return ProductSlot(
        product_type=p.category or p.title.split()[-1],
        category_path=list(p.category_path),
        reference_product_id=p.product_id,
    )


def _stage1(task: Task, rng: random.Random) -> Trajectory:
    ident = list(task.preferences)
    r = rng.random()
    if r < 0.3 and ident:
        ident = ident[: max(0, len(ident) - 1)]
    elif r < 0.5 and ident:
        ident[0] = ident[0].model_copy(update={"value": "purple"})
    return Trajectory(
        task_id=task.task_id,
        stage=1,
        identified_preferences=ident,
        final_answer="{}",
        steps=[Step(assistant_text="...")],
        termination="answered",
    )


def _stage2(task: Task, rec: list[str], pool: list[Product], rng: random.Random) -> Trajectory:
    returned = list(rec) + [p.product_id for p in rng.sample(pool, 10 - min(len(rec), 9))]
    rng.shuffle(returned)
    step = Step(
        assistant_text="...",
        tool_calls=[ToolCall(name="product_search", arguments={"query": "q"}, call_id="c0")],
        tool_results=[ToolResult(call_id="c0", name="product_search", content="...", returned_ids=returned)],
    )
    return Trajectory(
        task_id=task.task_id,
        stage=2,
        recommended_ids=rec,
        final_answer="x",
        steps=[step, Step(assistant_text="<answer>x</answer>")],
        termination="answered",
    )


def build(products: list[Product], n: int, seed: int) -> list[tuple[Task, Trajectory]]:
    rng = random.Random(seed)
    with_attrs = [p for p in products if len(p.attributes) >= 3 and p.category_path]
    by_cat: dict[str, list[Product]] = defaultdict(list)
    by_shop: dict[str, list[Product]] = defaultdict(list)
    for p in with_attrs:
        by_cat[p.category].append(p)
        if p.price is not None:
            by_shop[p.shop_id].append(p)
    shops = [s for s, ps in by_shop.items() if len({p.category for p in ps}) >= 3]
    items: list[tuple[Task, Trajectory]] = []
    hist = [SessionRef(session_id="h0", date="2024-01-01")]
    for i in range(n):
        addon = i % 4 >= 2
        if not addon:
            ref = rng.choice(with_attrs)
            prods = [ref]
            prefs = _prefs(ref, rng, 0, rng.randint(1, 3))
            task = Task(
                task_id=f"b{i}",
                task_type="single",
                instruction=f"I want {ref.category}",
                user_id="u",
                history=hist,
                needle_session_ids=["h0"],
                preferences=prefs,
                slots=[_slot(ref)],
            )
        else:
            ps = by_shop[rng.choice(shops)]
            cats: dict[str, Product] = {}
            for p in rng.sample(ps, min(len(ps), 30)):
                cats.setdefault(p.category, p)
            prods = list(cats.values())[: rng.randint(2, 3)]
            if len(prods) < 2:
                prods = rng.sample(ps, 2)
            prefs = [g for s, p in enumerate(prods) for g in _prefs(p, rng, s, 2)]
            total = sum(p.price or 0 for p in prods)
            task = Task(
                task_id=f"b{i}",
                task_type="addon",
                instruction="a bundle",
                user_id="u",
                history=hist,
                needle_session_ids=["h0"],
                preferences=prefs,
                slots=[_slot(p) for p in prods],
                voucher=Voucher(shop_id=prods[0].shop_id, min_spend=round(total * 0.8), discount=round(total * 0.1)),
                budget=round(total * rng.choice([0.85, 0.95, 1.1])),
                currency=prods[0].currency,
            )
        if i % 2 == 0:
            traj = _stage1(task, rng)
        else:
            r = rng.random()
            rec = [p.product_id for p in prods]
            if r < 0.4:
                rng.shuffle(rec)
            elif r < 0.8:
                j = rng.randrange(len(rec))
                rec[j] = rng.choice(by_cat[prods[j].category]).product_id
            else:
                rec = [rng.choice(with_attrs).product_id for _ in prods]
            traj = _stage2(task, rec, with_attrs, rng)
        items.append((task, traj))
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--products", type=int, default=30_000, help="catalog products loaded (first N)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    t0 = time.perf_counter()
    path = resolve_data_dir() / "catalog" / "products.jsonl.gz"
    products: list[Product] = []
    for p in iter_products(path):
        products.append(p)
        if len(products) >= args.products:
            break
    catalog = {p.product_id: p for p in products}
    items = build(products, args.n, args.seed)
    print(
        f"setup: {len(products)} real products, {len(items)} items "
        f"({sum(t.stage == 1 for _, t in items)} stage 1, {sum(t.task_type == 'addon' for t, _ in items)} add-on) "
        f"in {time.perf_counter() - t0:.1f}s"
    )

    def lookup(ids: list[str]) -> dict[str, Product]:
        return {i: catalog[i] for i in ids if i in catalog}

    judge = RuleJudge(lookup)
    rates, cpu_rates, s1, s2 = [], [], [], []
    succ = 0
    for _run in range(args.runs):
        t, c = time.perf_counter(), time.process_time()
        verdicts = [judge.judge(task, traj) for task, traj in items]
        dt, dc = time.perf_counter() - t, time.process_time() - c
        rates.append(len(items) / dt)
        cpu_rates.append(len(items) / max(dc, 1e-9))
        succ = sum(v.success for v in verdicts)
        one = [(a, b) for a, b in items if b.stage == 1]
        two = [(a, b) for a, b in items if b.stage == 2]
        t = time.perf_counter()
        for a, b in one:
            judge.judge(a, b)
        s1.append(len(one) / (time.perf_counter() - t))
        t = time.perf_counter()
        for a, b in two:
            judge.judge(a, b)
        s2.append(len(two) / (time.perf_counter() - t))
    print(
        f"rule judge: median {statistics.median(rates):,.0f} trajectories/s over {args.runs} runs "
        f"(cold first run {rates[0]:,.0f}/s, warm median {statistics.median(rates[1:] or rates):,.0f}/s); "
        f"target >= 2,000/s"
    )
    print(f"  per CPU-second (robust to other processes on the machine): median {statistics.median(cpu_rates):,.0f}/s")
    print(f"  stage 1: median {statistics.median(s1):,.0f}/s · stage 2: median {statistics.median(s2):,.0f}/s")
    print(f"  verdicts with success: {succ}/{len(items)}")


if __name__ == "__main__":
    main()
