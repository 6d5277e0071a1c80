"""Benchmark construction: the five steps of Shopping Companion §4 for every task, a resumable
directory build, and the manifest.

Per task (index *i*, RNG seeded from ``(seed, i)`` only), up to ``max_attempts`` attempts of:

1. **Sampling** (step 1). *Single*: a product type (probability ∝ √(eligible products of that
   type)), a product of it, 1–3 wanted features (weights ``single_preferences``) drawn from its real
   attributes (weighted by label), up to ``max_dont_care`` other features as does-not-matter.
   *Add-on*: 2–4 products of different types from one shop and audience; voucher ``min_spend`` =
   a round amount in (total − cheapest product, total], so every product is needed to reach it;
   ``discount`` = ``discount_share`` of it, rounded; ``budget`` = the discounted total rounded up
   by at most ``budget_slack`` of the total and below the undiscounted total (the voucher is
   needed). Products that could fit two of the requested types are never combined.
2. **Searchable** and **alternatives/gold** checks (step 5, done early so no text is generated
   for a task that would fail them): see :mod:`.verify`.
3. **Instruction and needle dialogues** (steps 2–3) from the generator; **resolvable** check.
4. **Haystack** (step 4): real sessions drawn to the session/token targets, then **denoised**:
   every haystack session is checked by the rule detector (and the LLM generator, if configured)
   against the wanted features; conflicting sessions are replaced by other real sessions of about
   the same size, each replacement recorded as a :class:`~shopping_companion.types.Change`, for at
   most ``max_conflict_rounds`` rounds (**conflict-free** check). Needles are inserted at random
   positions; dates increase along the history.

The memory ability of each task (``SynthConfig.abilities``: knowledge update, multi-session,
temporal, abstention besides extraction) shapes steps 1, 3 and 4 as :mod:`.abilities` describes.

An attempt that fails a check is counted under the check's name and the task is re-drawn; after
``max_attempts`` the task is dropped (counted in the manifest). Verification results are stored
in every task (:class:`~shopping_companion.types.Verification`).

Directory builds (:func:`build_benchmark`) write one part file per finished task under
``<out>/.partial/parts/`` (atomically) and skip finished tasks when rerun, so an interrupted build
resumes; since a task depends only on ``(seed, index)`` and the inputs, the result is byte-identical
to an uninterrupted build. The final files are written atomically, the manifest last; the
``.partial`` directory is removed after the manifest is written.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopping_companion.benchmark.synthesis import abilities as A
from shopping_companion.benchmark.synthesis.breadth import source_quotas
from shopping_companion.benchmark.synthesis.catalog_view import (
    Feature,
    ShopGroup,
    domain_of,
    item_synonyms,
    shop_display_name,
)
from shopping_companion.benchmark.synthesis.common import (
    CheckFailed,
    GenerationError,
    SynthError,
    nice_unit,
    opaque_id,
    run_search,
    searchable_query,
    stable_hash,
    task_rng,
)
from shopping_companion.benchmark.synthesis.config import SynthConfig
from shopping_companion.benchmark.synthesis.directory import (
    FORMAT_VERSION,
    PartStore,
    SynthOutput,
    stats_summary,
    task_counts,
    write_benchmark,
)
from shopping_companion.benchmark.synthesis.conflicts import Conflict, ConflictDetector, WantedFeature
from shopping_companion.benchmark.synthesis.generators import Generator, SlotSpec, TaskSpec, TemplateGenerator
from shopping_companion.benchmark.synthesis.haystack import HaystackPool, PoolSession, assign_dates, session_tokens
from shopping_companion.benchmark.synthesis.reuse import view_and_matcher
from shopping_companion.benchmark.synthesis.verify import (
    CatalogMatcher,
    count_bundles,
    gold_accepted,
    leaked_values,
    unstated_features,
)
from shopping_companion.judges.rule import normalize_tokens
from shopping_companion.phases import phase
from shopping_companion.types import Change, Preference, Product, ProductSlot, Session, Task, Verification, Voucher

__all__ = [
    "FORMAT_VERSION",
    "CheckFailed",
    "SynthOutput",
    "Synthesizer",
    "build_benchmark",
    "make_generator",
    "verified_task",
    "write_benchmark",
]

_GENERIC_ITEM_WORDS = frozenset(normalize_tokens("pair of pack men's women's boys' girls' unisex kids"))


def verified_task(
    task: Task,
    *,
    history: list[Any],
    needles: list[Session],
    changes: list[Change],
    search: tuple[bool | None, list[str], list[int | None], int],
    alternatives: tuple[int, bool, float | None, float | None],
    gold_accepted: bool | None,
    by_evidence: tuple[Preference, ...] | list[Preference] = (),
    **update: Any,
) -> Task:
    """``task`` with its history, needle ids, denoising changes and the
    :class:`~shopping_companion.types.Verification` of a task that passed every check (step 5):
    ``search`` = ``(searchable, queries, ranks, top_k)`` from :meth:`Synthesizer.searchable`,
    ``alternatives`` = ``(n, capped, budget_slack, over_budget_share)`` from
    :meth:`Synthesizer.alternatives`; ``by_evidence``: preferences accepted on their evidence alone
    (import-tasks; Verification ``accepted_by_evidence``); ``update``: other fields (``instruction``)."""
    searchable, queries, ranks, top_k = search
    n_alt, capped, slack, over = alternatives
    return task.model_copy(
        update={
            **update,
            "history": history,
            "needle_session_ids": [n.session_id for n in needles],
            "n_alternatives": n_alt,
            "changes": changes,
            "verification": Verification(
                resolvable=not by_evidence,
                accepted_by_evidence=[f"{p.attribute}={p.value} (slot {p.slot})" for p in by_evidence],
                searchable=searchable,
                conflict_free=True,
                gold_accepted=gold_accepted,
                n_alternatives=n_alt,
                alternatives_capped=capped,
                search_top_k=top_k,
                search_queries=queries,
                search_ranks=ranks,
                budget_slack=slack,
                over_budget_share=over,
            ),
        }
    )


def make_generator(config: SynthConfig) -> Generator:
    """The generator the config names (template, or LLM over its endpoints)."""
    if config.generator.kind == "llm":
        from shopping_companion.benchmark.synthesis.llm_generator import LLMGenerator

        return LLMGenerator(config.generator)
    g = config.generator
    return TemplateGenerator(paraphrase_p=g.paraphrase_p, situation_p=g.situation_p, other_unit_p=g.other_unit_p)


def _weighted(rng: random.Random, weights: dict[int, float]) -> int:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def _weighted_sample(rng: random.Random, feats: list[Feature], k: int) -> list[Feature]:
    """``k`` features drawn without replacement by weight, at most one numeric limit among them."""
    pool = list(feats)
    out: list[Feature] = []
    while pool and len(out) < k:
        f = rng.choices(pool, weights=[x.weight for x in pool])[0]
        out.append(f)
        pool.remove(f)
        if f.kind == "numeric":
            pool = [x for x in pool if x.kind != "numeric"]
    return out


def _max_wanted(feats: list[Feature]) -> int:
    """How many wanted features :func:`_weighted_sample` can draw (one numeric at most)."""
    n_num = sum(f.kind == "numeric" for f in feats)
    return len(feats) - max(0, n_num - 1)


def _round2(x: float) -> float:
    return round(x + 0.0, 2)


class Synthesizer:
    """Builds tasks from a catalog and a conversation pool (module docstring).

    Args:
        products: the catalog (any order).
        pool: real conversations for the haystacks.
        config: :class:`SynthConfig`.
        searcher: BM25 search for the searchable check: a ``ProductSearch`` or a callable
            ``(query, top_k[, shop_id=])``; None skips the check (recorded as ``searchable=None``).
        generator: overrides the config's generator (e.g. an LLM generator pointed at a test server).
        embedder: MiniLM embedder for the MiniLM needle statistic (optional).
        sources: provenance recorded in the manifest.
        plan: False builds only the checks (:meth:`searchable`, :meth:`alternatives`,
            :meth:`wanted_features`, :meth:`find_conflicts`, :meth:`denoise`) for tasks written
            elsewhere (``shopcomp import-tasks``): no catalog preflight, no task plan.
        matcher: a prebuilt :class:`~.verify.CatalogMatcher` of ``products`` (built when None).

    Raises:
        SynthError: the inputs cannot produce the requested task types (message gives counts).
    """

    def __init__(
        self,
        products: list[Product],
        pool: list[Session],
        config: SynthConfig,
        searcher: Any = None,
        generator: Generator | None = None,
        embedder: Any = None,
        sources: dict[str, Any] | None = None,
        *,
        plan: bool = True,
        matcher: CatalogMatcher | None = None,
    ) -> None:
        t0 = time.perf_counter()
        self.config = config
        self.searcher = searcher
        self.embedder = embedder
        self.sources = sources or {}
        self.generator = generator or make_generator(config)
        shared = view_and_matcher(products, config.min_attributes, config.allow_unpriced)  # once per catalog
        self.view = shared.view
        self.shortfall: dict[str, str] = {}
        if plan:
            self._check_catalog()
        self.matcher = matcher or shared.matcher
        spu = config.sessions_per_user
        self.pool = HaystackPool(
            pool,
            seed=config.seed,
            min_session_turns=config.min_session_turns,
            max_session_tokens=config.max_session_tokens,
            pool_size=config.pool_size,
            sharegpt_share=config.sharegpt_share,
            needed=max(1, round(spu + 4 * config.sessions_std)),
        )
        self.detector = ConflictDetector(self.view.vocab)
        types = sorted(self.view.single_types)
        self._types = types
        self._type_weights = [math.sqrt(len(self.view.single_types[t])) for t in types]
        self._source_types = {
            src: (sorted(ts), [math.sqrt(len(ts[t])) for t in sorted(ts)]) for src, ts in self.view.by_source.items()
        }
        self.source_capacity = self._source_capacity()
        self.plan = self._make_plan() if plan else []
        self.ability_of = A.ability_plan(config.abilities, len(self.plan), config.seed)
        self.timings: dict[str, float] = {"setup_s": round(time.perf_counter() - t0, 2)}

    # ------------------------------------------------------------------ preflight and plan

    def _check_catalog(self) -> None:
        cfg = self.config
        if cfg.sources:
            have = sorted({p.source for p in self.view.products})
            unknown = [x for x in cfg.sources if x not in have]
            if unknown:
                raise SynthError(f"sources: {unknown} are not sources of this catalog; allowed: {have}")
            if not any(self.view.by_source.get(x) for x in cfg.sources):
                raise SynthError(
                    f"sources: no product of {cfg.sources} can be a reference product ({self.view.describe()})"
                )
        if not self.view.eligible:
            raise SynthError(
                "no product can be a reference product: "
                + self.view.describe()
                + ". Reference products need a price, a category that names a product type and at least "
                f"{cfg.min_attributes} phrasable attributes (lower min_attributes or use a richer catalog)"
            )
        if cfg.n_single > 0 and min(cfg.single_preferences) > max(
            len(self.view.features(p)) for p in self.view.eligible[:5000]
        ):
            raise SynthError(
                f"single_preferences asks for at least {min(cfg.single_preferences)} features; "
                "no eligible product has that many"
            )
        if cfg.n_addon > 0:
            need = min(cfg.addon_products)
            have = self.view.max_addon_products()
            if have < need:
                msg = (
                    f"add-on deals need a shop offering at least {need} product types (priced, with "
                    f"≥ {cfg.min_attributes} phrasable attributes) for one audience; the best shop offers "
                    f"{have} ({len(self.view.addon_groups)} shop groups with ≥ 2 types). {self.view.describe()}"
                )
                if not cfg.allow_shortfall:
                    raise SynthError(msg + ". Set allow_shortfall: true to build the single-product tasks only")
                self.shortfall["addon"] = msg

    def _make_plan(self) -> list[tuple[str, str, str | None]]:
        """``(task type, split, source)`` per task index. The source is the catalog source the
        task's reference products come from (None: any, when ``source_balance`` is ``none``):
        :func:`~.breadth.source_quotas` splits each task type over the sources that can host it,
        and a seeded shuffle spreads them over the indices."""
        cfg = self.config
        types = ["single"] * cfg.n_single + ["addon"] * cfg.n_addon
        random.Random(f"shopcomp-plan:{cfg.seed}").shuffle(types)
        n_test = {t: round(types.count(t) * cfg.test_fraction) for t in ("single", "addon")}
        sources: dict[str, list[str | None]] = {}
        for t in ("single", "addon"):
            n = types.count(t)
            if cfg.source_balance == "none" or n == 0:
                sources[t] = [None] * n
                continue
            quotas = source_quotas(
                self.source_capacity[t], n, balance=cfg.source_balance, max_share=cfg.max_source_share
            )
            seq: list[str | None] = [s for s, q in quotas.items() for _ in range(q)]
            seq += [None] * (n - len(seq))
            random.Random(f"shopcomp-sources:{cfg.seed}:{t}").shuffle(seq)
            sources[t] = seq
        seen: Counter[str] = Counter()
        plan: list[tuple[str, str, str | None]] = []
        for t in types:
            plan.append((t, "test" if seen[t] < n_test[t] else "train", sources[t][seen[t]]))
            seen[t] += 1
        return plan

    def _source_capacity(self) -> dict[str, dict[str, int]]:
        """Per task type, source -> how many tasks it can host: eligible products for single
        tasks; shop groups offering enough product types for add-on deals (restricted to
        ``config.sources`` when set)."""
        cfg = self.config
        allowed = set(cfg.sources) if cfg.sources else None
        need = min(cfg.addon_products)
        single = {
            s: sum(len(v) for v in types.values())
            for s, types in self.view.by_source.items()
            if allowed is None or s in allowed
        }
        addon: Counter[str] = Counter()
        for g in self.view.addon_groups:
            if len(g.types) >= need and (allowed is None or g.source in allowed):
                addon[g.source] += len(g.types)
        return {"single": single, "addon": dict(addon)}

    def fingerprint(self) -> str:
        """Hash of everything the output depends on (config, sources, generator, format)."""
        return stable_hash(
            FORMAT_VERSION,
            json.dumps(self.config.model_dump(mode="json"), sort_keys=True),
            json.dumps(self.sources, sort_keys=True, default=str),
            json.dumps(self.generator.describe(), sort_keys=True),
            len(self.view.products),
            len(self.pool),
        )

    # ------------------------------------------------------------------ step 1: sampling

    def _sample_single(
        self, rng: random.Random, source: str | None = None, min_k: int = 1
    ) -> tuple[list[SlotSpec], dict[str, Any]]:
        cfg = self.config
        if source is not None and source in self._source_types:
            types, weights = self._source_types[source]
            item = rng.choices(types, weights=weights)[0]
            p = rng.choice(self.view.by_source[source][item])
        else:
            item = rng.choices(self._types, weights=self._type_weights)[0]
            p = rng.choice(self.view.single_types[item])
        item_toks = set(normalize_tokens(item))
        feats = [f for f in self.view.features(p, allow_brand=True) if not set(normalize_tokens(f.value)) <= item_toks]
        k = min(max(min_k, _weighted(rng, cfg.single_preferences)), _max_wanted(feats))
        if k < min(cfg.single_preferences):
            raise CheckFailed("too_few_features", p.product_id)
        wanted = _weighted_sample(rng, self._favour_indirect(feats), k)
        rest = [f for f in feats if f not in wanted and f.label != "size" and f.kind != "numeric"]
        dont = rng.sample(rest, min(len(rest), cfg.max_dont_care))
        return [self._slot(0, p, item, wanted, dont)], {}

    def _favour_indirect(self, feats: list[Feature]) -> list[Feature]:
        """``feats`` with the sampling weight of those the generator can only state verbatim (no
        paraphrase in its lexicon: brands, rare values) multiplied by ``config.verbatim_weight``,
        so most needles say their preferences the way people talk. Features compare equal to the
        originals (the weight is not part of equality)."""
        can = getattr(self.generator, "can_paraphrase", None)
        w = self.config.verbatim_weight
        if can is None or w == 1.0:
            return feats
        return [f if can(f) else dataclasses.replace(f, weight=f.weight * w) for f in feats]

    def _slot(self, i: int, p: Product, item: str, wanted: list[Feature], dont: list[Feature]) -> SlotSpec:
        return SlotSpec(i, p, item, item_synonyms(p, item), domain_of(p), wanted, dont)

    def _sample_addon(
        self, rng: random.Random, source: str | None = None, min_k: int = 1, rich_first: bool = False
    ) -> tuple[list[SlotSpec], dict[str, Any]]:
        cfg = self.config
        n = _weighted(rng, cfg.addon_products)
        pool = [g for g in self.view.addon_groups if source is None or g.source == source] or self.view.addon_groups
        groups = [g for g in pool if len(g.types) >= n]
        if not groups:
            n = max((len(g.types) for g in pool), default=0)
            groups = [g for g in pool if len(g.types) >= n]
            if n < 2 or not groups:
                raise CheckFailed("no_addon_shop")
        g: ShopGroup = rng.choice(groups)
        items: list[str] = []
        for it in rng.sample(sorted(g.types), len(g.types)):
            # never two types one of which names the other ("watch" / "unisex watch")
            core = set(normalize_tokens(it)) - _GENERIC_ITEM_WORDS
            if all(
                not (core <= c or c <= core) for c in (set(normalize_tokens(x)) - _GENERIC_ITEM_WORDS for x in items)
            ):
                items.append(it)
            if len(items) == n:
                break
        if len(items) < n:
            raise CheckFailed("overlapping_product_types", f"{g.shop_id} has too few distinct types")
        products = [rng.choice(g.types[it]) for it in items]
        if len({p.currency for p in products}) != 1 or len({p.shop_id for p in products}) != 1:
            raise CheckFailed("mixed_currency")
        slots = []
        said = set(normalize_tokens(shop_display_name(products[0]) + " " + products[0].shop_id.replace("-", " ")))
        for it in items:
            said.update(normalize_tokens(it))
        # a value the instruction will say anyway (product types, shop name) cannot be a preference
        feats_of = [
            [f for f in self.view.features(p, allow_brand=False) if not set(normalize_tokens(f.value)) <= said]
            for p in products
        ]
        if rich_first:  # the product richest in features first: multi_session / abstention build on it
            order = sorted(range(n), key=lambda j: -len(feats_of[j]))
            products, items, feats_of = ([x[j] for j in order] for x in (products, items, feats_of))
        for i, (p, item, feats) in enumerate(zip(products, items, feats_of)):
            k = min(max(min_k if i == 0 else 1, _weighted(rng, cfg.addon_preferences)), _max_wanted(feats))
            if k < 1:
                raise CheckFailed("too_few_features", p.product_id)
            wanted = _weighted_sample(rng, self._favour_indirect(feats), k)
            rest = [f for f in feats if f not in wanted and f.label != "size" and f.kind != "numeric"]
            dont = rng.sample(rest, min(len(rest), cfg.max_dont_care))
            slots.append(self._slot(i, p, item, wanted, dont))
        self._distinct_synonyms(slots)
        prices = [float(p.price or 0) for p in products]
        total = sum(prices)
        lo = total - min(prices)
        u = rng.uniform(0.85, 1.0)
        min_spend = None
        unit = nice_unit(total)
        for div in (1, 2, 5, 10, 20, 50, 100):  # the roundest amount in (total - cheapest, total]
            step = max(1.0, unit / div) if div < 100 else 0.01
            m = math.floor(max(total * u, lo + step) / step) * step
            if not (lo + 1e-9 < m <= total + 1e-9):
                m = math.floor(total / step) * step
            if lo + 1e-9 < m <= total + 1e-9:
                min_spend = m
                break
        if min_spend is None:
            raise CheckFailed("voucher_infeasible", f"total {total}, cheapest {min(prices)}")
        d_unit = nice_unit(min_spend * 0.1)
        share = rng.uniform(*cfg.discount_share)
        discount = max(d_unit, round(min_spend * share / d_unit) * d_unit)
        if discount >= min_spend:
            raise CheckFailed("voucher_infeasible", "discount >= min spend")
        pay = total - discount
        b_unit = max(1.0, unit / 5)
        budget = math.ceil(pay / b_unit - 1e-9) * b_unit
        if budget - pay > cfg.budget_slack * total + 1e-9:
            budget = math.ceil(pay - 1e-9)
        if budget + 1e-9 >= total:
            raise CheckFailed("budget_not_tight", f"budget {budget} >= total {total}")
        voucher = Voucher(shop_id=products[0].shop_id, min_spend=_round2(min_spend), discount=_round2(discount))
        meta = {
            "voucher": voucher,
            "budget": _round2(budget),
            "currency": products[0].currency,
            "shop_name": shop_display_name(products[0]),
            "total": total,
        }
        return slots, meta

    # ------------------------------------------------------------------ the task pipeline

    @staticmethod
    def _distinct_synonyms(slots: list[SlotSpec]) -> None:
        """Keep, per slot, only the everyday names that share no word with another slot's names, so
        a statement scoped to one product cannot be read as being about another."""

        def words(text: str) -> set[str]:
            return {x for x in normalize_tokens(text) if len(x) > 2} - _GENERIC_ITEM_WORDS

        names = [[s.product_type, *s.synonyms] for s in slots]
        for i, s in enumerate(slots):
            others: set[str] = set()
            for j, ns in enumerate(names):
                if j != i:
                    for n in ns:
                        others |= words(n)
            keep = [n for n in s.synonyms if words(n) and not (words(n) & others)]
            if not keep:
                base = s.product_type.replace("pair of ", "").replace("pack of ", "")
                keep = [base] if not (words(base) & others) else [s.product_type]
            s.synonyms = keep

    def _task_shell(self, index: int, task_type: str, split: str, slots: list[SlotSpec], meta: dict[str, Any]) -> Task:
        task_id = f"sc-{self.config.seed}-{index:05d}"
        prefs = [Preference(slot=s.index, attribute=f.label, value=f.value) for s in slots for f in s.wanted]
        dont = [Preference(slot=s.index, attribute=f.label, value=f.value) for s in slots for f in s.dont_care]
        return Task(
            task_id=task_id,
            task_type=task_type,  # type: ignore[arg-type]
            split=split,  # type: ignore[arg-type]
            instruction="(pending)",
            user_id=f"user-{self.config.seed}-{index:05d}",
            history=[],
            needle_session_ids=[],
            preferences=prefs,
            dont_care=dont,
            slots=[
                ProductSlot(
                    product_type=s.product_type,
                    category_path=s.product.category_path,
                    reference_product_id=s.product.product_id,
                )
                for s in slots
            ],
            voucher=meta.get("voucher"),
            budget=meta.get("budget"),
            currency=meta.get("currency", slots[0].product.currency),
            seed=self.config.seed,
        )

    def searchable(self, task: Task) -> tuple[bool | None, list[str], list[int | None]]:
        queries = []
        ranks: list[int | None] = []
        for si, slot in enumerate(task.slots):
            prefs = [p for p in task.preferences if p.slot == si and p.polarity == "want"]  # never avoided values
            q = searchable_query(slot.product_type, prefs)
            queries.append(q)
            if self.searcher is None:
                ranks.append(None)
                continue
            shop = task.voucher.shop_id if task.voucher else None
            ids = run_search(self.searcher, q, self.config.searchable_top_k, shop_id=shop)
            ranks.append(ids.index(slot.reference_product_id) + 1 if slot.reference_product_id in ids else None)
        if self.searcher is None:
            return None, queries, ranks
        return all(r is not None for r in ranks), queries, ranks

    def alternatives(
        self, task: Task, slots: list[SlotSpec], meta: dict[str, Any]
    ) -> tuple[int, bool, float | None, float | None]:
        cap = self.config.alternatives_cap
        if task.task_type == "single":
            prefs = task.preferences
            n, capped = self.matcher.count_single(task.slots[0], prefs, cap)
            return n, capped, None, None
        assert task.voucher is not None and task.budget is not None
        shop = task.voucher.shop_id
        cand_lists: list[list[Product]] = []
        relevant_sets: list[set[str]] = []
        over = subs = 0
        refs = [s.product for s in slots]
        total = sum(float(p.price or 0) for p in refs)
        for si, slot in enumerate(task.slots):
            rel = self.matcher.shop_relevant(shop, slot)
            relevant_sets.append({p.product_id for p in rel})
            prefs = [p for p in task.preferences if p.slot == si]
            cand_lists.append([p for p in rel if self.matcher.satisfies_all(p, prefs)])
            ref_price = float(refs[si].price or 0)
            for q in rel:
                if q.product_id == slot.reference_product_id:
                    continue
                t2 = total - ref_price + float(q.price or 0)
                pay = t2 - (task.voucher.discount if t2 >= task.voucher.min_spend - 1e-9 else 0.0)
                subs += 1
                over += pay > task.budget + 1e-6
        for a in range(len(relevant_sets)):
            for b in range(a + 1, len(relevant_sets)):
                if relevant_sets[a] & relevant_sets[b]:
                    raise CheckFailed(
                        "overlapping_product_types", f"{task.slots[a].product_type} / {task.slots[b].product_type}"
                    )
        n, capped = count_bundles(
            [[float(p.price or 0) for p in c] for c in cand_lists],
            task.voucher.min_spend,
            task.voucher.discount,
            task.budget,
            cap + 1,
        )
        n = max(0, n - 1)  # the reference bundle itself
        slack = _round2(task.budget - (total - task.voucher.discount))
        return min(n, cap), capped or n >= cap, slack, (round(over / subs, 4) if subs else None)

    def wanted_features(self, slots: list[SlotSpec]) -> list[WantedFeature]:
        words = []
        for s in slots:
            w = set(normalize_tokens(s.product_type))
            for syn in s.synonyms:
                w.update(normalize_tokens(syn))
            # short tokens ("t" of t-shirt, "up" of button-ups) also come from contractions and phrases
            words.append(frozenset(x for x in w - _GENERIC_ITEM_WORDS if len(x) > 2))
        unique = []
        for i in range(len(slots)):
            rest = frozenset().union(*(words[j] for j in range(len(slots)) if j != i))
            unique.append(words[i] - rest)
        out = []
        for i, s in enumerate(slots):
            others = frozenset().union(*(unique[j] for j in range(len(slots)) if j != i))
            sizes = tuple(s.product.options.get("size", [])) if s.product is not None else ()
            for j, f in enumerate(s.wanted):
                out.append(
                    WantedFeature(
                        s.index,
                        f.label,
                        f.value,
                        unique[i],
                        others,
                        s.product.brand if s.product is not None else None,
                        sizes if j == 0 else (),
                    )
                )
        return out

    def find_conflicts(self, spec: TaskSpec, sessions: list[Session], feats: list[WantedFeature]) -> list[Conflict]:
        brands = [(s.index, s.product.brand) for s in spec.slots if s.product is not None and s.product.brand]
        found: list[Conflict] = []
        for s in sessions:
            found.extend(self.detector.find(s, feats, brands))
        scope = self.config.generator.conflict_scope if self.config.generator.kind == "llm" else "none"
        if scope != "none" and not isinstance(self.generator, TemplateGenerator):
            todo = sessions if scope == "all" else [s for s in sessions if self.detector.has_statements(s)]
            if todo:
                found.extend(self.generator.find_conflicts(spec, todo))
        return found

    def denoise(
        self, spec: TaskSpec, chosen: list[PoolSession], feats: list[WantedFeature], rng: random.Random
    ) -> tuple[list[PoolSession], list[Change], list[Conflict]]:
        """Step 4's denoising: swap every haystack session the conflict detectors flag
        (:meth:`find_conflicts`) for another pool session of about the same size, for at most
        ``max_conflict_rounds`` rounds. Returns ``(chosen, changes, conflicts left)``: the new
        selection, one :class:`~shopping_companion.types.Change` per swap, and the conflicts that
        remain (non-empty when no replacement was left or the rounds ran out)."""
        chosen = list(chosen)
        changes: list[Change] = []
        flagged: set[str] = set()
        for _round in range(self.config.max_conflict_rounds):
            conflicts = self.find_conflicts(spec, [c.session for c in chosen], feats)
            if not conflicts:
                return chosen, changes, []
            bad = {c.session_id: c for c in conflicts}
            flagged |= set(bad)
            used = {c.session.session_id for c in chosen}
            for j, ps in enumerate(chosen):
                c = bad.get(ps.session.session_id)
                if c is None:
                    continue
                new = self.pool.replacement(rng, ps, used, flagged)
                if new is None:
                    return chosen, changes, conflicts
                used.discard(ps.session.session_id)
                used.add(new.session.session_id)
                chosen[j] = new
                changes.append(
                    Change(
                        kind="session_replaced",
                        session_id=ps.session.session_id,
                        replacement_id=new.session.session_id,
                        detail=c.describe(),
                        detector=c.detector,
                    )
                )
        return chosen, changes, self.find_conflicts(spec, [c.session for c in chosen], feats)

    def _attempt(
        self, index: int, task_type: str, split: str, rng: random.Random, source: str | None = None
    ) -> dict[str, Any]:
        cfg = self.config
        ability = self.ability_of[index] if index < len(self.ability_of) else "extraction"
        sample = self._sample_single if task_type == "single" else self._sample_addon
        rich = {"rich_first": ability in ("multi_session", "abstention")} if task_type == "addon" else {}
        slots, meta = sample(rng, source, 3 if ability == "multi_session" else 1, **rich)
        task = self._task_shell(index, task_type, split, slots, meta)
        parts = A.prepare(ability, self.view, slots, rng)

        # step 5 (early): searchable, gold accepted, alternatives
        searchable, queries, ranks = self.searchable(task)
        if searchable is False:
            raise CheckFailed("not_searchable", "; ".join(q for q, r in zip(queries, ranks) if r is None))
        ok, reasons = gold_accepted(task, self.view.by_id)
        if not ok:
            raise CheckFailed("gold_rejected", "; ".join(reasons))
        n_alt, capped, slack, over = self.alternatives(task, slots, meta)

        # steps 2-3: instruction and needle dialogues
        if task_type == "single":
            n_needles = min(_weighted(rng, cfg.single_needles), len(slots[0].wanted))
        else:
            n_needles = max(1, math.ceil(len(slots) / rng.choice([1, 2])))
        spec = TaskSpec(
            task_id=task.task_id,
            index=index,
            task_type=task_type,
            slots=slots,
            n_needles=n_needles,
            seed=rng.randrange(2**31),
            voucher=meta.get("voucher"),
            budget=meta.get("budget"),
            currency=task.currency,
            shop_name=meta.get("shop_name"),
        )
        try:
            instruction = self.generator.instruction(spec, rng).strip()
            A.write_sessions(self.generator, spec, parts, rng)
        except GenerationError as e:
            raise CheckFailed("generator_invalid_output", str(e)) from None
        if leaked_values(task.preferences, instruction):
            raise CheckFailed("instruction_leaks_preference", instruction)

        def sessions(kind: str, dialogues: list) -> list[Session]:
            return [
                Session(
                    session_id=opaque_id(task.task_id, kind, str(j)),
                    turns=turns,
                    source=f"{self.generator.name}-{kind}:{task.task_id}:{j}",
                )
                for j, turns in enumerate(dialogues)
            ]

        needles, stale = sessions("needle", parts.needles), sessions("stale", parts.stale)
        missing = unstated_features(task.preferences, needles)
        if missing:
            raise CheckFailed("not_resolvable", ", ".join(f"{p.attribute}={p.value}" for p in missing))
        feats = self.wanted_features(slots)
        own = [c for s in needles for c in self.detector.find(s, feats, [], cache=False)]  # needles agree
        if own:
            raise CheckFailed("needle_conflict", own[0].describe())
        distractors = self._distractors(spec, rng, feats)

        # step 4: haystack, denoising, injection
        if cfg.sessions_std > 0:
            n_sess = round(rng.gauss(cfg.sessions_per_user, cfg.sessions_std))
            n_sess = max(1, min(n_sess, round(cfg.sessions_per_user + 4 * cfg.sessions_std)))
        else:  # a fractional mean is met on average: floor or ceil with the right odds
            lo = int(cfg.sessions_per_user)
            n_sess = lo + (rng.random() < cfg.sessions_per_user - lo)
        target = None
        if cfg.tokens_per_user is not None:
            target = (
                rng.gauss(cfg.tokens_per_user, cfg.tokens_std) if cfg.tokens_std > 0 else float(cfg.tokens_per_user)
            )
        needle_tokens = sum(session_tokens(s) for s in needles + distractors + stale)
        chosen = self.pool.select(rng, n_sess, target, needle_tokens, cfg.token_tolerance)
        chosen, changes, conflicts = self.denoise(spec, chosen, feats, rng)
        if conflicts:
            raise CheckFailed("conflicting_haystack", conflicts[0].describe())

        hay_ids = [opaque_id(ps.session.source or "pool", ps.session.session_id) for ps in chosen]
        order = list(hay_ids)
        for n in distractors:
            order.insert(rng.randint(0, len(order)), n.session_id)
        order = A.place_sessions(rng, order, [n.session_id for n in needles], [s.session_id for s in stale], parts)
        history = assign_dates(rng, order, cfg.start_date, cfg.max_gap_days)
        A.check_dated(parts, history, needles, stale, distractors, self.detector, feats)
        try:
            instruction = A.finish_instruction(
                self.generator, spec, parts, instruction, history, needles, task.preferences, rng
            )
        except GenerationError as e:
            raise CheckFailed("generator_invalid_output", str(e)) from None
        task = verified_task(
            task,
            history=history,
            needles=needles,
            changes=changes,
            search=(searchable, queries, ranks, cfg.searchable_top_k),
            alternatives=(n_alt, capped, slack, over),
            gold_accepted=True,
            instruction=instruction,
            stale_session_ids=[s.session_id for s in stale],
            **parts.record(),
        )
        return {
            "task": task.model_dump(mode="json"),
            "needles": [n.model_dump(mode="json") for n in needles],
            "stale": [s.model_dump(mode="json") for s in stale],
            "distractors": [d.model_dump(mode="json") for d in distractors],
            "haystack": [[hid, ps.session.session_id] for hid, ps in zip(hay_ids, chosen)],
        }

    def _distractors(self, spec: TaskSpec, rng: random.Random, feats: list[WantedFeature]) -> list[Session]:
        """``config.distractors_per_task`` topic distractors from the generator: sessions about the
        task's product type or domain that state no preference (so the bare instruction matches
        several sessions, as in LongMemEval's haystacks). One the conflict detector flags is left
        out, never rewritten."""
        n = self.config.distractors_per_task
        make = getattr(self.generator, "distractors", None)
        if n <= 0 or make is None:
            return []
        brands = [(s.index, s.product.brand) for s in spec.slots if s.product.brand]
        out: list[Session] = []
        for j, turns in enumerate(make(spec, rng, n)):
            sess = Session(
                session_id=opaque_id(spec.task_id, "distractor", str(j)),
                turns=turns,
                source=f"{self.generator.name}-distractor:{spec.task_id}:{j}",
            )
            if not self.detector.find(sess, feats, brands, cache=False):
                out.append(sess)
        return out

    def make_task(self, index: int) -> dict[str, Any]:
        """Build task ``index``: a part record ``{"index", "status": "ok"|"dropped", "task",
        "needles", "haystack", "failures": {check: count}, "attempts"}``."""
        task_type, split, source = self.plan[index]
        failures: Counter[str] = Counter()
        if task_type in self.shortfall:
            head = {"index": index, "task_type": task_type, "status": "dropped", "failures": {}, "attempts": 0}
            return {**head, "drop_reason": "infeasible_task_type"}
        rng = task_rng(self.config.seed, index)
        last = ""
        # multi_session / abstention need a product rich in features: half the attempts in the planned source, then any
        relax = index < len(self.ability_of) and self.ability_of[index] in ("multi_session", "abstention")
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                src = None if relax and attempt > self.config.max_attempts // 2 else source
                rec = self._attempt(index, task_type, split, rng, src)
            except CheckFailed as f:
                failures[f.check] += 1
                last = f"{f.check}: {f.detail}"[:300]
                continue
            return {
                "index": index,
                "task_type": task_type,
                "status": "ok",
                **rec,
                "failures": dict(sorted(failures.items())),
                "attempts": attempt,
            }
        return {
            "index": index,
            "task_type": task_type,
            "status": "dropped",
            "failures": dict(sorted(failures.items())),
            "attempts": self.config.max_attempts,
            "drop_reason": last,
        }

    # ------------------------------------------------------------------ running and assembling

    def run(
        self, store: "PartStore | None" = None, progress: Callable[[int, int, dict[str, Any]], None] | None = None
    ) -> SynthOutput:
        """Build every task (reusing finished parts from ``store``) and assemble the output."""
        t0 = time.perf_counter()
        parts: list[dict[str, Any]] = []
        reused = 0
        with phase("synthesis: tasks (sampling, dialogues, verification)"):
            for i in range(len(self.plan)):
                rec = store.get(i) if store is not None else None
                if rec is None:
                    rec = self.make_task(i)
                    if store is not None:
                        store.put(i, rec)
                else:
                    reused += 1
                parts.append(rec)
                if progress is not None:
                    progress(i + 1, len(self.plan), rec)
        self.timings["tasks_s"] = round(time.perf_counter() - t0, 2)
        self.timings["reused_parts"] = reused
        with phase("synthesis: statistics"):
            return self.assemble(parts)

    def assemble(self, parts: list[dict[str, Any]]) -> SynthOutput:
        """Tasks, sessions, statistics and manifest from the part records (index order)."""
        from shopping_companion.benchmark.synthesis.stats import compute_stats

        t0 = time.perf_counter()
        tasks: list[Task] = []
        sessions: dict[str, Session] = {}
        failures: Counter[str] = Counter()
        dropped: Counter[str] = Counter()
        attempts = 0
        for rec in parts:
            failures.update(rec.get("failures", {}))
            attempts += rec.get("attempts", 0)
            if rec["status"] != "ok":
                dropped[rec["task_type"]] += 1
                continue
            task = Task.model_validate(rec["task"])
            tasks.append(task)
            for n in rec["needles"] + rec.get("distractors", []) + rec.get("stale", []):
                s = Session.model_validate(n)
                sessions[s.session_id] = s
            for hid, src in rec["haystack"]:
                if hid not in sessions:
                    ps = self.pool.by_id[src].session
                    sessions[hid] = Session(session_id=hid, turns=ps.turns, source=ps.session_id)
        if not tasks:
            reasons = Counter(r.get("drop_reason", "")[:120] for r in parts if r["status"] != "ok")
            raise SynthError(
                "no task passed verification; most common reasons: "
                + "; ".join(f"{r} ({n}x)" for r, n in reasons.most_common(3))
            )
        st = compute_stats(
            tasks,
            sessions,
            self.view.products,
            embedder=self.embedder,
            minilm_tasks=self.config.minilm_tasks,
            seed=self.config.seed,
        )
        verification = {
            "attempts": attempts,
            "passed": len(tasks),
            "failed_attempts_by_check": dict(sorted(failures.items())),
            "dropped_tasks": sum(dropped.values()),
            "dropped_by_type": dict(sorted(dropped.items())),
            "checks_recorded": ["resolvable", "searchable", "conflict_free", "gold_accepted", "n_alternatives"],
            "searchable_checked": self.searcher is not None,
        }
        if self.shortfall:
            verification["shortfall"] = self.shortfall
        counts = task_counts(tasks, len(sessions), len(self.plan))
        manifest = {
            "format_version": FORMAT_VERSION,
            "generator": self.generator.describe(),
            "seed": self.config.seed,
            "config": self.config.model_dump(mode="json"),
            "sources": self.sources,
            "inputs": {
                "catalog": dict(sorted(self.view.report.items())),
                "catalog_products": len(self.view.products),
                "addon_shop_groups": len(self.view.addon_groups),
                "pool": self.pool.describe(),
            },
            "counts": counts,
            "verification": verification,
            "stats_summary": {
                **stats_summary(st),
                "needle_top10_minilm": st["needle_top10"]["minilm"]["all"]["share"],
                "needle_topic_top10_minilm": st["needle_topic_top10"]["minilm"]["all"]["share"],
                "needle_verbatim_share": (st.get("needle_verbatim") or {}).get("needle_sessions"),
                "sources_used": st["sources"]["sources_used"],
                "max_source_share": st["sources"]["max_share"],
                "departments": sum(1 for d, n in st["departments"]["reference"] if n and d != "Other"),
                "extracted_share": st["provenance"]["extracted_share"],
                "numeric_share": st["provenance"]["numeric_share"],
            },
        }
        self.timings["assemble_s"] = round(time.perf_counter() - t0, 2)
        self.timings.update(st.get("_timings", {}))
        log = {"timings": dict(self.timings)}
        if hasattr(self.generator, "stats"):
            log["generator_calls"] = dict(self.generator.stats)
        return SynthOutput(
            tasks=tasks, sessions=sessions, manifest=manifest, dropped=dict(failures), stats=st, build_log=log
        )


def build_benchmark(
    out_dir: str | Path,
    products: list[Product],
    pool: list[Session],
    config: SynthConfig,
    searcher: Any = None,
    sources: dict[str, Any] | None = None,
    *,
    fresh: bool = False,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    **options: Any,
) -> SynthOutput:
    """Build (or resume) a benchmark directory: parts under ``.partial/`` as tasks finish, then the
    final files (:func:`write_benchmark`). An existing complete directory is rebuilt.

    ``products``, ``pool``, ``config``, ``searcher``, ``sources``, ``progress`` and ``options``
    (the other keywords of :class:`Synthesizer`: ``generator``, ``embedder``) are those of
    :func:`~shopping_companion.benchmark.synth.synthesize`; ``fresh`` discards a partial build.

    Raises :class:`SynthError` for inputs that cannot give the benchmark, a concurrent build or a
    partial build from other inputs (see :class:`PartStore`). On any error the directory has no
    manifest, so it is never taken for a complete benchmark.
    """
    t0 = time.perf_counter()
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").unlink(missing_ok=True)
    with phase("synthesis: setup"):
        synth = Synthesizer(products, pool, config, searcher=searcher, sources=sources, **options)
    store = PartStore(d, synth.fingerprint(), fresh=fresh)
    try:
        out = synth.run(store, progress)
        out.build_log["timings"]["total_s"] = round(time.perf_counter() - t0, 2)
        with phase("synthesis: writing"):
            write_benchmark(out, d)
    finally:
        store.close()
    store.remove()
    return out
