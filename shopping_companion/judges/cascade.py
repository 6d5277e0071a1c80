"""The judge cascade: the rule judge decides what it is sure of, an LLM judge only the rest.

:class:`CascadeJudge` judges every stage with the rule judge first. A verdict without uncertain
items (``Verdict.uncertain == 0``; also every no-answer verdict and every rule failure) is returned
as it is — no LLM request. A stage with at least one uncertain item is sent once to the LLM judge
(its full stage prompt, reply validation, cache, deadlines and post-checks:
:class:`~shopping_companion.judges.llm.LLMJudge`), and its reply decides the uncertain items only;
confident items stay the rule judge's:

- ``match`` / ``attribute``: satisfied iff the LLM counted that gold preference (``matched``);
- ``grounding``: the LLM's h1 beyond the rule judge's confident spurious count marks that many
  uncertain answer preferences spurious (those the rule judge called spurious first, then in answer
  order; the reply counts spurious preferences, it does not name them), the others harmless;
- ``type``: relevant iff the LLM's q2 is 1;
- ``bundle`` (u2) is arithmetic and always confident.

The fields are then recomputed from the items (:mod:`shopping_companion.judges.selective`), so a
cascade verdict is the rule verdict wherever the rule judge was sure. Decided items carry
``decided_by="llm"``, the verdict ``llm_calls=1`` and ``judge="<rule>+<llm>"``. A failed LLM reply gives a failed
verdict (never scored, as with the LLM judge alone). :attr:`CascadeJudge.stats` counts stages,
items, uncertain items and LLM calls (``llm_calls / stages`` is the share of stages the LLM saw).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from shopping_companion.judges.selective import stage1_fields, stage2_fields
from shopping_companion.types import Task, Trajectory, Verdict, VerdictItem

__all__ = ["CascadeJudge"]


class CascadeJudge:
    """Rule judge first, an LLM judge for the stages it is unsure of (module docstring).

    Args:
        rule: a :class:`~shopping_companion.judges.rule.RuleJudge` (its ``uncertain`` policy scores
            nothing here unless the LLM fails to decide; a failure is a failed verdict).
        llm: any judge with ``name`` and ``judge(task, trajectory) -> Verdict`` filling the paper's
            fields and ``matched`` labels (an LLMJudge, or one wrapped in
            :class:`~shopping_companion.assembly.judging.BoundedJudge`).
    """

    def __init__(self, rule: Any, llm: Any) -> None:
        self.rule = rule
        self.llm = llm
        self.name = f"{getattr(rule, 'name', 'rule')}+{getattr(llm, 'name', 'llm')}"
        self._lock = threading.Lock()
        self._stats = {"stages": 0, "items": 0, "uncertain_items": 0, "llm_calls": 0, "llm_failures": 0}

    @property
    def stats(self) -> dict[str, int]:
        """``stages`` judged, their ``items`` and ``uncertain_items``, ``llm_calls`` (stages sent to
        the LLM judge) and ``llm_failures`` (of those, failed replies)."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        """Close the LLM judge (its reply cache), when it can be closed."""
        close = getattr(self.llm, "close", None)
        if callable(close):
            close()

    def judge(self, task: Task, trajectory: Trajectory, stage: int | None = None) -> Verdict:
        """The cascade verdict of one stage trajectory (module docstring). ``stage``, if given, must
        equal ``trajectory.stage`` (``ValueError``)."""
        v = self.rule.judge(task, trajectory, stage)
        self._count(stages=1, items=len(v.items), uncertain_items=v.uncertain)
        if v.failed or v.uncertain == 0:
            return v
        self._count(llm_calls=1)
        lv = self.llm.judge(task, trajectory)
        if lv.failed:
            self._count(llm_failures=1)
            reasons = [f"{v.uncertain} uncertain item(s) sent to {lv.judge}, which failed", *lv.reasons]
            return self._after_llm(v, failed=True, reasons=reasons)
        items = _decide(v, lv)
        F, N, addon = v.F, v.N, bool(v.b)
        if v.stage == 1:
            fields = stage1_fields(items, F=F, N=N, addon=addon, policy="no_credit")
        else:
            fields = stage2_fields(items, F=F, N=N, addon=addon, p2=int(v.p2 or 0), policy="no_credit")
        decided = [it for it in items if it["decided_by"] == "llm"]
        note = f"{len(decided)} uncertain item(s) decided by {lv.judge}: " + "; ".join(
            f"{it['kind']} {it['label']} {'yes' if it['ok'] else 'no'}" for it in decided
        )
        reasons = [r for r in v.reasons if not r.endswith(f"scored {self.rule_policy}")] + [note]
        reasons += [f"{lv.judge}: {r}" for r in lv.reasons]
        return self._after_llm(v, **fields, items=items, reasons=reasons)

    __call__ = judge

    def _after_llm(self, v: Verdict, **update: Any) -> Verdict:
        """The rule verdict ``v`` as this cascade's, after its one LLM call: ``update`` (the fields
        the LLM changed, ``reasons``) on top, no uncertain policy left to apply."""
        return v.model_copy(update={**update, "judge": self.name, "llm_calls": 1, "uncertain_policy": None})

    @property
    def rule_policy(self) -> str:
        return str(getattr(self.rule, "uncertain", "no_credit"))

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, n in kw.items():
                self._stats[k] += n

    def __getattr__(self, name: str) -> Any:  # match_products, lookup, sessions, ...
        if name in ("rule", "llm"):
            raise AttributeError(name)
        return getattr(self.llm, name)


def _decide(v: Verdict, lv: Verdict) -> list[VerdictItem]:
    """The rule verdict's items with the uncertain ones decided by the LLM verdict ``lv``."""
    matched = Counter(lv.matched)
    items: list[VerdictItem] = []
    uncertain_grounding: list[int] = []
    for it in v.items:
        if it["confident"]:
            items.append(it)
            continue
        if it["kind"] in ("match", "attribute"):
            ok = matched[it["label"]] > 0
            if ok:
                matched[it["label"]] -= 1
        elif it["kind"] == "type":
            ok = bool(lv.q2)
        elif it["kind"] == "grounding":
            uncertain_grounding.append(len(items))
            ok = it["ok"]  # set below from the LLM's h1
        else:
            ok = it["ok"]
        items.append({**it, "ok": ok, "decided_by": "llm"})
    if uncertain_grounding:
        sure = sum(1 for it in items if it["kind"] == "grounding" and it["confident"] and not it["ok"])
        extra = max(0, int(lv.h1 or 0) - sure)
        order = sorted(uncertain_grounding, key=lambda k: (v.items[k]["ok"], k))  # rule-spurious first
        for n, k in enumerate(order):
            items[k] = {**items[k], "ok": n >= extra}
    return items
