"""Error taxonomy of failed episodes (Shopping Companion App. F.2, Table 7), by rules.

The paper attributes GPT-5's failures with a two-pass LLM pipeline (free-form per-trajectory
analysis, then bottom-up clustering) into six categories. Here each category is a precise,
deterministic rule over the recorded trajectory, so the distribution is reproducible and free;
:func:`llm_attribute` adds an optional LLM attribution through any
:class:`~shopping_companion.llm.base.ChatBackend` for comparison.

Which episodes are classified
    Failed episodes only: scored (no backend error, no failed verdict) and ``succ`` false.

Stages
    The *preference stage* is the stage-1 trajectory when there is one (two-stage modes), the
    single trajectory of a ``one_stage`` episode, and none for ``oracle`` (preferences are given);
    the *shopping stage* is the last trajectory of the episode (stage 2, or the only stage of a
    one-stage/oracle episode).

Text matching
    "Value v appears in text T" means: the normalised tokens of v
    (:func:`shopping_companion.judges.rule.normalize_tokens`: lowercase, accents and stop words
    dropped, singularised, colour/color-style synonyms) occur contiguously in the normalised
    tokens of T. Products seen by the agent are the JSON objects starting with ``"product_id"``
    inside product-tool observations (recovered even from truncated observations).

The six rules (an episode may match several; each match records its evidence)
    ``unverified_attributes`` (Unverified Attributes)
        Some recommended product was never returned by a successful ``product_view`` call
        (its features can only have come from search titles), or the final answer asserts a
        wanted preference value (a ``want`` preference, identified in stage 1 or gold, whose value
        appears in the answer) that appears in the ``product_view`` record of none of the
        recommended products.
    ``same_shop_alignment`` (Same-shop Alignment)
        Add-on task with ≥ 2 recommended products whose shop ids (from the agent's tool
        observations, else the catalog lookup) are not all equal, or whose shop differs from the
        voucher's ``shop_id``.
    ``multi_sku_single_task`` (Multi-SKU in Single Task)
        Single-product task whose final answer recommends more than one distinct product id.
    ``product_id_sourcing`` (Product ID / Sourcing Errors)
        A recommended id that no successful product tool call of the episode returned, or that
        the catalog lookup (when given) does not know, or a malformed ``@REC`` marker.
    ``preference_hallucination`` (Preference Hallucination)
        The preference stage reported ≥ 1 preference and either (a) one of the reported values
        appears in no memory-tool observation (``mem_search`` snippets or ``mem_view`` sessions)
        of that stage, or (b) it made no successful ``mem_view`` call and its Acc is below 1
        (it trusted snippets and got preferences wrong or missing).
    ``insufficient_tool_calls`` (Insufficient Tool Calls)
        The shopping stage made no successful ``product_search`` / ``product_view`` call.

Primary category
    For the Table 7 distribution every failed episode gets one primary category: the first
    matching rule in :data:`PRIMARY_ORDER`, which follows the trajectory's order (errors early in
    the episode cascade into later ones, App. F.1): preference hallucination, insufficient tool
    calls, product id/sourcing, unverified attributes, same-shop alignment, multi-SKU; ``other``
    when no rule matches (e.g. a verified product that simply misses a preference).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

from shopping_companion.benchmark.metrics import scored, strategy_of
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS
from shopping_companion.judges.rule import normalize_tokens
from shopping_companion.types import EpisodeResult, Preference, Product, Task, Trajectory

__all__ = [
    "CATEGORIES",
    "CATEGORY_LABELS",
    "PRIMARY_ORDER",
    "Classification",
    "LLMAttribution",
    "classify",
    "classify_failures",
    "taxonomy_table",
    "llm_attribute",
    "attribution_prompt",
]

CATEGORY_LABELS: dict[str, str] = {
    "unverified_attributes": "Unverified Attributes",
    "same_shop_alignment": "Same-shop Alignment",
    "multi_sku_single_task": "Multi-SKU in Single Task",
    "product_id_sourcing": "Product ID / Sourcing",
    "preference_hallucination": "Preference Hallucination",
    "insufficient_tool_calls": "Insufficient Tool Calls",
}
#: The categories in the paper's Table 7 order.
CATEGORIES: tuple[str, ...] = tuple(CATEGORY_LABELS)
#: Precedence for the single primary category (earliest failure in the trajectory first).
PRIMARY_ORDER: tuple[str, ...] = (
    "preference_hallucination",
    "insufficient_tool_calls",
    "product_id_sourcing",
    "unverified_attributes",
    "same_shop_alignment",
    "multi_sku_single_task",
)
OTHER = "other"

_PRODUCT_OBJ = re.compile(r'\{\s*"product_id"\s*:')

Lookup = Callable[[list[str]], Mapping[str, Product]]


@dataclass
class Classification:
    """The rule-based taxonomy of one failed episode.

    ``labels``: every matching category (in :data:`CATEGORIES` order); ``primary``: the first of
    :data:`PRIMARY_ORDER` among them, or ``"other"``; ``evidence``: per label, short strings
    saying what matched (ids, values).
    """

    task_id: str
    trial: int
    strategy: str
    task_type: str
    labels: list[str]
    primary: str
    evidence: dict[str, list[str]] = field(default_factory=dict)
    llm: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- helpers


def _phrase(tokens: tuple[str, ...]) -> str:
    return f" {' '.join(tokens)} "


def _appears(value: str, text_norm: str) -> bool:
    v = normalize_tokens(value)
    return bool(v) and _phrase(v) in text_norm


def _norm_text(text: str) -> str:
    return _phrase(normalize_tokens(text))


def _products_in(content: str) -> list[dict[str, Any]]:
    """Every complete JSON object starting with ``"product_id"`` in an observation."""
    out: list[dict[str, Any]] = []
    dec = json.JSONDecoder()
    for m in _PRODUCT_OBJ.finditer(content):
        try:
            obj, _ = dec.raw_decode(content, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("product_id"), str):
            out.append(obj)
    return out


def _stages(r: EpisodeResult) -> tuple[Trajectory | None, Trajectory | None]:
    trajs = [s.trajectory for s in r.stages]
    if not trajs:
        return None, None
    pref = next((t for t in trajs if t.stage == 1), None)
    if pref is None and r.mode == "one_stage":
        pref = trajs[-1]
    return pref, trajs[-1]


def _episode_products(r: EpisodeResult) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], set[str]]:
    """(seen: id -> merged record from any product tool, viewed: id -> product_view record,
    returned: ids returned by successful product tool calls)."""
    seen: dict[str, dict[str, Any]] = {}
    viewed: dict[str, dict[str, Any]] = {}
    returned: set[str] = set()
    for s in r.stages:
        for tr in s.trajectory.tool_results:
            if tr.name not in PRODUCT_TOOLS or tr.error is not None:
                continue
            returned.update(tr.returned_ids)
            for obj in _products_in(tr.content):
                pid = obj["product_id"]
                seen.setdefault(pid, {}).update(obj)
                if tr.name == "product_view":
                    viewed[pid] = obj
    return seen, viewed, returned


def _ok_calls(t: Trajectory, names: Iterable[str]) -> list[Any]:
    return [tr for tr in t.tool_results if tr.name in names and tr.error is None]


# --------------------------------------------------------------------------- rules


def classify(r: EpisodeResult, task: Task | None = None, lookup: Lookup | None = None) -> Classification | None:
    """Apply the six rules (module docstring) to one episode.

    Returns None when the episode is not a scored failure (errored, judge-failed or
    successful). ``task`` adds the gold preferences and the voucher; ``lookup`` (``ids ->
    {id: Product}``) resolves shops and unknown ids that the trajectory does not show.
    """
    if r.succ or not scored([r]):
        return None
    pref_t, shop_t = _stages(r)
    evidence: dict[str, list[str]] = {}
    seen, viewed, returned = _episode_products(r)
    rec_ids = list(dict.fromkeys(shop_t.recommended_ids)) if shop_t else []
    known: dict[str, Product] = {}
    if lookup is not None and rec_ids:
        try:
            known = dict(lookup(rec_ids))
        except Exception:  # a lookup failure just removes the catalog evidence
            known = {}

    # insufficient tool calls
    if shop_t is not None and not _ok_calls(shop_t, PRODUCT_TOOLS):
        evidence["insufficient_tool_calls"] = [
            f"stage {shop_t.stage}: 0 successful product tool calls in {len(shop_t.steps)} turn(s)"
        ]

    # preference hallucination
    if pref_t is not None and pref_t.identified_preferences:
        mem_calls = _ok_calls(pref_t, MEMORY_TOOLS)
        mem_text = "".join(_norm_text(tr.content) for tr in mem_calls)
        ev = [
            f"value '{p.value}' ({p.attribute}) not in any memory observation"
            for p in pref_t.identified_preferences
            if p.value.strip() and not _appears(p.value, mem_text)
        ]
        if not any(tr.name == "mem_view" for tr in mem_calls) and r.acc < 1.0:
            ev.append(f"no successful mem_view call; Acc {r.acc:.2f}")
        if ev:
            evidence["preference_hallucination"] = ev

    # product id / sourcing
    ev = []
    for pid in rec_ids:
        if pid not in returned:
            ev.append(f"{pid} never returned by a product tool")
        elif lookup is not None and pid not in known:
            ev.append(f"{pid} unknown to the catalog")
    if shop_t is not None and shop_t.final_answer:
        from shopping_companion.envs.parsing import extract_rec_ids

        malformed = extract_rec_ids(shop_t.final_answer)[1]
        ev += [f"malformed marker {m!r}" for m in malformed]
    if ev:
        evidence["product_id_sourcing"] = ev

    # multi-SKU in a single task
    if r.task_type == "single" and len(rec_ids) > 1:
        evidence["multi_sku_single_task"] = [f"{len(rec_ids)} ids recommended: {', '.join(rec_ids)}"]

    # same-shop alignment
    if r.task_type == "addon" and len(rec_ids) >= 2:
        shops: dict[str, str] = {}
        for pid in rec_ids:
            sid = seen.get(pid, {}).get("shop_id") or (known[pid].shop_id if pid in known else None)
            if sid:
                shops[pid] = str(sid)
        ev = []
        if len(set(shops.values())) > 1:
            ev.append("products from shops " + ", ".join(f"{p}@{s}" for p, s in shops.items()))
        if task is not None and task.voucher is not None:
            off = [p for p, s in shops.items() if s != task.voucher.shop_id]
            if off:
                ev.append(f"not in the voucher's shop {task.voucher.shop_id}: {', '.join(off)}")
        if ev:
            evidence["same_shop_alignment"] = ev

    # unverified attributes
    if shop_t is not None and rec_ids:
        ev = [f"{pid} recommended without product_view" for pid in rec_ids if pid in returned and pid not in viewed]
        prefs: list[Preference] = list(pref_t.identified_preferences or []) if pref_t is not None else []
        if task is not None:
            prefs += task.preferences
        answer = _norm_text(shop_t.final_answer or "")
        viewed_text = "".join(_norm_text(json.dumps(viewed[p], ensure_ascii=False)) for p in rec_ids if p in viewed)
        asserted = list(dict.fromkeys(p.value for p in prefs if p.polarity == "want" and _appears(p.value, answer)))
        ev += [
            f"answer asserts '{v}' but no viewed record of the recommendation has it"
            for v in asserted
            if not _appears(v, viewed_text)
        ]
        if ev:
            evidence["unverified_attributes"] = ev

    labels = [c for c in CATEGORIES if c in evidence]
    primary = next((c for c in PRIMARY_ORDER if c in evidence), OTHER)
    return Classification(
        task_id=r.task_id,
        trial=r.trial,
        strategy=strategy_of(r),
        task_type=r.task_type,
        labels=labels,
        primary=primary,
        evidence=evidence,
    )


def classify_failures(
    results: Iterable[EpisodeResult], tasks: Mapping[str, Task] | None = None, lookup: Lookup | None = None
) -> list[Classification]:
    """:func:`classify` over every scored failure, in input order."""
    out = []
    for r in results:
        c = classify(r, (tasks or {}).get(r.task_id), lookup)
        if c is not None:
            out.append(c)
    return out


def taxonomy_table(items: Iterable[Classification], key: str = "primary") -> dict[str, Any]:
    """Table 7: counts per category and task type.

    ``key="primary"``: one category per failure (rows sum to the number of failures);
    ``key="labels"``: multi-label counts (a failure counts in every matching row). Returns
    ``{"rows": {category: {"single", "addon", "total", "share"}}, "n_failures", "by_task_type"}``
    with ``share`` = total / n_failures (None when there are no failures).
    """
    items = list(items)
    n = len(items)
    counts: dict[str, Counter[str]] = {c: Counter() for c in (*CATEGORIES, OTHER)}
    for it in items:
        cats = [it.primary] if key == "primary" else (it.labels or [OTHER])
        for c in cats:
            counts.setdefault(c, Counter())[it.task_type] += 1
    rows = {}
    for c, cnt in counts.items():
        total = sum(cnt.values())
        if c == OTHER and total == 0:
            continue
        rows[c] = {
            "single": cnt.get("single", 0),
            "addon": cnt.get("addon", 0),
            "total": total,
            "share": (total / n) if n else None,
        }
    return {"rows": rows, "n_failures": n, "by_task_type": dict(Counter(it.task_type for it in items))}


# --------------------------------------------------------------------------- LLM attribution


@dataclass
class LLMAttribution:
    """An LLM's attribution of one failure: ``category`` ∈ :data:`CATEGORIES` ∪ {"other"} or None
    when the answer was unusable (``error`` says why); ``raw`` is the model's text."""

    category: str | None
    secondary: list[str]
    explanation: str
    raw: str
    error: str | None = None
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_ATTR_SYSTEM = """\
You analyse why a tool-using shopping agent failed a task. The agent had two phases: first it \
searched the user's past conversations (mem_search, mem_view) to identify shopping preferences, \
then it searched and inspected catalog products (product_search, product_view) and recommended \
product ids with @REC::id@ markers. The task failed.

Pick the category that best explains the failure:
- unverified_attributes: claims product features that no product_view observation confirms \
(e.g. inferred from titles).
- same_shop_alignment: combines products from different shops although a same-shop voucher or \
bundle needs one shop.
- multi_sku_single_task: recommends several products when exactly one was requested.
- product_id_sourcing: recommends ids, specifications or prices that no tool returned \
(fabricated or misattributed).
- preference_hallucination: states user preferences not supported by the conversations, \
e.g. from mem_search snippets without mem_view.
- insufficient_tool_calls: skips necessary tool calls entirely and answers without evidence.
- other: none of the above.

Reply with one JSON object only:
{"category": "<one of the names above>", "secondary": ["<other names that also apply>"], \
"explanation": "<two sentences citing the turn or tool call>"}"""


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f" …[{len(s) - n} more chars]"


