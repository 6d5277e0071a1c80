"""Error taxonomy of failed episodes (Shopping Companion App. F, Table 7), by rules.

The paper attributes GPT-5's failures with a two-pass LLM pipeline (free-form per-trajectory
analysis, then bottom-up clustering) into six categories. Here each category is a deterministic
rule over the recorded episode -- its tool calls and what they returned, the needle sessions the
memory tools reached, the preferences identified against the gold ones, the judge's verdict fields
and reasons, the termination reason, the recommended ids against the tools' products, shops and
the voucher -- so the distribution is reproducible and free, and every label carries the evidence
that fired it. :func:`llm_attribute` adds an optional LLM attribution through any
:class:`~shopping_companion.llm.base.ChatBackend` for comparison.

Which episodes are classified
    Failed episodes only: scored (no backend error, no failed verdict) and ``succ`` false.

Stages and inputs
    The *preference stage* is the stage-1 trajectory (two-stage modes), the single trajectory of a
    ``one_stage`` episode (judged through ``preference_verdict``), and none for ``oracle``
    (preferences are given); the *shopping stage* is the last trajectory of the episode. The gold
    preferences, needle sessions, voucher and number of requested products come from the task
    when it is given; without it, the rules that need them fall back to the verdicts' counts
    (``m1`` < F, ``h1``) or do not fire. A *gold label* is ``attribute=value``, as the judges write
    it in ``Verdict.matched``; a gold preference is *missed in stage 1* when the stage-1 verdict does
    not list it as matched, and *failed in stage 2* when the stage-2 verdict does not.

Text matching
    "Value v appears in text T": the normalised tokens of v
    (:func:`shopping_companion.judges.rule.normalize_tokens`: lowercase, accents and stop words
    dropped, singularised, colour/color-style synonyms) occur contiguously in those of T. Products
    seen by the agent are the JSON objects starting with ``"product_id"`` inside product-tool
    observations (recovered even from truncated observations).

The rules (an episode may match several; each match records its evidence)
    ``preference_hallucination`` (Preference Hallucination; App. F.2: preferences claimed without
    support, App. F.1: "incorrect or incomplete preferences" extracted from memory) -- stage 1:
        (a) the judge counted spurious identified preferences (``h1`` > 0; its ``spurious:``
        reasons are quoted); (b) a reported value appears in no memory observation of the stage
        (``mem_search`` snippets or ``mem_view`` sessions); (c) a gold preference was missed
        although every needle session had been opened with ``mem_view`` (the evidence was read and
        not extracted).
    ``insufficient_tool_calls`` (Insufficient Tool Calls; App. F.1: mem_view skipped, snippets
    trusted; App. F.2: necessary invocations skipped) --
        stage 1: a gold preference was missed and some needle session was never opened with
        ``mem_view`` (evidence: how many needles ``mem_search`` returned in how many calls, how
        many were viewed); without the task: ``m1`` < F and no successful ``mem_view`` call.
        Stage 2: the shopping stage made no successful ``product_search`` / ``product_view`` call.
    ``product_id_sourcing`` (Product ID / Sourcing Errors) -- stage 2: a recommended id that no
        successful product tool call of the episode returned, that the catalog lookup (when given)
        or the judge (``not in the catalog``) does not know, or a malformed ``@REC`` marker.
    ``multi_sku_single_task`` (Multi-SKU in Single Task) -- stage 2: a single-product task whose
        answer recommends more than one distinct product id.
    ``same_shop_alignment`` (Same-shop Alignment) -- stage 2: an add-on task whose recommended
        products (shop ids from the agent's tool observations, else the catalog lookup) are not
        all of one shop, or not of the voucher's ``shop_id``, or the judge says so.
    ``unverified_attributes`` (Unverified Attributes) -- stage 2: (a) a recommended product never
        returned by a successful ``product_view`` call; (b) the answer asserts a wanted value
        (identified in stage 1 or gold) that the ``product_view`` record of no recommended product
        shows; (c) a recommended product fails a gold preference that the agent had (matched in
        stage 1, or given: oracle) -- the requirement was known and not checked against the
        product (evidence: the judge's ``lacks`` / ``has avoided`` reason and whether the viewed
        record shows the value); (d) a recommended product is not of the requested product type
        (the judge's ``is not a`` reason).
    Extensions (not in the paper's Table 7; they name failures its six categories do not cover):
    ``budget_exceeded`` (Budget Exceeded) -- stage 2: an add-on bundle of one shop whose price
        after the voucher exceeds the budget (the judge's ``u2`` = 0 with an ``exceeds budget``
        reason).
    ``incomplete_answer`` (Incomplete Answer) -- stage 2: the stage ended without an answer
        (termination ``max_turns``, ``invalid_output``, ``length``, ``context_length``,
        ``token_budget``) or the answer recommends fewer products than the task requests; also
        stage 1 ending without an answer.

Primary category (precedence)
    Every failed episode gets one primary category, for the Table 7 distribution; the other labels
    are its secondary categories. Errors early in the episode cascade into later ones (App. F.1),
    so a *cascading* preference-stage error comes first: a stage-1 label is cascading when a gold
    preference missed in stage 1 is also failed in stage 2, when stage 1 reported spurious
    preferences and stage 2 failed a preference, or when there is no stage-2 evidence of another
    cause. Precedence (:data:`PRIMARY_ORDER`): cascading stage-1 labels (preference hallucination,
    then insufficient memory inspection), then the stage-2 labels in the order insufficient tool
    calls, product id/sourcing, multi-SKU, same-shop alignment, unverified attributes, budget
    exceeded, incomplete answer (answer-level violations that fail a task on their own before
    attribute-level ones), then non-cascading stage-1 labels; ``other`` when no rule matches (e.g.
    a product whose viewed record shows every wanted value but that the judge still rejects).
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
from shopping_companion.types import EpisodeResult, Preference, Product, Task, Trajectory, Verdict

__all__ = [
    "CATEGORIES",
    "EXTENSIONS",
    "CATEGORY_LABELS",
    "PRIMARY_ORDER",
    "Classification",
    "LLMAttribution",
    "classify",
    "classify_failures",
    "taxonomy_table",
    "llm_attribute",
    "attribution_prompt",
    "products_in",
]

CATEGORY_LABELS: dict[str, str] = {
    "unverified_attributes": "Unverified Attributes",
    "same_shop_alignment": "Same-shop Alignment",
    "multi_sku_single_task": "Multi-SKU in Single Task",
    "product_id_sourcing": "Product ID / Sourcing",
    "preference_hallucination": "Preference Hallucination",
    "insufficient_tool_calls": "Insufficient Tool Calls",
    "budget_exceeded": "Budget Exceeded (ext.)",
    "incomplete_answer": "Incomplete Answer (ext.)",
}
#: The paper's six categories, in its Table 7 order (the names the LLM attribution may use).
CATEGORIES: tuple[str, ...] = tuple(list(CATEGORY_LABELS)[:6])
#: Categories this implementation adds for failures the paper's six do not name.
EXTENSIONS: tuple[str, ...] = tuple(list(CATEGORY_LABELS)[6:])
#: Precedence of the stage-2 rules (answer-level violations before attribute-level ones).
STAGE2_ORDER: tuple[str, ...] = (
    "insufficient_tool_calls",
    "product_id_sourcing",
    "multi_sku_single_task",
    "same_shop_alignment",
    "unverified_attributes",
    "budget_exceeded",
    "incomplete_answer",
)
#: Precedence of the preference-stage rules.
STAGE1_ORDER: tuple[str, ...] = ("preference_hallucination", "insufficient_tool_calls", "incomplete_answer")
#: Primary-category precedence: cascading stage-1 labels, stage-2 labels, other stage-1 labels
#: (module docstring). A category may appear twice; its first applicable position counts.
PRIMARY_ORDER: tuple[str, ...] = tuple(f"stage1:{c}" for c in STAGE1_ORDER) + tuple(f"stage2:{c}" for c in STAGE2_ORDER)
OTHER = "other"

_PRODUCT_OBJ = re.compile(r'\{\s*"product_id"\s*:')
_WRONG_TYPE = re.compile(r": a .+ is not a ['\"]")  # the rule judge's product-type reason
_NO_ANSWER = ("max_turns", "invalid_output", "length", "context_length", "token_budget")

Lookup = Callable[[list[str]], Mapping[str, Product]]


@dataclass
class Classification:
    """The rule-based taxonomy of one failed episode.

    ``labels``: every matching category (in :data:`CATEGORY_LABELS` order); ``primary``: the
    category chosen by the precedence of the module docstring, or ``"other"``; ``secondary``: the
    other labels; ``evidence``: per label, short strings saying what fired it (stage, ids, values,
    counts, the judge's reasons).
    """

    task_id: str
    trial: int
    strategy: str
    task_type: str
    labels: list[str]
    primary: str
    evidence: dict[str, list[str]] = field(default_factory=dict)
    llm: dict[str, Any] | None = None
    secondary: list[str] = field(default_factory=list)

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


def products_in(content: str) -> list[dict[str, Any]]:
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


def _pref_verdict(r: EpisodeResult) -> Verdict | None:
    if r.mode == "oracle":
        return None
    v = next((s.verdict for s in r.stages if s.trajectory.stage == 1), None)
    return v if v is not None else r.preference_verdict


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
            for obj in products_in(tr.content):
                pid = obj["product_id"]
                seen.setdefault(pid, {}).update(obj)
                if tr.name == "product_view":
                    viewed[pid] = obj
    return seen, viewed, returned


def _ok_calls(t: Trajectory, names: Iterable[str]) -> list[Any]:
    return [tr for tr in t.tool_results if tr.name in names and tr.error is None]


def _label(p: Preference) -> str:
    return f"{p.attribute}={p.value}"


def _reasons(v: Verdict | None, needle: str) -> list[str]:
    return [x for x in (v.reasons if v is not None else []) if needle in x]


# --------------------------------------------------------------------------- stage-1 rules


def _stage1_rules(
    r: EpisodeResult, pref_t: Trajectory, v1: Verdict | None, task: Task | None
) -> tuple[dict[str, list[str]], set[str]]:
    """Evidence of the preference-stage rules and the gold labels missed in stage 1."""
    ev: dict[str, list[str]] = {}
    gold = [_label(g) for g in task.preferences] if task is not None else []
    matched1 = set(v1.matched) if v1 is not None else set()
    missed1 = {g for g in gold if g not in matched1} if v1 is not None else set()
    n_missed = len(missed1) if task is not None else (max(0, int(round(v1.F - (v1.m1 or 0)))) if v1 else 0)
    missed_txt = ", ".join(sorted(missed1)) if missed1 else f"{n_missed} preference(s)"

    mem_calls = _ok_calls(pref_t, MEMORY_TOOLS)
    searches = [tr for tr in mem_calls if tr.name == "mem_search"]
    views = [tr for tr in mem_calls if tr.name == "mem_view"]
    searched_ids = {i for tr in searches for i in tr.returned_ids}
    viewed_ids = {i for tr in views for i in tr.returned_ids}

    # preference hallucination
    ph: list[str] = []
    if v1 is not None and (v1.h1 or 0) > 0:
        spur = [x.removeprefix("spurious: ") for x in _reasons(v1, "spurious: ")]
        ph.append(f"stage 1: {v1.h1} spurious preference(s) reported" + (f" ({'; '.join(spur[:3])})" if spur else ""))
    if pref_t.identified_preferences:
        mem_text = "".join(_norm_text(tr.content) for tr in mem_calls)
        ph += [
            f"stage 1: value '{p.value}' ({p.attribute}) is in no memory observation"
            for p in pref_t.identified_preferences
            if p.value.strip() and not _appears(p.value, mem_text)
        ]
    # insufficient memory inspection vs. evidence read but not extracted
    itc: list[str] = []
    if n_missed:
        if task is not None and task.needle_session_ids:
            needles = list(dict.fromkeys(task.needle_session_ids))
            unviewed = [s for s in needles if s not in viewed_ids]
            n_found = sum(1 for s in needles if s in searched_ids)
            if unviewed:
                itc.append(
                    f"stage 1: missed {missed_txt}; {len(unviewed)}/{len(needles)} needle session(s) never opened "
                    f"with mem_view (mem_search returned {n_found}/{len(needles)} needles in {len(searches)} "
                    f"call(s); {len(views)} mem_view call(s))"
                )
            else:
                ph.append(
                    f"stage 1: missed {missed_txt} although all {len(needles)} needle session(s) were opened "
                    "with mem_view"
                )
        elif not views:
            itc.append(f"stage 1: missed {missed_txt} with no successful mem_view call ({len(searches)} mem_search)")
    if ph:
        ev["preference_hallucination"] = ph
    if itc:
        ev["insufficient_tool_calls"] = itc
    if pref_t.termination in _NO_ANSWER and pref_t.final_answer is None:
        ev["incomplete_answer"] = [
            f"stage 1: ended by {pref_t.termination} after {len(pref_t.steps)} turn(s) without an answer"
        ]
    return ev, missed1


# --------------------------------------------------------------------------- stage-2 rules


def _stage2_rules(
    r: EpisodeResult,
    pref_t: Trajectory | None,
    shop_t: Trajectory,
    v2: Verdict,
    v1: Verdict | None,
    task: Task | None,
    lookup: Lookup | None,
) -> dict[str, list[str]]:
    from shopping_companion.envs.parsing import extract_rec_ids

    ev: dict[str, list[str]] = {}
    st = f"stage {shop_t.stage}"
    seen, viewed, returned = _episode_products(r)
    rec_ids = list(dict.fromkeys(shop_t.recommended_ids))
    malformed: list[str] = []
    if shop_t.final_answer:
        ids, malformed = extract_rec_ids(shop_t.final_answer)
        if not rec_ids:
            rec_ids = ids
    known: dict[str, Product] = {}
    if lookup is not None and rec_ids:
        try:
            known = dict(lookup(rec_ids))
        except Exception:  # a lookup failure just removes the catalog evidence
            known = {}

    # insufficient tool calls (shopping stage)
    if not _ok_calls(shop_t, PRODUCT_TOOLS):
        ev["insufficient_tool_calls"] = [
            f"{st}: 0 successful product tool calls in {len(shop_t.steps)} turn(s)"
            + (f"; recommended {', '.join(rec_ids)} without evidence" if rec_ids else "")
        ]

    # product id / sourcing
    e = []
    for pid in rec_ids:
        if pid not in returned:
            e.append(f"{st}: {pid} never returned by a product tool")
        elif lookup is not None and pid not in known:
            e.append(f"{st}: {pid} unknown to the catalog")
    e += [f"{st}: judge: {x}" for x in _reasons(v2, ": not in the catalog") if not any(x.split(":")[0] in y for y in e)]
    e += [f"{st}: malformed marker {m!r}" for m in malformed]
    if e:
        ev["product_id_sourcing"] = e

    # multi-SKU in a single task
    if r.task_type == "single" and len(rec_ids) > 1:
        ev["multi_sku_single_task"] = [f"{st}: {len(rec_ids)} ids recommended for one product: {', '.join(rec_ids)}"]

    # same-shop alignment
    if r.task_type == "addon" and len(rec_ids) >= 2:
        shops: dict[str, str] = {}
        for pid in rec_ids:
            sid = seen.get(pid, {}).get("shop_id") or (known[pid].shop_id if pid in known else None)
            if sid:
                shops[pid] = str(sid)
        e = []
        if len(set(shops.values())) > 1:
            e.append(f"{st}: products from shops " + ", ".join(f"{p}@{s}" for p, s in shops.items()))
        if task is not None and task.voucher is not None:
            off = [p for p, s in shops.items() if s != task.voucher.shop_id]
            if off:
                e.append(f"{st}: not in the voucher's shop {task.voucher.shop_id}: {', '.join(off)}")
        if not e:
            e = [f"{st}: judge: {x}" for x in _reasons(v2, "products are from different shops")]
        if e:
            ev["same_shop_alignment"] = e

    # unverified attributes
    if rec_ids:
        e = [
            f"{st}: {pid} recommended without product_view" for pid in rec_ids if pid in returned and pid not in viewed
        ]
        prefs: list[Preference] = list(pref_t.identified_preferences or []) if pref_t is not None else []
        if task is not None:
            prefs += task.preferences
        answer = _norm_text(shop_t.final_answer or "")
        viewed_text = "".join(_norm_text(json.dumps(viewed[p], ensure_ascii=False)) for p in rec_ids if p in viewed)
        asserted = list(dict.fromkeys(p.value for p in prefs if p.polarity == "want" and _appears(p.value, answer)))
        e += [
            f"{st}: answer asserts '{v}' but no viewed record of the recommendation has it"
            for v in asserted
            if not _appears(v, viewed_text)
        ]
        # gold labels the agent had: matched in stage 1, or all of them (oracle: given)
        if r.mode == "oracle":
            known = [_label(g) for g in task.preferences] if task is not None else []
        else:
            known = list(v1.matched) if v1 is not None else []
        matched2 = set(v2.matched)
        origin = "given (oracle)" if r.mode == "oracle" else "identified in stage 1"
        for lab in dict.fromkeys(known):
            if lab in matched2:
                continue
            value = lab.split("=", 1)[1] if "=" in lab else lab
            why = [x for x in v2.reasons if (f" lacks {lab}" in x or f" has avoided {lab}" in x)]
            judged = why[0] if why else f"{lab} not matched"
            # the product the judge names (its reason starts with the id), else every recommendation
            pid = next((p for p in rec_ids if judged.startswith(f"{p} ")), None)
            rec_text = _norm_text(json.dumps(viewed[pid], ensure_ascii=False)) if pid in viewed else viewed_text
            where = "its viewed record" if pid is not None else "a viewed record"
            shown = f"{where} shows" if _appears(value, rec_text) else f"{where} does not show"
            if pid is not None and pid not in viewed:
                shown = "it was never viewed, so nothing showed"
            e.append(f"{st}: judge: {judged}; the preference was {origin}, {shown} '{value}'")
        e += [f"{st}: judge: {x}" for x in v2.reasons if _WRONG_TYPE.search(x)]
        if e:
            ev["unverified_attributes"] = e

    # budget exceeded (extension)
    if r.task_type == "addon" and v2.u2 == 0:
        e = [f"{st}: judge: {x}" for x in _reasons(v2, "exceeds budget")]
        if e:
            ev["budget_exceeded"] = e

    # incomplete answer (extension)
    e = []
    if shop_t.final_answer is None and shop_t.termination in _NO_ANSWER:
        e.append(f"{st}: ended by {shop_t.termination} after {len(shop_t.steps)} turn(s) without an answer")
    n_req = task.n_products if task is not None else v2.N
    if shop_t.final_answer is not None and len(rec_ids) < n_req:
        e.append(f"{st}: {len(rec_ids)} of {n_req} requested product(s) recommended")
    if e:
        ev["incomplete_answer"] = e
    return ev


# --------------------------------------------------------------------------- classification


def classify(r: EpisodeResult, task: Task | None = None, lookup: Lookup | None = None) -> Classification | None:
    """Apply the rules (module docstring) to one episode.

    Returns None when the episode is not a scored failure (errored, judge-failed or
    successful). ``task`` adds the gold preferences, needle sessions, voucher and number of
    products; ``lookup`` (``ids -> {id: Product}``) resolves shops and unknown ids that the
    trajectory does not show. Never raises for an episode that :func:`scored` accepts.
    """
    if r.succ or not scored([r]):
        return None
    pref_t, shop_t = _stages(r)
    v1 = _pref_verdict(r)
    v2 = r.stages[-1].verdict if r.stages else None
    ev1: dict[str, list[str]] = {}
    missed1: set[str] = set()
    if pref_t is not None:
        ev1, missed1 = _stage1_rules(r, pref_t, v1, task)
    ev2: dict[str, list[str]] = {}
    if shop_t is not None and v2 is not None and (shop_t is not pref_t or r.mode == "one_stage"):
        ev2 = _stage2_rules(r, pref_t, shop_t, v2, v1, task, lookup)

    # does the preference-stage error reach the outcome?
    failed2: set[str] | None = None
    if task is not None and v2 is not None:
        failed2 = {_label(g) for g in task.preferences} - set(v2.matched)
    if failed2 is None:
        cascade = True
    else:
        spurious = v1 is not None and (v1.h1 or 0) > 0
        cascade = bool(missed1 & failed2) or (spurious and bool(failed2)) or not ev2
    order = (
        [("stage1", c) for c in STAGE1_ORDER if cascade]
        + [("stage2", c) for c in STAGE2_ORDER]
        + [("stage1", c) for c in STAGE1_ORDER if not cascade]
    )
    evs = {"stage1": ev1, "stage2": ev2}
    primary = next((c for s, c in order if c in evs[s]), OTHER)
    evidence: dict[str, list[str]] = {}
    for c in CATEGORY_LABELS:
        items = ev1.get(c, []) + ev2.get(c, [])
        if items:
            evidence[c] = items
    labels = list(evidence)
    return Classification(
        task_id=r.task_id,
        trial=r.trial,
        strategy=strategy_of(r),
        task_type=r.task_type,
        labels=labels,
        primary=primary,
        evidence=evidence,
        secondary=[c for c in labels if c != primary],
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
    with ``share`` = total / n_failures (None when there are no failures). The paper's six
    categories always have a row; extensions and ``other`` only when they occur.
    """
    items = list(items)
    n = len(items)
    counts: dict[str, Counter[str]] = {c: Counter() for c in (*CATEGORIES, *EXTENSIONS, OTHER)}
    for it in items:
        cats = [it.primary] if key == "primary" else (it.labels or [OTHER])
        for c in cats:
            counts.setdefault(c, Counter())[it.task_type] += 1
    rows = {}
    for c, cnt in counts.items():
        total = sum(cnt.values())
        if c not in CATEGORIES and total == 0:
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
