"""Tool-wise process reward R_tool (Shopping Companion §5.3, Eqs. 8–10).

Every tool call u gets r(u) ∈ [0, 1] from the ids its result returned
(:attr:`~shopping_companion.types.ToolResult.returned_ids`):

- memory tools (``mem_search``, ``mem_view``): the fraction of retrieved items whose session is a
  gold preference (needle) session (Eq. 8, ``|{i ∈ I_u : sess(i) ∈ S_gold}| / |I_u|``);
- product tools (``product_search``, ``product_view``): the fraction of returned products that are
  reference products of the task (Eq. 9).

Conventions (not fixed by the paper, stated here):

- a call whose result has ``error`` set, or that returned no ids, scores 0 (|I_u| = 0 would divide
  by zero, and a rejected call retrieved nothing);
- Eq. 8 is per retrieved ITEM, as in the paper: a ``mem_search`` item is a retrieved turn (the
  tool returns each ``(session, turn)`` at most once and lists its session id once per retrieved
  turn in ``returned_ids``), ``sess(i)`` is that session, so 10 turns of a gold session + 5 turns of
  5 other sessions score 10/15; a ``mem_view`` item is a session viewed (distinct sessions);
- otherwise duplicated ids within one result count once (``mem_view``, product tools: |I_u| and
  |P_u| are set sizes), so repeating an id cannot inflate or deflate the score;
- a call to any other tool name scores 0 and still counts in the mean of Eq. 10;
- exact id matching is the default (:func:`tool_wise_reward`); the paper's semantic fallback
  "when exact ID matching is unavailable" is :func:`semantic_tool_wise_reward` (below), opt-in
  through the rubric (``tool_wise`` params ``semantic_fallback: auto|always``).

Semantic fallback (§5.3, sentence after Eq. 9)
    Exact matching is *unavailable* for product calls when the task has no reference product id,
    or when a reference id is unknown to the catalog the ``lookup`` serves (e.g. another catalog
    version); for memory calls when the task has no needle session id, or (with a
    ``session_lookup``) a needle id is unknown. Then an item of a call counts as relevant when its
    id is an available gold id **or** its record semantically matches the gold annotations:

    - a product matches when it is a *valid alternative* for some slot of the task: relevant to the
      slot (:func:`~shopping_companion.judges.rule.is_relevant`) and satisfying every gold
      preference of that slot (:func:`~shopping_companion.judges.rule.product_satisfies`), the
      rule judge's own value matching — or whatever a configured matcher decides (an
      :class:`~shopping_companion.judges.llm.LLMJudge`'s :meth:`match_products`);
    - a session matches when one of its user turns states the value of a gold ``want``
      preference (the value matcher's ``mentions``: synonyms, narrower concepts, quantities).

    r(u) is then the fraction of the call's returned items that count (Eqs. 8–9 with the
    relevance test widened; items as in the exact rule: retrieved turns for ``mem_search``,
    distinct ids otherwise). ``auto`` applies this only where exact matching is unavailable;
    ``always`` applies it to every product call (and memory calls when a ``session_lookup`` is
    given), so valid alternatives to the reference product earn process reward too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS
from shopping_companion.errors import ConfigError
from shopping_companion.types import Product, Session, Task, ToolResult, Trajectory

__all__ = [
    "MEMORY_TOOLS",
    "PRODUCT_TOOLS",
    "memory_call_reward",
    "product_call_reward",
    "reference_ids_available",
    "rule_product_matcher",
    "semantic_tool_wise_reward",
    "session_matches",
    "tool_call_reward",
    "tool_call_scores",
    "tool_wise_reward",
    "trajectory_tool_results",
]


def _precision(
    result: ToolResult, gold: Iterable[str], *, per_item: bool = False, matched: Mapping[str, bool] | None = None
) -> float:
    """Share of ``result.returned_ids`` that are in ``gold`` (or judged matching in ``matched``,
    the semantic fallback): over distinct ids, or over every listed id when ``per_item`` (each
    entry is one retrieved item, e.g. a ``mem_search`` turn). 0 for an errored or empty result."""
    if result.error is not None:
        return 0.0
    returned = list(result.returned_ids) if per_item else list(dict.fromkeys(result.returned_ids))
    if not returned:
        return 0.0
    gold_set = set(gold)
    extra = matched or {}
    return sum(1 for i in returned if i in gold_set or extra.get(i, False)) / len(returned)


def _mean(xs: Sequence[float]) -> float:
    """Eq. 10's mean over U(τ); 0 when there is no call."""
    return sum(xs) / len(xs) if xs else 0.0