def attribution_prompt(r: EpisodeResult, task: Task | None = None, max_obs_chars: int = 600) -> list[dict[str, str]]:
    """The chat messages sent for one episode: the category definitions (system) and a compact
    transcript (user): instruction, gold preferences when ``task`` is given, every assistant turn
    (clipped to 1,500 chars), every tool call and observation (clipped to ``max_obs_chars``), the
    judge's reasons."""
    lines = [f"Task type: {r.task_type}. Strategy: {strategy_of(r)}."]
    if task is not None:
        lines.append(f"Instruction: {task.instruction}")
        lines.append(
            "Gold preferences: " + "; ".join(f"{p.attribute}={p.value} ({p.polarity})" for p in task.preferences)
        )
        if task.voucher:
            lines.append(
                f"Voucher: shop {task.voucher.shop_id}, min spend {task.voucher.min_spend}, "
                f"discount {task.voucher.discount}; budget {task.budget}"
            )
    for s in r.stages:
        t = s.trajectory
        lines.append(f"\n=== Stage {t.stage} (termination: {t.termination}) ===")
        for i, st in enumerate(t.steps):
            lines.append(f"[turn {i} assistant] {_clip(st.assistant_text, 1500)}")
            for tr in st.tool_results:
                status = f"error: {tr.error}" if tr.error else "ok"
                lines.append(f"[turn {i} tool {tr.name} ({status})] {_clip(tr.content, max_obs_chars)}")
        lines.append(f"Judge reasons: {'; '.join(s.verdict.reasons) or '-'}")
    return [{"role": "system", "content": _ATTR_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def _parse_attribution(text: str) -> tuple[dict[str, Any] | None, str | None]:
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and "category" in obj:
            return obj, None
    return None, "no JSON object with a 'category' field in the reply"


def llm_attribute(r: EpisodeResult, backend: Any, task: Task | None = None, sampling: Any = None) -> LLMAttribution:
    """Ask ``backend`` (a ChatBackend) to attribute one failed episode.

    Never raises for a bad reply or a backend failure: ``category`` is None and ``error`` says
    why (a backend failure is recorded, not counted as any category). Unknown category names are
    rejected the same way; unknown names in ``secondary`` are dropped.
    """
    from shopping_companion.llm.base import BackendError, Sampling

    sampling = sampling or Sampling(temperature=0.0, max_tokens=512)
    name = getattr(backend, "name", type(backend).__name__)
    try:
        msg = backend.chat(attribution_prompt(r, task), None, sampling)
    except BackendError as e:
        return LLMAttribution(None, [], "", "", error=f"backend error: {e}", model=name)
    text = msg.content or ""
    obj, err = _parse_attribution(text)
    if obj is None:
        return LLMAttribution(None, [], "", text, error=err, model=name)
    allowed = set(CATEGORIES) | {OTHER}
    cat = str(obj.get("category", "")).strip()
    sec = obj.get("secondary") if isinstance(obj.get("secondary"), list) else []
    sec = [str(x) for x in sec if str(x) in allowed and str(x) != cat]
    if cat not in allowed:
        return LLMAttribution(
            None,
            sec,
            str(obj.get("explanation", "")),
            text,
            error=f"unknown category {cat!r}; allowed: {', '.join(sorted(allowed))}",
            model=name,
        )
    return LLMAttribution(cat, sec, str(obj.get("explanation", "")), text, model=name)
