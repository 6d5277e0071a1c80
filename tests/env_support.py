"""Helpers for the environment tests: tasks built from REAL catalog products and REAL SGD
conversations (plus a short hand-written needle session stating the preferences), independent of
the benchmark synthesiser, and a kit that builds real environments over the session's index.

Single-product tasks: a real product with colour / fabric / usage-style attributes; its gold
preferences are two or three of those attributes (the rule judge accepts the product). Add-on
task: two real products of different categories sold by one shop, a same-shop voucher and a
budget equal to their total minus the discount, plus a same-category product of ANOTHER shop that
also satisfies the preferences (for the cross-shop check).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv
from shopping_companion.envs.tools import ToolBox
from shopping_companion.judges.rule import RuleJudge, product_satisfies
from shopping_companion.memory.store import MemoryStore
from shopping_companion.types import Preference, Product, ProductSlot, Session, SessionRef, Task, Turn, Voucher

PREF_KEYS = ("base_colour", "Fabric", "Sleeve Length", "Pattern", "usage")
_PHRASES = {
    "base_colour": "I always end up choosing {v} for my {t}, it is my colour.",
    "Fabric": "For {t} I only go for {v} fabric, anything else feels wrong on me.",
    "Sleeve Length": "I reach for {v} every time, that is what suits me best in {t}.",
    "Pattern": "I like my {t} {v}, nothing too busy.",
    "usage": "Most of what I buy is for {v} wear, so that is the style I pick.",
}


def _needle(sid: str, prefs: list[Preference], ptypes: list[str]) -> Session:
    turns = [
        Turn(role="user", content="I'm sorting out my wardrobe this weekend."),
        Turn(role="assistant", content="Good plan! Keep, donate and repair piles help a lot."),
    ]
    for p in prefs:
        t = ptypes[p.slot].lower()
        turns.append(Turn(role="user", content=_PHRASES[p.attribute].format(v=p.value.lower(), t=t)))
        turns.append(Turn(role="assistant", content="Noted, that makes a lot of sense."))
    return Session(session_id=sid, turns=turns, source="test-needle")


def _history(
    rng: random.Random, haystack: list[Session], needles: list[Session], n: int, pool: dict
) -> list[SessionRef]:
    chosen = rng.sample(haystack, n)
    order = chosen + needles
    rng.shuffle(order)
    refs = []
    for i, s in enumerate(order):
        pool.setdefault(s.session_id, s)
        refs.append(SessionRef(session_id=s.session_id, date=f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}"))
    return refs


def _prefs_of(p: Product, keys=PREF_KEYS, slot: int = 0, k: int = 3) -> list[Preference]:
    out = []
    for key in keys:
        v = p.attributes.get(key)
        if v and len(v) < 25 and v.lower() not in p.category.lower():
            out.append(Preference(attribute=key, value=v, slot=slot))
    return out[:k]


def _eligible(p: Product) -> bool:
    return p.source == "myntra_styles" and p.price is not None and len(_prefs_of(p)) >= 2


def make_single_tasks(
    products: list[Product], sgd: list[Session], n: int = 4, seed: int = 0, haystack_size: int = 25
) -> tuple[list[Task], dict[str, Session]]:
    """``n`` single-product tasks (distinct categories) and the session pool they use."""
    rng = random.Random(seed)
    cands = [p for p in products if _eligible(p)]
    rng.shuffle(cands)
    tasks, pool, seen = [], {}, set()
    haystack = [s for s in sgd if len(s.turns) >= 4][:2000]
    for p in cands:
        if len(tasks) == n:
            break
        if p.category in seen:
            continue
        prefs = _prefs_of(p)
        instruction = f"I need a new {p.category.lower()} item. Could you pick one that fits what I usually like?"
        if any(q.value.lower() in instruction.lower() for q in prefs) or not all(
            product_satisfies(p, q) for q in prefs
        ):
            continue
        seen.add(p.category)
        i = len(tasks)
        needle = _needle(f"needle-{seed}-{i}", prefs, [p.category])
        tasks.append(
            Task(
                task_id=f"env-{seed}-{i}",
                task_type="single",
                instruction=instruction,
                user_id=f"u{i}",
                history=_history(rng, haystack, [needle], haystack_size, pool),
                needle_session_ids=[needle.session_id],
                preferences=prefs,
                slots=[
                    ProductSlot(
                        product_type=p.category, category_path=p.category_path, reference_product_id=p.product_id
                    )
                ],
                currency=p.currency,
                seed=seed,
            )
        )
    assert len(tasks) == n, "not enough eligible catalog products"
    return tasks, pool


@dataclass
class AddonCase:
    """An add-on task plus ids for the negative checks."""

    task: Task
    other_shop_id: str  # same category as slot 0, another shop, satisfies slot 0's preferences
    tight_voucher_task: Task  # same bundle, but the voucher's minimum spend is not reached
    pool: dict[str, Session] = field(default_factory=dict)


def make_addon_task(
    products: list[Product],
    sgd: list[Session],
    seed: int = 0,
    shop_id: str = "myntra-india/brand-nike",
    haystack_size: int = 25,
) -> AddonCase:
    rng = random.Random(seed)
    shop = [p for p in products if p.shop_id == shop_id and _eligible(p)]
    by_cat: dict[str, list[Product]] = {}
    for p in shop:
        by_cat.setdefault(p.category, []).append(p)
    for a_cat in sorted(by_cat):
        for a in sorted(by_cat[a_cat], key=lambda p: p.product_id):
            prefs_a = _prefs_of(a, ("base_colour", "Fabric"), slot=0, k=2)
            if len(prefs_a) < 2:
                continue
            others = [
                q
                for q in products
                if q.category == a.category
                and q.shop_id != shop_id
                and q.price
                and all(product_satisfies(q, g) for g in prefs_a)
            ]
            if not others:
                continue
            b = next(
                (
                    q
                    for c in sorted(by_cat)
                    if c != a_cat
                    for q in sorted(by_cat[c], key=lambda p: p.product_id)
                    if q.attributes.get("base_colour")
                ),
                None,
            )
            if b is None:
                continue
            prefs = prefs_a + [Preference(attribute="base_colour", value=b.attributes["base_colour"], slot=1)]
            if not all(product_satisfies(p, g) for p, g in [(a, prefs[0]), (a, prefs[1]), (b, prefs[2])]):
                continue
            total = float(a.price) + float(b.price)
            voucher = Voucher(shop_id=shop_id, min_spend=round(total * 0.9, 2), discount=round(total * 0.1, 2))
            budget = round(total - voucher.discount, 2)
            pool: dict[str, Session] = {}
            needle = _needle(f"needle-addon-{seed}", prefs, [a.category, b.category])
            history = _history(rng, [s for s in sgd if len(s.turns) >= 4][:2000], [needle], haystack_size, pool)
            instruction = (
                f"I want to buy {a.category.lower()} and {b.category.lower()} together from one shop "
                "using my voucher, within my budget, matching what I like."
            )
            task = Task(
                task_id=f"env-addon-{seed}",
                task_type="addon",
                instruction=instruction,
                user_id="ua",
                history=history,
                needle_session_ids=[needle.session_id],
                preferences=prefs,
                slots=[
                    ProductSlot(
                        product_type=a.category, category_path=a.category_path, reference_product_id=a.product_id
                    ),
                    ProductSlot(
                        product_type=b.category, category_path=b.category_path, reference_product_id=b.product_id
                    ),
                ],
                voucher=voucher,
                budget=budget,
                currency=a.currency,
                seed=seed,
            )
            tight = task.model_copy(
                update={
                    "task_id": f"env-addon-{seed}-tight",
                    "voucher": Voucher(shop_id=shop_id, min_spend=total + 1.0, discount=voucher.discount),
                }
            )
            return AddonCase(
                task=task,
                other_shop_id=sorted(others, key=lambda q: q.product_id)[0].product_id,
                tight_voucher_task=tight,
                pool=pool,
            )
    raise AssertionError(f"no add-on bundle found in shop {shop_id}")


class EnvKit:
    """Real environments over one session's index and embedder, memory stores cached per task."""

    def __init__(self, product_search: Any, embedder: Any, pool: dict[str, Session]) -> None:
        self.products = product_search
        self.embedder = embedder
        self.pool = pool
        self.judge = RuleJudge(self.lookup)
        self._mem: dict[str, MemoryStore] = {}

    def lookup(self, ids: list[str]) -> dict[str, Product]:
        out = {}
        for i in ids:
            p = self.products.get(i)
            if p is not None:
                out[i] = p
        return out

    def memory(self, task: Task) -> MemoryStore:
        if task.task_id not in self._mem:
            self._mem[task.task_id] = MemoryStore.from_pool(self.pool, task.history, self.embedder)
        return self._mem[task.task_id]

    def env(self, task: Task, simulator: Any = None, **cfg: Any) -> ShoppingCompanionEnv:
        return ShoppingCompanionEnv(
            task, ToolBox(self.products, self.memory(task)), self.judge, EnvConfig(**cfg), simulator=simulator
        )

    def resources(self, tasks: list[Task], rubric: str = "paper", **extra: Any) -> Any:
        """``EnvResources`` over ``tasks`` with this kit's sessions, index, embedder and judge and
        the named rubric (``extra``: any other EnvResources field, e.g. ``memory_cache``)."""
        from shopping_companion.rewards.rubric import load_rubric
        from shopping_companion.trainers.resources import EnvResources

        return EnvResources(
            tasks={t.task_id: t for t in tasks},
            sessions=self.pool,
            products=self.products,
            embedder=self.embedder,
            judge=self.judge,
            reward_fn=load_rubric(rubric, resources={"lookup": self.lookup}),
            **extra,
        )


def run(env: ShoppingCompanionEnv, policy: Any, seed: int = 0):
    """Drive ``env`` with ``policy.chat`` until done; return the EpisodeResult."""
    env.reset(seed=seed)
    while not env.done:
        env.step(policy.chat(env.messages, env.tool_schemas))
    return env.episode_result(policy=policy.name, seed=seed)


class SlowJudge:
    """The rule judge, after ``sleep_s`` seconds (a judge endpoint that answers late)."""

    def __init__(self, inner, sleep_s: float) -> None:
        self.inner, self.sleep_s, self.name = inner, sleep_s, inner.name

    def judge(self, task, traj):
        time.sleep(self.sleep_s)
        return self.inner.judge(task, traj)