def memory_call_reward(result: ToolResult, gold_session_ids: Iterable[str]) -> float:
    """r(u) for a memory call (Eq. 8): ``|{i ∈ I_u : sess(i) ∈ S_gold}| / |I_u|``.

    ``I_u`` is the call's retrieved items: for ``mem_search`` the retrieved turns, one entry of
    ``result.returned_ids`` each (their session ids, so ``sess(i)`` is the entry; no dedupe); for
    ``mem_view`` (and any other name) the distinct session ids viewed. 0 when the call errored or
    returned nothing.
    """
    return _precision(result, gold_session_ids, per_item=result.name == "mem_search")


def product_call_reward(result: ToolResult, reference_ids: Iterable[str]) -> float:
    """r(u) for a product call (Eq. 9): ``|{p ∈ P_u : p ∈ P_ref}| / |P_u|``.

    ``P_u`` is the set of distinct product ids in ``result.returned_ids`` (a product is one item
    however often it is listed); 0 when the call errored or returned nothing.
    """
    return _precision(result, reference_ids)


def tool_call_reward(result: ToolResult, task: Task) -> float:
    """r(u) (Eq. 8 or 9, by ``result.name``); 0 for any tool that is neither memory nor product."""
    if result.name in MEMORY_TOOLS:
        return memory_call_reward(result, task.needle_session_ids)
    if result.name in PRODUCT_TOOLS:
        return product_call_reward(result, task.reference_product_ids)
    return 0.0


def trajectory_tool_results(trajectory: Trajectory) -> list[ToolResult]:
    """U(τ): one result per tool call of the trajectory, in order.

    Per step, each parsed ``ToolCall`` is paired with the ``ToolResult`` of the same ``call_id``;
    a call with no result (the episode ended first) is represented by an error result (scores 0);
    a result with no parsed call (e.g. the environment's observation for a rejected call) counts
    as a call of its own.
    """
    out: list[ToolResult] = []
    for step in trajectory.steps:
        by_id: dict[str, list[ToolResult]] = {}
        for r in step.tool_results:
            by_id.setdefault(r.call_id, []).append(r)
        for call in step.tool_calls:
            rs = by_id.get(call.call_id)
            if rs:
                out.append(rs.pop(0))
            else:
                out.append(ToolResult(call_id=call.call_id, name=call.name, content="", error="no result recorded"))
        for rs in by_id.values():
            out.extend(rs)
    return out


def tool_wise_reward(trajectory: Trajectory, task: Task) -> tuple[float, list[float]]:
    """R_tool (Eq. 10): the mean of r(u) over all tool calls U(τ); 0 when there are none.

    Returns ``(R_tool, per_call)`` with ``per_call`` in the order of
    :func:`trajectory_tool_results` (exact id matching: :func:`semantic_tool_wise_reward` with
    ``mode="off"``).
    """
    total, per_call, _ = semantic_tool_wise_reward(trajectory, task, mode="off")
    return total, per_call


# --------------------------------------------------------------------------- semantic fallback

#: ``lookup(ids) -> {id: Product}`` for the ids the catalog knows (unknown ids absent).
ProductLookup = Callable[[list[str]], Mapping[str, Product]]
#: ``lookup(ids) -> {id: Session}`` for the sessions it knows.
SessionLookup = Callable[[list[str]], Mapping[str, Session]]
#: ``matcher(task, products) -> [bool, ...]``: one decision per product, in order.
ProductMatcher = Callable[[Task, Sequence[Product]], Sequence[bool]]
FallbackMode = Literal["off", "auto", "always"]


