"""The LLM judge: the paper's LLM-as-judge protocol (§4 "Evaluation Metrics", App. C.1) over any
OpenAI-compatible endpoint (or any :class:`~shopping_companion.llm.base.ChatBackend`).

Prompts
    Four task-and-stage prompts of our own wording (single / add-on × stage 1 / stage 2), each built
    from (i) the user instruction, (ii) the agent's output for that stage, (iii) the benchmark's
    annotations — the wanted features (gold preferences, grouped by requested product for add-on
    deals) — and, in stage 2, the catalog records of the recommended products (title, brand, price,
    shop, category, attributes, options, features, description) with the facts the judge needs for
    product validity (count, whether each id exists and was returned by one of the agent's product
    tools), the voucher and the budget. A fifth prompt decides, for the tool-wise semantic fallback
    (§5.3), which products satisfy a requested product's wanted features
    (:meth:`LLMJudge.match_products`).

Output
    One JSON object, validated by a strict pydantic schema per prompt (no extra keys, integers must
    be JSON integers): stage 1 ``q1`` ∈ {0,1}, ``m1`` ∈ [0, F], ``h1`` ≥ 0 (spurious preferences:
    the rule judge's precision rule, ``docs/judge.md``), add-on ``c1`` ∈ [0, N]; stage 2
    ``p2``, ``q2`` ∈ {0,1}, ``m2`` ∈ [0, F], add-on ``n2`` ∈ [0, N], ``u2`` ∈ {0,1}; plus
    ``matched`` (the 1-based numbers of the wanted features counted, exactly m of them, distinct)
    and ``reasons``. Values are never clamped: a reply that is not JSON, breaks the schema or is out
    of range is answered with the validation error and asked again (up to ``max_retries`` times);
    if every attempt fails the verdict has ``failed=True`` and the errors as ``reasons`` — it is
    then never scored (rewards raise, :func:`~shopping_companion.rewards.total.safe_reward` returns
    None). ``success`` follows Eq. 5 from the fields exactly as the rule judge derives it.

No answer
    A stage that ended without a final answer (``max_turns``, only tool calls, invalid output, an
    empty answer block) is never sent to the model: it gets
    :func:`~shopping_companion.judges.base.no_answer_verdict` (every score 0, ``no_answer=True``,
    the reason ``no final answer: …``), exactly as the rule judge does, so R_z is 0.

Post-checks
    What the environment knows exactly overrides the model: stage 1, the spurious preferences the
    rule layer finds without semantics (:func:`~shopping_companion.judges.rule.structural_spurious`:
    a slot that does not exist, a sentence instead of a value, wanting and avoiding one value, more
    values on one attribute than the annotation has) raise ``h1`` to at least their count, and
    ``q1`` is 0 whenever ``h1`` > 0; stage 2, ``p2`` (count, catalog, returned by the agent's own
    tools) and ``u2`` (one shop, prices, voucher, budget) are recomputed. A reply's JSON is found
    in a fenced block or after a prose preamble (:func:`parse_json_reply`).

Transport
    Each attempt has a wall-clock ``timeout_s`` (enforced here, whatever the backend); a backend
    error or timeout is retried with exponential backoff (``backoff_s · 2^k``, capped at
    ``max_backoff_s``), except HTTP errors that cannot succeed on retry (400, 401, 403, 404, …).
    Use :class:`~shopping_companion.llm.openai_backend.OpenAIBackend` (its API key handling and
    scrubbing apply; :meth:`LLMJudge.from_openai` builds one). Sampling is greedy
    (temperature 0).

Cache
    Valid replies are cached under ``sha256(model, sampling, messages)`` in the package's one
    :class:`~shopping_companion.llm.replies.ReplyCache`: in memory (an LRU of the 50,000 most
    recent), and in an SQLite file when ``cache_path`` is given (shared by processes and runs; safe
    across threads). A cached reply is validated again before use. Failures are never cached.

Concurrency
    :meth:`LLMJudge.judge_many` judges many (task, trajectory) pairs on a thread pool of at most
    ``concurrency`` workers, keeping the input order.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from shopping_companion.errors import ConfigError
from shopping_companion.judges.base import JudgeFailedError, no_answer_verdict
from shopping_companion.llm.base import BackendError, ChatBackend, Sampling
from shopping_companion.llm.bounded import CallTimeout, call_within
from shopping_companion.llm.replies import ReplyCache, extract_json
from shopping_companion.registry import JUDGES
from shopping_companion.retry import Attempts, Backoff, default_deadline_s, is_retryable_status
from shopping_companion.types import Preference, Product, Task, Trajectory, Verdict

__all__ = [
    "LLMJudge",
    "ProductMatchReply",
    "Stage1AddonReply",
    "Stage1SingleReply",
    "Stage2AddonReply",
    "Stage2SingleReply",
    "bounded_call",
    "parse_json_reply",
]

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- reply schemas

Bit = Annotated[int, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=0)]


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    matched: list[int] = Field(description="1-based numbers of the wanted features counted as matched")
    reasons: list[str] = Field(description="short justifications, one per decision")

    _count_field: ClassVar[str] = "m1"

    @model_validator(mode="after")
    def _ranges(self, info: ValidationInfo) -> _Reply:
        ctx = info.context or {}
        F, N = ctx.get("F"), ctx.get("N")
        if F is None or N is None:
            return self
        m = getattr(self, self._count_field)
        if m > F:
            raise ValueError(f"{self._count_field}={m} exceeds the number of wanted features F={F}")
        for f in ("c1", "n2"):
            v = getattr(self, f, None)
            if v is not None and v > N:
                raise ValueError(f"{f}={v} exceeds the number of requested products N={N}")
        bad = [i for i in self.matched if not 1 <= i <= F]
        if bad:
            raise ValueError(f"matched has numbers outside 1..{F}: {bad}")
        if len(set(self.matched)) != len(self.matched):
            raise ValueError("matched lists a feature more than once")
        if len(self.matched) != m:
            raise ValueError(
                f"{self._count_field}={m} but matched lists {len(self.matched)} feature(s); they must agree"
            )
        return self


class Stage1SingleReply(_Reply):
    """Stage 1, single product: q1 query relevance, m1 wanted features surfaced, h1 spurious
    preferences reported."""

    q1: Bit
    m1: Count
    h1: Count


class Stage1AddonReply(Stage1SingleReply):
    """Stage 1, add-on deal: also c1, the requested products correctly identified."""

    c1: Count


class Stage2SingleReply(_Reply):
    """Stage 2, single product: p2 validity, q2 relevance, m2 wanted features satisfied."""

    _count_field: ClassVar[str] = "m2"
    p2: Bit
    q2: Bit
    m2: Count


class Stage2AddonReply(Stage2SingleReply):
    """Stage 2, add-on deal: also n2 requested products fully satisfied and u2 budget feasibility."""

    n2: Count
    u2: Bit


class ProductDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    product_id: str
    matches: bool
    reason: str


class ProductMatchReply(BaseModel):
    """The semantic-fallback reply: one decision per product, each product exactly once."""

    model_config = ConfigDict(extra="forbid", strict=True)
    decisions: list[ProductDecision]

    @model_validator(mode="after")
    def _all_once(self, info: ValidationInfo) -> ProductMatchReply:
        ids = (info.context or {}).get("ids")
        if ids is not None:
            got = [d.product_id for d in self.decisions]
            if sorted(got) != sorted(ids):
                raise ValueError(f"decisions must cover each product exactly once: expected {sorted(ids)}, got {got}")
        return self


_SCHEMAS: dict[tuple[int, bool], type[_Reply]] = {
    (1, False): Stage1SingleReply,
    (1, True): Stage1AddonReply,
    (2, False): Stage2SingleReply,
    (2, True): Stage2AddonReply,
}


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _schema_text(model: type[BaseModel], F: int | None = None, N: int | None = None) -> str:
    """The model's JSON schema, compact, with the task's bounds (F, N) written into it."""
    schema = _strip_titles(model.model_json_schema())
    schema["additionalProperties"] = False
    props = schema.get("properties", {})
    if F is not None:
        for f in ("m1", "m2"):
            if f in props:
                props[f]["maximum"] = F
        if "matched" in props:
            props["matched"]["items"].update({"minimum": 1, "maximum": F})
    if N is not None:
        for f in ("c1", "n2"):
            if f in props:
                props[f]["maximum"] = N
    return json.dumps(schema, ensure_ascii=False)


# --------------------------------------------------------------------------- reply parsing


def parse_json_reply(text: str) -> dict[str, Any]:
    """The JSON object a judge replied with: the last one when there are several (a preamble comes
    before the grading), by the rule of :func:`~shopping_companion.llm.replies.extract_json`.
    Raises ``ValueError`` describing the problem when the reply holds no JSON object.
    """
    return extract_json(text, which="last")


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e.get("loc", ())) or "(object)"
        parts.append(f"{loc}: {e.get('msg')}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- prompt text

_SYSTEM = (
    "You grade the work of an AI shopping assistant for an e-commerce benchmark. You receive the "
    "shopper's request, the annotated ground truth the assistant never saw, and what the assistant "
    "produced. Judge meaning rather than wording: a feature counts when it is stated with the same "
    'meaning in other words ("dark navy" covers "navy"; "100% cotton" covers "cotton"), and it does '
    "not count when it is missing, contradicted, vaguer than the annotation, or only assumed. Decide "
    "each point on the evidence shown to you, never on the assistant's claims alone. Your whole reply "
    "must be one JSON object that follows the given schema: no prose before or after it and no code "
    "fences."
)


def _clip(text: str | None, limit: int) -> str:
    if not text:
        return ""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" … [cut, {len(text) - limit} more characters]"


def _pref_text(p: Preference) -> str:
    verb = "wants" if p.polarity == "want" else "must avoid"
    return f"{verb} {p.attribute} = {p.value}"


def _features_block(task: Task) -> str:
    addon = task.task_type == "addon"
    if not task.preferences:
        return "(none: the shopper has no annotated preference for this request, F = 0)"
    lines = []
    for i, p in enumerate(task.preferences, 1):
        where = ""
        if addon and 0 <= p.slot < task.n_products:
            where = f" [for product {p.slot + 1}: {task.slots[p.slot].product_type}]"
        lines.append(f"{i}. {_pref_text(p)}{where}")
    return "\n".join(lines)


def _products_block(task: Task) -> str:
    lines = []
    for i, s in enumerate(task.slots, 1):
        cat = f" (category: {' > '.join(s.category_path)})" if s.category_path else ""
        lines.append(f"{i}. {s.product_type}{cat}")
    return "\n".join(lines)


def _deal_block(task: Task) -> str:
    cur = f" {task.currency}" if task.currency else ""
    lines = []
    if task.voucher is not None:
        v = task.voucher
        lines.append(
            f"Voucher: {v.discount:g}{cur} off when every product is bought from shop {v.shop_id!r} and their "
            f"total price is at least {v.min_spend:g}{cur}."
        )
    else:
        lines.append("Voucher: none.")
    lines.append(
        f"Budget: {task.budget:g}{cur} (the amount paid after any voucher discount)."
        if task.budget is not None
        else "Budget: none stated."
    )
    return "\n".join(lines)


def _record_block(p: Product, max_desc: int) -> str:
    price = "unknown" if p.price is None else f"{p.price:g}" + (f" {p.currency}" if p.currency else "")
    lines = [
        f"- product_id: {p.product_id}",
        f"  title: {p.title}",
        f"  brand: {p.brand or '(none)'}",
        f"  price: {price}",
        f"  shop_id: {p.shop_id}",
        f"  category: {' > '.join(p.category_path) or '(none)'}",
    ]
    if p.attributes:
        lines.append("  attributes: " + "; ".join(f"{k}: {v}" for k, v in p.attributes.items()))
    if p.options:
        lines.append("  options: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in p.options.items()))
    if p.features:
        lines.append("  features: " + _clip(" | ".join(p.features), max_desc))
    if p.description:
        lines.append("  description: " + _clip(p.description, max_desc))
    return "\n".join(lines)


def _stage1_output(traj: Trajectory, limit: int, addon: bool) -> str:
    if traj.final_answer is None:
        return f"(the assistant gave no final answer; the stage ended by {traj.termination})"
    out = _clip(traj.final_answer, limit)
    if traj.identified_preferences:
        parsed = "; ".join(
            (f"product {q.slot + 1}: " if addon else "") + _pref_text(q) for q in traj.identified_preferences
        )
        out += f"\n\n(The environment parsed these preferences from the answer: {parsed})"
    return out


def _reply_block(stage: int, addon: bool, fields: list[str], not_counted: str, F: int, N: int) -> str:
    """The ``## Reply`` section of a stage-``stage`` grading prompt: the score ``fields``, then the
    ``matched`` and ``reasons`` keys (a reason names every ``not_counted``) and the JSON schema."""
    fields = [
        *fields,
        f'- "matched": the numbers of the annotated features you counted in m{stage} (exactly m{stage} distinct '
        "numbers).",
        f'- "reasons": one short sentence per decision, naming every {not_counted}.',
    ]
    return (
        "## Reply\nReturn one JSON object with these keys:\n"
        + "\n".join(fields)
        + f"\nJSON schema: {_schema_text(_SCHEMAS[(stage, addon)], F, N)}"
    )


def _stage1_prompt(task: Task, traj: Trajectory, limit: int) -> str:
    addon = task.task_type == "addon"
    F, N = len(task.preferences), task.n_products
    kind = "an add-on deal (several products bought together)" if addon else "a single product"
    parts = [
        f"## What is being graded\nStage 1 of a shopping task for {kind}: before any product search, the assistant "
        "read the shopper's long chat history and had to report which personal preferences matter for the request. "
        "Grade how well its report grounds those preferences.",
        f"## Shopper's request\n{task.instruction}",
    ]
    if addon:
        parts.append(f"## Products the request covers (N = {N})\n{_products_block(task)}")
    parts.append(f"## Annotated wanted features (F = {F})\n{_features_block(task)}")
    parts.append(f"## The assistant's stage-1 answer\n{_stage1_output(traj, limit, addon)}")
    fields = [
        '- "q1": 1 if the answer addresses the shopper\'s request (it is about the product(s) asked for and reports '
        "at least one preference bearing on them) and reports nothing spurious (h1 = 0), otherwise 0.",
        f'- "m1": how many of the F = {F} annotated features the answer reports with the same meaning and the same '
        "direction (wanting versus avoiding). Each annotated feature counts at most once; one that is contradicted "
        f"or stated for the wrong product does not count. An integer from 0 to {F}.",
    ]
    fields.append(
        '- "h1": how many reported preferences are spurious: not stated by the shopper (guessed or invented), a '
        "second or conflicting value for a feature the shopper has one preference about, a value stated for the "
        "wrong product, a preference that contradicts another reported one, a feature the shopper said does not "
        "matter, or text that is not a feature value at all (e.g. a quoted sentence). Reporting several candidate "
        "values for one feature makes all but the right one spurious. Extra preferences the shopper really stated "
        "about something outside the annotated features are not spurious. An integer of 0 or more."
    )
    if addon:
        fields.append(
            f'- "c1": how many of the N = {N} requested products have at least one annotated feature counted in m1. '
            f"An integer from 0 to {N}."
        )
    parts.append(_reply_block(1, addon, fields, "annotated feature you did not count and why", F, N))
    return "\n\n".join(parts)


def _stage2_prompt(
    task: Task,
    traj: Trajectory,
    ids: list[str],
    found: Mapping[str, Product],
    returned: set[str],
    limit: int,
    max_desc: int,
) -> str:
    addon = task.task_type == "addon"
    F, N = len(task.preferences), task.n_products
    kind = "an add-on deal (several products bought together)" if addon else "a single product"
    cur = f" {task.currency}" if task.currency else ""
    facts = [f"Distinct product ids recommended: {len(ids)} (the request needs {N})."]
    for pid in ids:
        facts.append(
            f"- {pid}: {'found' if pid in found else 'NOT found'} in the catalog; "
            f"{'returned' if pid in returned else 'never returned'} by the assistant's own product_search/product_view calls"
        )
    priced = [found[p].price for p in ids if p in found]
    if addon and ids and all(x is not None for x in priced) and len(priced) == len(ids):
        facts.append(f"Sum of the listed prices: {sum(priced):g}{cur}.")  # type: ignore[arg-type]
    records = "\n".join(_record_block(found[p], max_desc) for p in ids if p in found) or "(no catalog record)"
    parts = [
        f"## What is being graded\nStage 2 of a shopping task for {kind}: the assistant searched the catalog and "
        "recommended product(s) with @REC::product_id@ markers. Grade the recommendation against the request and the "
        "annotated features, using the catalog records below as the only evidence about each product.",
        f"## Shopper's request\n{task.instruction}",
        f"## Products requested (N = {N})\n{_products_block(task)}",
        f"## Annotated wanted features (F = {F})\n{_features_block(task)}",
    ]
    if addon:
        parts.append(f"## Deal terms\n{_deal_block(task)}")
    parts += [
        "## Facts about the recommended ids\n" + "\n".join(facts),
        f"## Catalog records of the recommended products\n{records}",
        f"## The assistant's final answer\n{_clip(traj.final_answer, limit) or '(no final answer)'}",
    ]
    fields = [
        f'- "p2": 1 only if exactly {N} distinct product id(s) were recommended, every one exists in the catalog and '
        "every one was returned by the assistant's own product tools (not invented); otherwise 0.",
        '- "q2": 1 if every recommended product is the kind of product requested'
        + (" (each requested product covered by a matching recommended product)" if addon else "")
        + ", otherwise 0.",
        f'- "m2": how many of the F = {F} annotated features are satisfied by the catalog record of the product they '
        "apply to (a feature to avoid is satisfied when the product does not have it). Use attributes and options "
        f"first, then title, features and description. An integer from 0 to {F}.",
    ]
    if addon:
        fields += [
            f'- "n2": how many of the N = {N} requested products are covered by a recommended product of the right '
            f"kind that satisfies all of that product's annotated features. An integer from 0 to {N}.",
            '- "u2": 1 if all requested products are recommended, all come from one shop, every price is known, and '
            "the sum of prices minus the voucher discount (only when the voucher's conditions hold) is within the "
            "budget; otherwise 0.",
        ]
    parts.append(_reply_block(2, addon, fields, "feature not satisfied and every failed check", F, N))
    return "\n\n".join(parts)


def _match_prompt(task: Task, products: Sequence[Product], max_desc: int) -> str:
    records = "\n".join(_record_block(p, max_desc) for p in products)
    return "\n\n".join(
        [
            "## What is being graded\nA shopping assistant's tool call returned the products below. For each product, "
            "decide whether it is a valid choice for one of the requested products: it is that kind of product and its "
            "catalog record satisfies every annotated feature of that requested product (a feature to avoid is "
            "satisfied when the product lacks it).",
            f"## Shopper's request\n{task.instruction}",
            f"## Products requested (N = {task.n_products})\n{_products_block(task)}",
            f"## Annotated wanted features\n{_features_block(task)}",
            f"## Products to decide on ({len(products)})\n{records}",
            '## Reply\nReturn one JSON object: {"decisions": [{"product_id": str, "matches": bool, "reason": str}, '
            "...]} with exactly one decision per product listed above.\nJSON schema: "
            + _schema_text(ProductMatchReply),
        ]
    )


# --------------------------------------------------------------------------- the judge


class _AttemptTimeout(Exception):
    pass


def bounded_call(fn: Callable[[], Any], seconds: float | None, what: str = "reply") -> Any:
    """``fn()`` waited on for at most ``seconds`` of wall clock (``None``: no limit); raises
    :class:`_AttemptTimeout` when it is up, else re-raises what ``fn`` raised (a
    :class:`CircuitOpenError` too)."""
    try:
        return call_within(fn, seconds, name="llm-bounded-call")
    except CallTimeout:
        raise _AttemptTimeout(f"no {what} within {round(seconds or 0, 2):g}s") from None


def ask_strict_json(
    call: Callable[[list[dict[str, str]]], str],
    messages: list[dict[str, str]],
    validate: Callable[[dict[str, Any]], Any],
    cache: ReplyCache,
    key: str,
    *,
    max_retries: int,
    backoff_s: float,
    max_backoff_s: float,
    bump: Callable[[str], None] = lambda k: None,
    name: str = "llm",
    deadline_s: float | None = None,
) -> tuple[Any, list[str]]:
    """Ask for one strict JSON object until ``validate`` accepts it; shared by the LLM judge and the
    personalization benchmark's LLM roles.

    A reply cached under ``key`` is validated first (an invalid cached reply is ignored). Otherwise
    up to ``1 + max_retries`` attempts: ``call(conversation) -> text``; a :class:`BackendError` or an
    attempt timeout is retried after ``min(backoff_s * 2**k, max_backoff_s)`` seconds unless its HTTP
    status cannot succeed on retry (4xx other than 408/409/429); a reply that is not one JSON object
    (:func:`parse_json_reply`) or that ``validate`` rejects is answered with the error and asked again.
    ``bump`` counts ``"cache_hits"`` and ``"retries"``. With ``deadline_s`` (seconds of wall clock
    from this call) no attempt starts and no backoff sleeps past it (``call`` should bound its own
    attempt by the time left). Returns ``(validated object, errors)`` with the valid reply cached,
    or ``(None, errors)`` (one line per failed attempt, plus one when the deadline ended it).
    A :class:`~shopping_companion.llm.base.CircuitOpenError` from ``call`` propagates (the run stops).
    """
    cached = cache.get(key)
    if cached is not None:
        try:
            out = validate(parse_json_reply(cached))
            bump("cache_hits")
            return out, []
        except (ValueError, ValidationError):
            log.warning("%s: ignoring an invalid cached reply %s", name, key[:12])
    errors: list[str] = []
    convo = list(messages)
    attempts = Attempts(max_retries, Backoff(backoff_s, max_backoff_s), deadline_s)
    for attempt in attempts:
        if attempt:
            bump("retries")
        try:
            text = call(convo)
        except (BackendError, _AttemptTimeout) as e:
            status = getattr(e, "status_code", None)
            errors.append(
                f"attempt {attempt + 1}: {'timeout' if isinstance(e, _AttemptTimeout) else 'backend error'}: {e}"
            )
            if status is not None and not is_retryable_status(status):
                break  # cannot succeed on retry (bad request, bad key, unknown model)
            if not attempts.backoff():
                if attempts.stop == "backoff":
                    errors.append(f"no retry: a {attempts.delay:g}s backoff would pass the deadline of {deadline_s:g}s")
                break
            continue
        try:
            out = validate(parse_json_reply(text))
        except (ValueError, ValidationError) as e:
            msg = _validation_message(e) if isinstance(e, ValidationError) else str(e)
            errors.append(f"attempt {attempt + 1}: invalid reply: {msg}")
            convo = list(messages) + [
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": f"Your reply was rejected: {msg}. Reply again with only the corrected JSON object.",
                },
            ]
            continue
        cache.put(key, json.dumps(out.model_dump(), ensure_ascii=False))
        return out, errors
    if attempts.stop == "deadline":
        errors.append(f"attempt {attempts.made + 1}: not made, the deadline of {deadline_s:g}s is reached")
    return None, errors


@JUDGES.register("llm")
class LLMJudge:
    """LLM-as-judge over a :class:`ChatBackend` (module docstring).

    Args:
        backend: the judge model's backend (e.g. an ``OpenAIBackend``).
        lookup: ``ids -> {id: Product}`` catalog records; required to judge stage 2 and for
            :meth:`match_products` callers that pass ids.
        cache_path: SQLite file for the reply cache (``None``: in-memory only).
        max_retries: re-asks after the first attempt, for invalid replies, timeouts and retryable
            backend errors (so ``max_retries + 1`` attempts at most).
        timeout_s: wall-clock limit of one attempt, in seconds (> 0; ``None``: the backend's own).
        deadline_s: wall-clock limit of one verdict (or matcher call) over all its attempts, re-asks
            and backoffs, in seconds (> 0; ``None``: ``min(600, (max_retries + 1) * timeout_s)``,
            at least ``timeout_s``; 600 when ``timeout_s`` is None). A missed deadline is a judge
            failure (recorded, never a 0 reward).
        concurrency: worker threads of :meth:`judge_many` (≥ 1).
        backoff_s, max_backoff_s: retry delay after a backend error or timeout:
            ``min(backoff_s · 2^k, max_backoff_s)``; invalid replies are re-asked at once.
        sampling: defaults to greedy decoding (temperature 0, top-p 1, no top-k), 2,048 tokens.
        name: the verdicts' ``judge`` field; default ``llm:<model>``.
        max_answer_chars, max_description_chars: how much of the agent's answer and of each
            product's description / features the prompt includes.
    """

    def __init__(
        self,
        backend: ChatBackend,
        lookup: Callable[[list[str]], Mapping[str, Product]] | None = None,
        *,
        cache_path: str | Path | None = None,
        max_retries: int = 2,
        timeout_s: float | None = 180.0,
        deadline_s: float | None = None,
        concurrency: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        sampling: Sampling | None = None,
        name: str | None = None,
        max_answer_chars: int = 6000,
        max_description_chars: int = 1200,
    ) -> None:
        if max_retries < 0:
            raise ConfigError(f"max_retries: must be >= 0, got {max_retries}")
        if concurrency < 1:
            raise ConfigError(f"concurrency: must be >= 1, got {concurrency}")
        from shopping_companion.llm.breaker import positive_seconds

        timeout_s = positive_seconds("timeout_s", timeout_s, allow_none=True)
        deadline_s = positive_seconds("deadline_s", deadline_s, allow_none=True)
        self.backend = backend
        self.lookup = lookup
        self.max_retries = int(max_retries)
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s if deadline_s is not None else default_deadline_s(timeout_s, self.max_retries)
        self.concurrency = int(concurrency)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.sampling = sampling or Sampling(temperature=0.0, top_p=1.0, top_k=None, max_tokens=2048)
        self.model_id = str(getattr(backend, "model", None) or getattr(backend, "name", "unknown"))
        self.name = name or f"llm:{self.model_id}"
        self.max_answer_chars = max_answer_chars
        self.max_description_chars = max_description_chars
        self._cache = ReplyCache(cache_path)
        self._stats_lock = threading.Lock()
        self._stats = {"requests": 0, "cache_hits": 0, "retries": 0, "failures": 0, "judged": 0, "no_answer": 0}

    @classmethod
    def from_openai(
        cls,
        model: str,
        base_url: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        lookup: Callable[[list[str]], Mapping[str, Product]] | None = None,
        http_timeout_s: float = 120.0,
        http_retries: int = 3,
        http_deadline_s: float | None = None,
        breaker_threshold: int | None = None,
        **kwargs: Any,
    ) -> LLMJudge:
        """A judge over an :class:`~shopping_companion.llm.openai_backend.OpenAIBackend` (key read from
        ``api_key_env``; HTTP-level per-attempt timeout, retries, total deadline per request and
        circuit-breaker threshold as given, seconds; ``None``: the backend's defaults); ``kwargs`` go
        to the judge. Raises :class:`ConfigError` for a bad setting."""
        from shopping_companion.llm.openai_backend import OpenAIBackend

        http: dict[str, Any] = {"timeout_s": http_timeout_s, "max_retries": http_retries, "deadline_s": http_deadline_s}
        if breaker_threshold is not None:
            http["breaker_threshold"] = breaker_threshold
        backend = OpenAIBackend.for_role("judge", model, base_url=base_url, api_key_env=api_key_env, **http)
        return cls(backend, lookup, **kwargs)

    # ------------------------------------------------------------------ public API
    @property
    def stats(self) -> dict[str, int]:
        """Counters: ``requests`` sent, ``cache_hits``, ``retries``, ``failures`` (failed verdicts or
        matcher calls), ``judged`` (verdicts returned), ``no_answer`` (verdicts of stages without a
        final answer, given without a request)."""
        with self._stats_lock:
            return dict(self._stats)

    def close(self) -> None:
        """Close the persistent cache (the backend is the caller's)."""
        self._cache.close()

    def build_messages(self, task: Task, trajectory: Trajectory) -> list[dict[str, str]]:
        """The chat sent for this stage trajectory (system + user). Raises :class:`ConfigError` for a
        stage-2 trajectory without a ``lookup``; a failing lookup raises its own exception."""
        facts = self._stage2_facts(task, trajectory) if trajectory.stage == 2 else None
        return self._messages(task, trajectory, facts)

    def _messages(
        self, task: Task, trajectory: Trajectory, facts: tuple[list[str], dict[str, Product], set[str]] | None
    ) -> list[dict[str, str]]:
        if facts is None:
            user = _stage1_prompt(task, trajectory, self.max_answer_chars)
        else:
            ids, found, returned = facts
            user = _stage2_prompt(
                task, trajectory, ids, found, returned, self.max_answer_chars, self.max_description_chars
            )
        return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]

    def judge(self, task: Task, trajectory: Trajectory, stage: int | None = None) -> Verdict:
        """A :class:`Verdict` for the trajectory's stage (``failed=True`` with reasons when the model
        gives no valid reply or the catalog lookup fails). A stage without a final answer gets
        :func:`~shopping_companion.judges.base.no_answer_verdict` (all scores 0) and sends no
        request. ``stage``, if given, must agree (``ValueError``)."""
        if stage is not None and stage != trajectory.stage:
            raise ValueError(f"asked to judge stage {stage} but the trajectory is stage {trajectory.stage}")
        unanswered = no_answer_verdict(self.name, task, trajectory)
        if unanswered is not None:
            self._bump("judged")
            self._bump("no_answer")
            return unanswered
        addon = task.task_type == "addon"
        base = {
            "judge": self.name,
            "stage": trajectory.stage,
            "F": len(task.preferences),
            "N": task.n_products,
            "b": 1 if addon else 0,
        }
        try:
            facts = self._stage2_facts(task, trajectory) if trajectory.stage == 2 else None
            messages = self._messages(task, trajectory, facts)
        except ConfigError:
            raise
        except Exception as e:  # catalog failure: a judge failure, never a 0 reward
            self._bump("failures")
            return Verdict(**base, failed=True, reasons=[f"catalog lookup failed: {type(e).__name__}: {e}"])
        schema = _SCHEMAS[(trajectory.stage, addon)]
        ctx = {"F": base["F"], "N": base["N"]}
        reply, errors = self._ask(messages, lambda obj: schema.model_validate(obj, context=ctx))
        self._bump("judged")
        if reply is None:
            self._bump("failures")
            return Verdict(**base, failed=True, reasons=[f"LLM judge {self.name} gave no valid reply"] + errors)
        return self._verdict(task, trajectory, addon, base, reply, facts)

    __call__ = judge

    def judge_many(self, items: Iterable[tuple[Task, Trajectory]]) -> list[Verdict]:
        """Judge every ``(task, trajectory)`` with at most ``concurrency`` requests in flight; the
        result is in input order, with failed verdicts where the judge failed."""
        items = list(items)
        if not items:
            return []
        workers = min(self.concurrency, len(items))
        if workers == 1:
            return [self.judge(t, tr) for t, tr in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-judge") as pool:
            return list(pool.map(lambda it: self.judge(it[0], it[1]), items))

    def match_products(self, task: Task, products: Sequence[Product]) -> list[bool]:
        """For the tool-wise semantic fallback: is each product a valid choice for a requested
        product (right kind, all its annotated features satisfied)? One request for all products.
        Raises :class:`JudgeFailedError` when no valid reply comes."""
        products = list(products)
        if not products:
            return []
        user = _match_prompt(task, products, self.max_description_chars)
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]
        ids = [p.product_id for p in products]
        reply, errors = self._ask(messages, lambda obj: ProductMatchReply.model_validate(obj, context={"ids": ids}))
        if reply is None:
            self._bump("failures")
            raise JudgeFailedError(f"LLM judge {self.name}: product matching failed: " + " | ".join(errors))
        by_id = {d.product_id: d.matches for d in reply.decisions}
        return [by_id[i] for i in ids]

    # ------------------------------------------------------------------ internals
    def _bump(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self._stats[key] += n

    def _stage2_facts(self, task: Task, traj: Trajectory) -> tuple[list[str], dict[str, Product], set[str]]:
        if self.lookup is None:
            raise ConfigError("LLMJudge: judging stage 2 needs a product lookup (ids -> {id: Product})")
        from shopping_companion.judges.rule import recommended_ids, shown_product_ids

        ids = recommended_ids(traj)
        found = dict(self.lookup(list(ids))) if ids else {}
        return ids, found, shown_product_ids(traj)

    def _key(self, messages: list[dict[str, str]]) -> str:
        return ReplyCache.key({"model": self.model_id, "sampling": self.sampling.model_dump(), "messages": messages})

    def _call(self, messages: list[dict[str, str]], deadline: float | None = None) -> str:
        """One attempt, within ``timeout_s`` and the time left before ``deadline`` (monotonic)."""
        self._bump("requests")
        budget = self.timeout_s
        if deadline is not None:
            left = deadline - time.monotonic()
            budget = left if budget is None else min(budget, left)
        return bounded_call(lambda: self.backend.chat(messages, None, self.sampling), budget).content

    def _ask(self, messages: list[dict[str, str]], validate: Callable[[dict[str, Any]], Any]) -> tuple[Any, list[str]]:
        """``(validated reply, [])`` or ``(None, errors)`` after the retries or at the deadline;
        caches valid replies."""
        deadline = time.monotonic() + self.deadline_s
        return ask_strict_json(
            lambda convo: self._call(convo, deadline),
            messages,
            validate,
            self._cache,
            self._key(messages),
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s,
            bump=self._bump,
            name=self.name,
            deadline_s=self.deadline_s,
        )

    def _verdict(
        self,
        task: Task,
        trajectory: Trajectory,
        addon: bool,
        base: dict[str, Any],
        r: Any,
        facts: tuple[list[str], dict[str, Product], set[str]] | None = None,
    ) -> Verdict:
        """The verdict from a valid reply, after the post-checks (module docstring): facts the
        environment knows exactly override the model."""
        F, N = base["F"], base["N"]
        matched = [f"{task.preferences[i - 1].attribute}={task.preferences[i - 1].value}" for i in sorted(r.matched)]
        reasons = list(r.reasons)
        if trajectory.stage == 1:
            from shopping_companion.judges.rule import identified_preferences, structural_spurious

            found = structural_spurious(task, identified_preferences(trajectory)[0])
            h1 = max(int(r.h1), len(found))
            if len(found) > int(r.h1):
                reasons += [f"post-check: spurious {q.attribute}={q.value} {why}" for q, why in found]
            q1 = r.q1 if h1 == 0 else 0
            return Verdict(
                **base,
                q1=q1,
                m1=r.m1,
                c1=r.c1 if addon else None,
                h1=h1,
                success=r.m1 == F and h1 == 0,
                matched=matched,
                reasons=reasons,
            )
        p2, u2 = r.p2, (r.u2 if addon else None)
        checks = _stage2_checks(task, *facts) if facts is not None else None
        if checks is not None:
            if checks["p2"] != p2:
                reasons.append(f"post-check: p2 = {checks['p2']} ({checks['p2_reason']})")
            p2 = checks["p2"]
            if addon and checks["u2"] != u2:
                reasons.append(f"post-check: u2 = {checks['u2']} ({checks['u2_reason']})")
                u2 = checks["u2"]
        success = bool(p2 and r.q2 and r.m2 == F)
        if addon:
            success = success and r.n2 == N and u2 == 1
        return Verdict(
            **base,
            p2=p2,
            q2=r.q2,
            m2=r.m2,
            n2=r.n2 if addon else None,
            u2=u2,
            success=success,
            matched=matched,
            reasons=reasons,
        )


def _stage2_checks(task: Task, ids: list[str], found: Mapping[str, Product], returned: set[str]) -> dict[str, Any]:
    """p2 and u2 computed exactly from the recommended ids, the catalog records the prompt was
    built from, the ids the agent's product tools returned and the deal terms."""
    from shopping_companion.judges.rule import bundle_cost

    N = task.n_products
    bad = [i for i in ids if i not in found or i not in returned]
    p2 = int(len(ids) == N and not bad)
    p2_reason = f"{len(ids)} of {N} id(s)" + (f", not found or never returned: {bad}" if bad else "")
    prods = [found[i] for i in ids[:N] if i in found]
    u2, u2_reason = 0, "the bundle is incomplete"
    if len(prods) == N:
        total, discount, same_shop = bundle_cost(prods, task)
        if not same_shop:
            u2_reason = "products from different shops"
        elif total is None:
            u2_reason = "a price is unknown"
        elif task.budget is not None and total - discount > task.budget + 1e-6:
            u2_reason = f"{total:g} - {discount:g} exceeds the budget {task.budget:g}"
        else:
            u2, u2_reason = 1, f"{total:g} - {discount:g} within the budget"
    return {"p2": p2, "p2_reason": p2_reason, "u2": u2, "u2_reason": u2_reason}
