"""``ScriptedTeacher``: a scripted, gold-knowing teacher for the CPU pipeline's SFT collection.

The paper rejection-samples a strong LLM (GPT-4.1) as the SFT teacher (§6.1). A CPU machine has no
such model, so the CPU pipeline (``configs/pipeline/cpu_nano.yaml``; docs/pipeline.md) serves this
teacher over an OpenAI-compatible endpoint on 127.0.0.1 (:mod:`shopping_companion.llm.policy_server`)
and collects from it through the same ``sft collect`` path a real teacher uses. It is not a model
and never a baseline: reports name it as what it is.

It plays the two-stage protocol with real tool calls, varied by the request's sampling seed (so
rejection sampling has something to reject and the student something to choose between):

- stage 1: ``mem_search`` for the product type (``top_k`` drawn from ``top_k``) or, with
  probability ``p_attribute_queries``, one query per preference it looks for (``<product type>
  <attribute>``, as a reader asking about each attribute would), then ``mem_view``
  of one retrieved session (a needle session when one was retrieved, except with probability
  ``p_stray`` another retrieved session), then the gold preferences — with probability ``p_slip``
  one of them dropped (a failure that rejection sampling removes);
  with ``answer_from="evidence"`` it views every retrieved needle session instead (each one
  swapped for another retrieved session with probability ``p_stray``) and answers only the gold
  preferences that a user turn of the sessions it viewed states (``states``, read from the
  ``mem_view`` observation): what a teacher that reads could know. Its answers then depend on
  its tool use, as a real teacher's do; the gold-knowing default answers right after any view;
- stage 2: ``product_search`` for the product type and the wanted values, ``product_view`` of one
  hit (the reference product when it was listed, except with probability ``p_stray`` another hit),
  then ``@REC::id@`` of the viewed product.

Single-product tasks only; an add-on task gets the gold bundle without the search (it is not
what the CPU configuration asks for). The task is found from the ``Shopping request: …`` line of
the first user message.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shopping_companion.envs.parsing import format_tool_call
from shopping_companion.llm.base import AssistantMessage, BackendError, Messages, Sampling, ToolSchemas
from shopping_companion.types import Preference, Task

__all__ = ["ScriptedTeacher", "find_task", "teacher_knows"]

_REQUEST = "Shopping request: "


def find_task(messages: Messages, tasks: dict[str, Task]) -> Task:
    """The task whose instruction opens the first user message (``Shopping request: <instruction>``).

    ``tasks`` maps instruction text to task. Raises :class:`BackendError` when no task matches."""
    user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    if user.startswith(_REQUEST):
        head = user[len(_REQUEST) :]
        for instruction in sorted(tasks, key=len, reverse=True):
            if head.startswith(instruction):
                return tasks[instruction]
    raise BackendError("scripted teacher: the first user message names no task of its benchmark")


def _last_tool(messages: Messages, name: str) -> dict[str, Any]:
    for m in reversed(messages):
        if m.get("role") == "tool" and m.get("name") == name:
            try:
                out = json.loads(m.get("content") or "")
            except ValueError:
                return {}
            return out if isinstance(out, dict) else {}
    return {}


def teacher_knows(answer_from: str) -> str:
    """What the scripted teacher knows, in words for logs and reports (``answer_from``: ``gold`` |
    ``evidence``)."""
    if answer_from == "evidence":
        return "knows the gold task, answers what the sessions it viewed state"
    return "knows the gold answer"


def _evidence_views(
    gold: list[str], other: list[str], hits: list[str], fallback: list[str], rng: random.Random, p_stray: float
) -> list[str]:
    """Sessions an evidence-reading teacher views: every retrieved needle session, each swapped for
    an unused other retrieved session with probability ``p_stray``; the first hit when no needle
    was retrieved (``fallback``, the needle sessions, when nothing was)."""
    spare = list(other)
    picks = [spare.pop(0) if spare and rng.random() < p_stray else g for g in gold]
    return list(dict.fromkeys(picks)) or hits[:1] or fallback[:1]


class ScriptedTeacher:
    """The scripted teacher (module docstring).

    Args:
        tasks: the benchmark's tasks (any split; the pipeline collects on the train split only).
        top_k: ``top_k`` values drawn for searches (each >= 1).
        p_stray: probability of viewing a retrieved item other than the gold one, in [0, 1].
        p_slip: probability of dropping one gold preference from a stage-1 answer, in [0, 1].
        p_attribute_queries: probability that a stage-1 search asks one query per gold
            preference's attribute instead of one for the product type, in [0, 1].
        seed: base of the per-request random draws, mixed with the request's sampling seed.
        answer_from: ``gold`` (the stage-1 answer is the gold preferences) or ``evidence`` (only
            the gold preferences the viewed sessions state; module docstring).
        states: ``states(preference, text) -> bool``, whether ``text`` (a user turn) states the
            preference; required with ``answer_from="evidence"`` (the pipeline passes the
            benchmark's own check, ``benchmark.synthesis.verify.states_value``).

    Raises ``ValueError`` for an empty ``top_k``, a value < 1, a probability outside [0, 1], an
    unknown ``answer_from``, or ``answer_from="evidence"`` without ``states``.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        *,
        top_k: Sequence[int] = (1, 2, 3),
        p_stray: float = 0.25,
        p_slip: float = 0.15,
        p_attribute_queries: float = 0.0,
        seed: int = 0,
        answer_from: str = "gold",
        states: Callable[[Preference, str], bool] | None = None,
    ) -> None:
        self.tasks = {t.instruction: t for t in tasks}
        if not top_k or any(int(k) < 1 for k in top_k):
            raise ValueError(f"top_k: must be a non-empty list of integers >= 1, got {list(top_k)!r}")
        for name, p in (("p_stray", p_stray), ("p_slip", p_slip), ("p_attribute_queries", p_attribute_queries)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name}: must be in [0, 1], got {p!r}")
        self.top_k = [int(k) for k in top_k]
        self.p_stray = float(p_stray)
        self.p_slip = float(p_slip)
        self.p_attribute_queries = float(p_attribute_queries)
        self.seed = int(seed)
        if answer_from not in ("gold", "evidence"):
            raise ValueError(f"answer_from: must be 'gold' or 'evidence', got {answer_from!r}")
        if answer_from == "evidence" and states is None:
            raise ValueError("states: required with answer_from='evidence'")
        self.answer_from = answer_from
        self.states = states
        self.name = f"scripted-teacher ({teacher_knows(answer_from)}; CPU pipeline only, not a model)"

    def _rng(self, task: Task, sampling: Sampling | None, stage: int) -> random.Random:
        s = sampling.seed if sampling is not None and sampling.seed is not None else 0
        digest = hashlib.sha256(f"{self.seed}|{s}|{task.task_id}|{stage}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def chat(
        self, messages: Messages, tools: ToolSchemas | None = None, sampling: Sampling | None = None
    ) -> AssistantMessage:
        """One assistant turn for ``messages`` (module docstring). Raises :class:`BackendError`
        when the request names no known task or offers neither memory nor product tools."""
        task = find_task(messages, self.tasks)
        names = {t["function"]["name"] for t in tools or []}
        turn = sum(m.get("role") == "assistant" for m in messages)
        if "mem_search" in names:
            text = self._stage1(task, messages, turn, self._rng(task, sampling, 1))
        elif "product_search" in names:
            text = self._stage2(task, messages, turn, self._rng(task, sampling, 2))
        else:
            raise BackendError("scripted teacher: the request offers neither memory nor product tools")
        return AssistantMessage(content=text, finish_reason="stop")

    def _stage1(self, task: Task, messages: Messages, turn: int, rng: random.Random) -> str:
        k = rng.choice(self.top_k)
        stray = rng.random() < self.p_stray
        slip = rng.random() < self.p_slip
        per_attribute = self.p_attribute_queries > 0 and rng.random() < self.p_attribute_queries
        if turn == 0:
            kind = task.slots[0].product_type
            queries = [f"{kind} {p.attribute}" for p in task.preferences] if per_attribute else []
            return format_tool_call("mem_search", {"queries": list(dict.fromkeys(queries)) or [kind], "top_k": k})
        if turn == 1:
            hits = [r.get("session_id") for r in _last_tool(messages, "mem_search").get("results", [])]
            hits = [h for h in dict.fromkeys(hits) if isinstance(h, str)]
            gold = [h for h in hits if h in set(task.needle_session_ids)]
            other = [h for h in hits if h not in set(gold)]
            if self.answer_from == "evidence":
                return format_tool_call(
                    "mem_view",
                    {
                        "session_ids": _evidence_views(
                            gold, other, hits, list(task.needle_session_ids), rng, self.p_stray
                        )
                    },
                )
            pick = (other if stray and other else gold or hits or list(task.needle_session_ids))[0]
            return format_tool_call("mem_view", {"session_ids": [pick]})
        known = task.preferences if self.answer_from == "gold" else self._read(task, messages)
        prefs = [{"attribute": p.attribute, "value": p.value, "polarity": p.polarity, "slot": p.slot} for p in known]
        if slip and len(prefs) > 1:
            prefs.pop(rng.randrange(len(prefs)))
        return "<answer>" + json.dumps({"preferences": prefs}, ensure_ascii=False) + "</answer>"

    def _read(self, task: Task, messages: Messages) -> list[Preference]:
        """The gold preferences that a user turn of the sessions in the last ``mem_view``
        observation states (``answer_from="evidence"``)."""
        assert self.states is not None
        turns = [
            t.get("content")
            for s in _last_tool(messages, "mem_view").get("sessions", [])
            if isinstance(s, dict)
            for t in s.get("turns", [])
            if isinstance(t, dict) and t.get("role") == "user" and isinstance(t.get("content"), str)
        ]
        return [p for p in task.preferences if any(self.states(p, u) for u in turns)]

    def _stage2(self, task: Task, messages: Messages, turn: int, rng: random.Random) -> str:
        k = rng.choice(self.top_k)
        stray = rng.random() < self.p_stray
        if task.n_products > 1 or task.voucher is not None:
            marks = " ".join(f"@REC::{pid}@" for pid in task.reference_product_ids)
            return f"<answer>{marks}</answer>"
        slot = task.slots[0]
        if turn == 0:
            wanted = [p.value for p in task.preferences if p.polarity == "want" and p.slot == 0]
            return format_tool_call("product_search", {"query": " ".join([slot.product_type, *wanted]), "top_k": k})
        hits = [r.get("product_id") for r in _last_tool(messages, "product_search").get("results", [])]
        hits = [h for h in dict.fromkeys(hits) if isinstance(h, str)]
        if turn == 1:
            ref = slot.reference_product_id
            other = [h for h in hits if h != ref]
            if stray and other:
                pick = other[0]
            else:
                pick = ref if ref in hits else (hits[0] if hits else ref)
            return format_tool_call("product_view", {"product_ids": [pick]})
        viewed = _last_tool(messages, "product_view").get("products", [])
        pid = viewed[0].get("product_id") if viewed and isinstance(viewed[0], dict) else None
        return f"<answer>@REC::{pid or (hits[0] if hits else slot.reference_product_id)}@</answer>"