def rule_product_matcher(task: Task, products: Sequence[Product]) -> list[bool]:
    """For each product: is it a valid alternative for some slot of ``task``?

    True iff for at least one slot the product is relevant to it and satisfies every gold
    preference of that slot (a single-product task has one slot holding all preferences), by the
    rule judge's normalised matching.
    """
    from shopping_companion.judges.rule import is_relevant, product_satisfies

    n = task.n_products
    slot_prefs: list[list] = [[] for _ in range(n)]
    for g in task.preferences:
        s = 0 if n == 1 else g.slot
        if 0 <= s < n:
            slot_prefs[s].append(g)
    out = []
    for p in products:
        out.append(
            any(
                is_relevant(p, slot) and all(product_satisfies(p, g) for g in slot_prefs[s])
                for s, slot in enumerate(task.slots)
            )
        )
    return out


def session_matches(task: Task, session: Session) -> bool:
    """A session expresses a gold preference: a user turn states the value of a gold ``want``
    preference — the value, a synonym or a narrower concept of it, or an equal quantity, by the
    value matcher (:meth:`~shopping_companion.judges.matching.ValueMatcher.mentions`); ``avoid``
    values are not searched: mentioning a disliked value is as likely in unrelated chat."""
    from shopping_companion.judges.matching import default_matcher

    m = default_matcher()
    wants = [(m.key(g.attribute), g.value) for g in task.preferences if g.polarity == "want"]
    return any(m.mentions(k, v, t.content) for t in session.turns if t.role == "user" for k, v in wants)


def reference_ids_available(task: Task, lookup: ProductLookup | None) -> bool:
    """Exact product-id matching is possible: every product slot names a reference id (an open
    task, imported with ``--allow-open``, has a slot without one) and (when a lookup is given) the
    catalog knows all of them."""
    if any(not s.reference_product_id for s in task.slots):
        return False
    return _gold_available(task.reference_product_ids, lookup)


def _needles_available(task: Task, session_lookup: SessionLookup | None) -> bool:
    """Exact session-id matching is possible: the task names needle sessions and (with a
    ``session_lookup``) all of them are known."""
    return _gold_available(task.needle_session_ids, session_lookup)


def _gold_available(gold: Iterable[str], lookup: Callable[[list[str]], Mapping[str, object]] | None) -> bool:
    ids = [i for i in gold if i]
    if not ids:
        return False
    if lookup is None:
        return True
    found = lookup(ids)
    return all(i in found for i in ids)


def _returned_ids(results: Sequence[ToolResult], tools: tuple[str, ...], exclude: set[str]) -> list[str]:
    """Sorted ids returned by the successful calls of ``tools`` in ``results``, less ``exclude``."""
    return sorted(
        {i for r in results if r.name in tools and r.error is None for i in r.returned_ids if i not in exclude}
    )


def semantic_tool_wise_reward(
    trajectory: Trajectory,
    task: Task,
    *,
    lookup: ProductLookup | None = None,
    mode: FallbackMode = "auto",
    matcher: ProductMatcher | None = None,
    session_lookup: SessionLookup | None = None,
) -> tuple[float, list[float], dict[str, float]]:
    """R_tool (Eq. 10) with the semantic fallback of §5.3 (module docstring).

    Args:
        lookup: product records by id; required when product calls need semantic matching.
        mode: ``"off"`` (exact ids only: same as :func:`tool_wise_reward`), ``"auto"`` (semantic
            matching only where exact matching is unavailable) or ``"always"``.
        matcher: decides which products match; default :func:`rule_product_matcher`. It is called
            once per trajectory with every product needing a decision (deduplicated); an exception
            it raises (e.g. an LLM judge failure) propagates: the trajectory is then not scored.
        session_lookup: session records by id, for the memory fallback.

    Returns ``(R_tool, per_call, info)`` where ``per_call`` is r(u) ∈ [0, 1] in the order of
    :func:`trajectory_tool_results` and ``info`` has ``tool_semantic_calls`` (calls scored with
    semantic matching) and ``tool_semantic_matched`` (distinct items judged matching).
    Raises :class:`ConfigError` when semantic matching is needed but no ``lookup`` (products) is
    given, or ``mode`` is unknown.
    """
    per_call, info = tool_call_scores(
        trajectory_tool_results(trajectory),
        task,
        lookup=lookup,
        mode=mode,
        matcher=matcher,
        session_lookup=session_lookup,
    )
    return _mean(per_call), per_call, info


