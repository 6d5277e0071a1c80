"""Annotated episodes: an :class:`~shopping_companion.viewer.models.EpisodeView` of a parsed line,
with every returned id marked and cards of the recommended products.

Returned session ids are ``needle`` / ``non_needle`` (the task's ``needle_session_ids``);
returned product ids are ``reference`` (a slot's ``reference_product_id``), ``alternative`` (the
rule matcher :func:`~shopping_companion.rewards.tool_wise.rule_product_matcher` accepts the
record the agent was shown) or ``other``; without the task (benchmark not found) every id is
``unknown``. Each call's r(u) is ``RewardBreakdown.per_tool_call`` aligned with
:func:`~shopping_companion.rewards.tool_wise.trajectory_tool_results`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from pydantic import ValidationError

from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS
from shopping_companion.types import (
    EpisodeResult,
    Preference,
    Product,
    RewardBreakdown,
    Task,
    ToolResult,
    Trajectory,
    Verdict,
)
from shopping_companion.viewer.models import (
    RAW_CAP,
    CallView,
    EpisodeRow,
    EpisodeView,
    Mark,
    ProductCard,
    StageView,
    TurnView,
)
from shopping_companion.viewer.verl_dumps import grpo_gold, grpo_task_id, grpo_trajectory

__all__ = [
    "taxonomy_view",
    "record_product",
    "trajectory_records",
    "stage_views",
    "result_view",
    "kept_view",
    "dump_view",
    "bad_view",
]


def _cap(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")[:RAW_CAP]


def _pref_label(p: Preference) -> str:
    return f"{p.attribute}={p.value}" + (" (avoid)" if p.polarity == "avoid" else "")


def taxonomy_view(item: dict[str, Any] | None) -> dict[str, Any] | None:
    if not item:
        return None
    return {
        "primary": item.get("primary"),
        "evidence": item.get("evidence") or {},
        "secondary": item.get("secondary") or [],
        "labels": item.get("labels") or [],
        "llm": item.get("llm"),
    }


def _strip_origin(value: Any) -> str:
    from shopping_companion.envs.tools import ORIGIN_LABEL

    s = str(value)
    for label in (*ORIGIN_LABEL.values(), "extracted"):
        suffix = f" ({label})"
        if s.endswith(suffix):
            return s[: -len(suffix)]
    return s


def trajectory_records(trajs: Sequence[Trajectory]) -> dict[str, dict[str, Any]]:
    """``product id -> the merged record`` from every successful product tool call, in order (a
    later ``product_view`` overrides a search hit's fields)."""
    from shopping_companion.benchmark.taxonomy import products_in

    seen: dict[str, dict[str, Any]] = {}
    for t in trajs:
        for tr in t.tool_results:
            if tr.name not in PRODUCT_TOOLS or tr.error is not None:
                continue
            for obj in products_in(tr.content):
                if set(obj) <= {"product_id", "error"}:
                    continue  # a product_view "errors" entry, not a record
                seen.setdefault(obj["product_id"], {}).update(obj)
                if tr.name == "product_view":
                    seen[obj["product_id"]][_VIEWED] = True
    return seen


#: Key marking a merged record that includes a ``product_view`` record (never a product field).
_VIEWED = "\x00viewed"


def episode_records(res: EpisodeResult) -> dict[str, dict[str, Any]]:
    return trajectory_records([s.trajectory for s in res.stages])


def record_product(rec: dict[str, Any]) -> Product | None:
    """A :class:`~shopping_companion.types.Product` from a record the agent was shown (a ``product_view`` record or
    a search hit): extraction notes stripped from attribute values, the source taken from the id, a search
    hit's ``category`` as the category path; None when it does not validate."""
    d: dict[str, Any] = {k: v for k, v in rec.items() if k in Product.model_fields and k != "attribute_sources"}
    pid = str(rec.get("product_id", ""))
    d.setdefault("source", pid.split(":", 1)[0] if ":" in pid else "unknown")
    if isinstance(d.get("attributes"), dict):
        d["attributes"] = {str(k): _strip_origin(v) for k, v in d["attributes"].items()}
    if "category_path" not in d and isinstance(rec.get("category"), str) and rec["category"]:
        d["category_path"] = [rec["category"]]
    try:
        return Product.model_validate(d)
    except ValidationError:
        return None


def _product_marks(task: Task | None, ids: Iterable[str], records: dict[str, dict[str, Any]]) -> dict[str, Mark]:
    from shopping_companion.rewards.tool_wise import rule_product_matcher

    ids = list(dict.fromkeys(ids))
    if task is None:
        return {i: "unknown" for i in ids}
    refs = set(task.reference_product_ids)
    marks: dict[str, Mark] = {i: ("reference" if i in refs else "other") for i in ids}
    cands = [(i, p) for i in ids if i not in refs and i in records and (p := record_product(records[i])) is not None]
    if cands:
        try:
            decisions = rule_product_matcher(task, [p for _, p in cands])
        except Exception:  # noqa: BLE001 - a record the matcher cannot read stays "other"
            decisions = [False] * len(cands)
        for (i, _), ok in zip(cands, decisions):
            if ok:
                marks[i] = "alternative"
    return marks


def _card(pid: str, mark: Mark, rec: dict[str, Any] | None, task: Task | None) -> ProductCard:
    from shopping_companion.judges.rule import is_relevant, product_satisfies

    if rec is None:
        return ProductCard(pid, mark, None, None, None, {}, [], [], seen=False)
    attrs = {str(k): _strip_origin(v) for k, v in (rec.get("attributes") or {}).items()}
    for k in ("brand", "category"):
        if rec.get(k):
            attrs.setdefault(k, str(rec[k]))
    if rec.get("category_path"):
        attrs.setdefault("category", " > ".join(map(str, rec["category_path"])))
    price = rec.get("price")
    price_s = None if price is None else f"{price} {rec.get('currency') or ''}".strip()
    matched: list[str] = []
    missing: list[str] = []
    p = record_product(rec)
    if task is not None and p is not None:
        n = task.n_products
        try:
            slots = [s for s, slot in enumerate(task.slots) if n == 1 or is_relevant(p, slot)] or list(range(n))
            for g in task.preferences:
                if n > 1 and g.slot not in slots:
                    continue
                (matched if product_satisfies(p, g) else missing).append(_pref_label(g))
        except Exception:  # noqa: BLE001 - never fail a page on a record
            matched, missing = [], []
    return ProductCard(
        product_id=pid,
        mark=mark,
        title=rec.get("title"),
        price=price_s,
        shop=rec.get("shop"),
        attributes=attrs,
        matched=matched,
        missing=missing,
        seen=True,
        viewed=bool(rec.get(_VIEWED)),
    )


def stage_views(
    stages: Sequence[tuple[Trajectory, Verdict | None, RewardBreakdown | None]],
    task: Task | None,
    records: dict[str, dict[str, Any]],
) -> list[StageView]:
    from shopping_companion.envs.parsing import split_thinking
    from shopping_companion.rewards.tool_wise import trajectory_tool_results

    prod_ids = [
        i for t, _, _ in stages for tr in t.tool_results if tr.name in PRODUCT_TOOLS for i in tr.returned_ids
    ] + [i for t, _, _ in stages for i in t.recommended_ids]
    pmarks = _product_marks(task, prod_ids, records)
    needles = set(task.needle_session_ids) if task else set()

    def mark(name: str, i: str) -> Mark:
        if task is None:
            return "unknown"
        if name in MEMORY_TOOLS:
            return "needle" if i in needles else "non_needle"
        if name in PRODUCT_TOOLS:
            return pmarks.get(i, "other")
        return "other"

    out: list[StageView] = []
    for traj, verdict, reward in stages:
        per_step: list[list[ToolResult]] = [
            trajectory_tool_results(Trajectory.model_construct(steps=[st])) for st in traj.steps
        ]
        n_calls = sum(len(x) for x in per_step)
        scores = list(reward.per_tool_call) if reward is not None else []
        aligned = len(scores) == n_calls
        k = 0
        turns: list[TurnView] = []
        for i, (st, results) in enumerate(zip(traj.steps, per_step)):
            calls: list[CallView] = []
            for j, tr in enumerate(results):
                args = st.tool_calls[j].arguments if j < len(st.tool_calls) else {}
                calls.append(
                    CallView(
                        name=tr.name,
                        arguments=dict(args),
                        content=tr.content,
                        error=tr.error,
                        returned=[(rid, mark(tr.name, rid)) for rid in tr.returned_ids],
                        reward=scores[k] if aligned else None,
                        call_id=tr.call_id,
                    )
                )
                k += 1
            _ok, spans, outside, _errs = split_thinking(st.assistant_text)
            think = "\n\n".join(s.strip() for s in spans if s.strip()) or None
            turns.append(
                TurnView(
                    index=i,
                    think=think,
                    text=outside,
                    reasoning=st.reasoning,
                    finish_reason=st.finish_reason,
                    format_errors=list(st.format.errors),
                    calls=calls,
                    prompt_tokens=st.prompt_tokens,
                    completion_tokens=st.completion_tokens,
                    latency_s=st.latency_s,
                )
            )
        cards = [
            _card(pid, pmarks.get(pid, "unknown" if task is None else "other"), records.get(pid), task)
            for pid in dict.fromkeys(traj.recommended_ids)
        ]
        out.append(
            StageView(
                stage=traj.stage,
                termination=traj.termination,
                verdict=verdict,
                reward=reward,
                turns=turns,
                recommended=cards,
                identified=traj.identified_preferences,
                final_answer=traj.final_answer,
                messages=list(traj.messages),
            )
        )
    return out


# --------------------------------------------------------------------------- views of one line


def _annotated(
    row: EpisodeRow,
    task: Task | None,
    stages: list[StageView],
    *,
    result: EpisodeResult | None = None,
    simulator: dict | None = None,
    taxonomy: dict | None = None,
    record: dict | None = None,
    gold: Sequence[Preference] = (),
) -> EpisodeView:
    """The view of a readable line; ``gold``: the preferences shown when the task is not known."""
    return EpisodeView(
        row=row,
        raw=None,
        result=result,
        task=task,
        gold=list(task.preferences) if task else list(gold),
        stages=stages,
        simulator=simulator,
        taxonomy=taxonomy,
        record=record,
    )


def result_view(row: EpisodeRow, res: EpisodeResult, task: Task | None, taxonomy: dict[str, Any] | None) -> EpisodeView:
    """The view of an ``EpisodeResult`` line (an evaluation or SFT rollout); ``taxonomy``: the
    failure's classification dict, when known."""
    stages = stage_views([(s.trajectory, s.verdict, s.reward) for s in res.stages], task, episode_records(res))
    return _annotated(row, task, stages, result=res, simulator=res.simulator, taxonomy=taxonomy_view(taxonomy))


def kept_view(row: EpisodeRow, kept: Any, task: Task | None, record: dict) -> EpisodeView:
    """The view of an SFT ``kept.jsonl`` line: ``kept`` its
    :class:`~shopping_companion.sft.collect.KeptStage`, ``record`` the line as parsed JSON."""
    records = trajectory_records([kept.trajectory])
    stages = stage_views([(kept.trajectory, kept.verdict, None)], task, records)
    return _annotated(row, task, stages, record=record)


def dump_view(row: EpisodeRow, d: Any, tasks: dict[str, Task]) -> EpisodeView:
    """The view of a GRPO validation-dump line ``d`` (parsed JSON); the gold preferences of its
    ground truth when ``tasks`` lacks its task."""
    tid = grpo_task_id(d)
    task = tasks.get(tid) if tid else None
    traj, reward = grpo_trajectory(d, task)
    stages = stage_views([(traj, None, reward)], task, trajectory_records([traj]))
    record = {k: v for k, v in d.items() if k not in ("input", "output")}
    return _annotated(row, task, stages, record=record, gold=() if task else grpo_gold(d))


def bad_view(row: EpisodeRow, data: bytes | None) -> EpisodeView:
    """The view of an unreadable, foreign or torn line: its stored bytes ``data`` (None: they
    cannot be read) as text capped at :data:`~shopping_companion.viewer.models.RAW_CAP`, no stages."""
    return EpisodeView(
        row=row,
        raw=_cap(data) if data is not None else None,
        result=None,
        task=None,
        gold=[],
        stages=[],
        simulator=None,
        taxonomy=None,
        raw_bytes=len(data) if data is not None else None,
    )
