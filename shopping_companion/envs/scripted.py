"""``GoldPolicy``: a scripted policy that KNOWS THE GOLD ANSWER — for testing the environment,
the judge and the rewards end to end, and for measuring environment overhead without a model
(``benchmarks/bench_env.py``). It is never a baseline and must never appear in a results table.

It implements :class:`~shopping_companion.llm.base.ChatBackend` and follows the protocol of every
mode with real tool calls (so ids are returned by the tools, as the judge's p2 requires):

- two_stage, stage 1: ``mem_search`` (the instruction) → ``mem_view`` (the needle sessions) →
  ``<answer>`` with the gold preferences;
- two_stage, stage 2 / oracle: ``product_search`` (product type + wanted values, filtered to the
  voucher's shop for add-on tasks) → ``product_view`` (the recommended ids) → ``<answer>`` with
  one ``@REC::id@`` per recommended product and the bundle arithmetic for add-on tasks;
- one_stage: the memory calls, then the product calls, then one answer with a fenced JSON
  preference block and the markers.

``recommend`` overrides the recommended ids (default: the task's reference products), e.g. to
check that a cross-shop bundle fails; ``preferences`` overrides the stage-1 answer.
"""

from __future__ import annotations

import json
from typing import Any

from shopping_companion.envs.parsing import format_tool_call as _call
from shopping_companion.llm.base import AssistantMessage, Messages, Sampling, ToolSchemas
from shopping_companion.types import Preference, Task

__all__ = ["GoldPolicy"]


class GoldPolicy:
    """Scripted gold-knowing policy (module docstring). ``name`` says what it is."""

    name = "gold-policy (scripted, knows the answer; for tests only)"

    def __init__(
        self,
        task: Task,
        recommend: list[str] | None = None,
        preferences: list[Preference] | None = None,
        think: bool = True,
    ) -> None:
        self.task = task
        self.recommend = list(recommend) if recommend is not None else list(task.reference_product_ids)
        self.preferences = list(preferences) if preferences is not None else list(task.preferences)
        self.think = think

    def _wrap(self, body: str, thought: str) -> str:
        return (f"<think>{thought}</think>\n" if self.think else "") + body

    def _prefs_json(self) -> str:
        return json.dumps({"preferences": [p.model_dump() for p in self.preferences]}, ensure_ascii=False)

    def _search_args(self) -> dict[str, Any]:
        t = self.task
        words = [t.slots[0].product_type] + [p.value for p in self.preferences if p.polarity == "want" and p.slot == 0]
        args: dict[str, Any] = {"query": " ".join(words)[:500] or "product", "top_k": 10}
        if t.voucher is not None:
            args["shop_id"] = t.voucher.shop_id
        return args

    def _report(self) -> str:
        lines = [
            f"- @REC::{pid}@ meets the request and the preferences I checked with product_view."
            for pid in self.recommend
        ]
        if self.task.voucher is not None or self.task.budget is not None:
            lines.append("- Bundle from one shop; voucher applied when the total reaches its minimum spend.")
        return "\n".join(lines)

    def chat(
        self, messages: Messages, tools: ToolSchemas | None = None, sampling: Sampling | None = None
    ) -> AssistantMessage:
        names = {t["function"]["name"] for t in tools or []}
        turn = sum(m["role"] == "assistant" for m in messages)
        has_mem, has_prod = "mem_search" in names, "product_search" in names
        steps: list[str]
        if has_mem and has_prod:  # one_stage
            steps = ["mem_search", "mem_view", "product_search", "product_view", "answer_both"]
        elif has_mem:
            steps = ["mem_search", "mem_view", "answer_prefs"]
        else:
            steps = ["product_search", "product_view", "answer_recs"]
        what = steps[min(turn, len(steps) - 1)]
        if what == "mem_search":
            text = self._wrap(_call("mem_search", {"queries": [self.task.instruction], "top_k": 10}), "search memory")
        elif what == "mem_view":
            text = self._wrap(
                _call("mem_view", {"session_ids": list(self.task.needle_session_ids)[:10]}), "read needles"
            )
        elif what == "product_search":
            text = self._wrap(_call("product_search", self._search_args()), "search products")
        elif what == "product_view":
            text = self._wrap(_call("product_view", {"product_ids": self.recommend[:20] or ["none"]}), "verify")
        elif what == "answer_prefs":
            text = self._wrap(f"<answer>{self._prefs_json()}</answer>", "done")
        elif what == "answer_recs":
            text = self._wrap(f"<answer>{self._report()}</answer>", "done")
        else:
            text = self._wrap(f"<answer>```json\n{self._prefs_json()}\n```\n{self._report()}</answer>", "done")
        return AssistantMessage(content=text)