def tool_call_scores(
    results: Sequence[ToolResult],
    task: Task,
    *,
    lookup: ProductLookup | None = None,
    mode: FallbackMode = "off",
    matcher: ProductMatcher | None = None,
    session_lookup: SessionLookup | None = None,
) -> tuple[list[float], dict[str, float]]:
    """r(u) ∈ [0, 1] for each result of U(τ) (:func:`trajectory_tool_results`), in order: Eqs. 8–9
    by exact ids (:func:`tool_call_reward`) with ``mode="off"``, with the semantic fallback of
    §5.3 otherwise (arguments as :func:`semantic_tool_wise_reward`, the one place R_tool's per-call
    scores are computed). Returns ``(per_call, info)``, ``info`` holding ``tool_semantic_calls``
    and ``tool_semantic_matched``. Raises :class:`ConfigError` for an unknown ``mode`` or a
    missing product ``lookup`` when semantic matching is needed."""
    if mode not in ("off", "auto", "always"):
        raise ConfigError(f"semantic_fallback: must be 'off', 'auto' or 'always', got {mode!r}")
    if mode == "off" and any(not s.reference_product_id for s in task.slots):
        mode = "auto"  # an open slot has no reference id to match: its products are judged by the matcher
    if mode == "off":
        return [tool_call_reward(r, task) for r in results], {"tool_semantic_calls": 0.0, "tool_semantic_matched": 0.0}

    has_prod = any(r.name in PRODUCT_TOOLS for r in results)
    has_mem = any(r.name in MEMORY_TOOLS for r in results)
    prod_semantic = has_prod and (mode == "always" or not reference_ids_available(task, lookup))
    mem_semantic = has_mem and (
        (mode == "always" and session_lookup is not None) or not _needles_available(task, session_lookup)
    )
    if prod_semantic and lookup is None:
        why = " (the task has a product slot without a reference product)" if task.is_open else ""
        raise ConfigError(
            "tool_wise semantic fallback: product calls need semantic matching" + why + " but no product lookup "
            "was given (Rubric resources={'lookup': ids -> {id: Product}})"
        )

    gold_products = set(task.reference_product_ids) - {""}
    if prod_semantic and lookup is not None and gold_products:
        gold_products = set(lookup(sorted(gold_products)))  # only ids the catalog knows
    gold_sessions = set(task.needle_session_ids) - {""}

    # one matcher call for every product needing a decision
    prod_match: dict[str, bool] = {}
    if prod_semantic:
        need = _returned_ids(results, PRODUCT_TOOLS, gold_products)
        if need:
            assert lookup is not None
            found = lookup(need)
            prods = [found[i] for i in need if i in found]
            decisions = list((matcher or rule_product_matcher)(task, prods)) if prods else []
            if len(decisions) != len(prods):
                raise ValueError(f"product matcher returned {len(decisions)} decisions for {len(prods)} products")
            prod_match = {p.product_id: bool(d) for p, d in zip(prods, decisions)}
    sess_match: dict[str, bool] = {}
    if mem_semantic and session_lookup is not None:
        need = _returned_ids(results, MEMORY_TOOLS, gold_sessions)
        if need:
            found_s = session_lookup(need)
            sess_match = {i: session_matches(task, s) for i, s in found_s.items()}

    per_call: list[float] = []
    n_sem = 0
    for r in results:
        if r.name in PRODUCT_TOOLS and prod_semantic:
            n_sem += 1
            per_call.append(_precision(r, gold_products, matched=prod_match))
        elif r.name in MEMORY_TOOLS and mem_semantic:
            n_sem += 1
            # mem_search lists one session id per retrieved turn (Eq. 8 counts items)
            per_call.append(_precision(r, gold_sessions, per_item=r.name == "mem_search", matched=sess_match))
        else:
            per_call.append(tool_call_reward(r, task))
    info = {
        "tool_semantic_calls": float(n_sem),
        "tool_semantic_matched": float(sum(prod_match.values()) + sum(sess_match.values())),
    }
    return per_call, info
