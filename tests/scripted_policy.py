"""A deterministic scripted "model" for the local OpenAI-compatible test server.

:func:`policy_script` returns a callable for :class:`tests.openai_server.ScriptedOpenAIServer`:
each answer is a pure function of the request body (messages, tools, sampling seed), so a
concurrent evaluation must give exactly the results of a sequential one, and a resumed run those
of an uninterrupted one. It finds its task from the ``Shopping request: …`` line of the opening
user message and plays a competent but imperfect agent in every mode:

- stage 1 (memory tools): ``mem_search`` with the instruction, ``mem_view`` of the top-2 sessions,
  then the gold preferences — minus the last one when ``seed % 3 == 0`` (so Acc and Succ vary with
  the trial's seed);
- stage 2 / oracle (product tools): ``product_search`` with product type and preference values,
  ``product_view`` of the reference product when it was found (else the first hit), then
  ``@REC::`` of the viewed product — except when ``seed % 2 == 1``: it recommends the last of its 20
  search hits (usually not a match) without viewing it;
- one_stage (all tools): the memory steps, then the product steps, then an answer with a fenced
  JSON preference block and the ``@REC::`` marker.

Tool calls are Hermes text blocks (no server-generated ids, so runs are byte-comparable). A tool
message without a ``name`` (Inspect's OpenAI client sends none) is matched to the call it answers.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from shopping_companion.types import Task


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def _call(name: str, args: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


_TEXT_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _tool_names_of_messages(messages: list[dict[str, Any]]) -> list[str | None]:
    """The tool name of each message (None for other roles): its ``name``, or, when a client sends
    none (Inspect's OpenAI client does not), the name of the call it answers: by id among the
    structured calls of the assistant turn before it, else by position among that turn's
    ``<tool_call>`` text blocks."""
    out: list[str | None] = []
    calls: list[tuple[str | None, str]] = []
    k = 0
    for m in messages:
        if m.get("role") == "assistant":
            calls = [(c.get("id"), c["function"]["name"]) for c in m.get("tool_calls") or []]
            for block in _TEXT_CALL.findall(m.get("content") or ""):
                try:
                    calls.append((None, json.loads(block)["name"]))
                except (ValueError, KeyError, TypeError):
                    calls.append((None, ""))
            k = 0
            out.append(None)
        elif m.get("role") == "tool":
            name = m.get("name")
            if name is None:
                by_id = [n for cid, n in calls if cid is not None and cid == m.get("tool_call_id")]
                name = by_id[0] if by_id else (calls[k][1] if k < len(calls) else None)
            k += 1
            out.append(name)
        else:
            out.append(None)
    return out


def _tool_json(body: dict[str, Any], name: str) -> dict[str, Any]:
    """The last observation of tool ``name`` as JSON ({} when absent or not JSON)."""
    messages = body["messages"]
    for m, tool in reversed(list(zip(messages, _tool_names_of_messages(messages)))):
        if m.get("role") == "tool" and tool == name:
            try:
                return json.loads(m["content"])
            except ValueError:
                return {}
    return {}


def find_task(body: dict[str, Any], tasks: Iterable[Task]) -> Task:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    for t in tasks:
        if f"Shopping request: {t.instruction}" in user:
            return t
    raise LookupError("no task matches the request")


def policy_script(tasks: list[Task], delay_s: float = 0.0, think: bool = True):
    tasks = list(tasks)

    def prefs_for(task: Task, seed: int) -> list[dict[str, Any]]:
        prefs = [p.model_dump() for p in task.preferences]
        return prefs[:-1] if seed % 3 == 0 and len(prefs) > 1 else prefs

    def product_steps(task: Task, seed: int, body: dict[str, Any], k: int) -> str:
        if k == 0:
            query = task.slots[0].product_type + " " + " ".join(p.value for p in task.preferences)
            return _call("product_search", {"query": query, "top_k": 20})
        hits = [h["product_id"] for h in _tool_json(body, "product_search").get("results", [])]
        ref = task.slots[0].reference_product_id
        if seed % 2 == 1:  # careless: the last of the 20 hits, unviewed
            pick = hits[-1] if hits else ref
            return f"It matches what you asked for. @REC::{pick}@"
        pick = ref if ref in hits else (hits[0] if hits else ref)
        if k == 1:
            return _call("product_view", {"product_ids": [pick]})
        return f"It matches what you asked for. @REC::{pick}@"

    def script(body: dict[str, Any]) -> Any:
        task = find_task(body, tasks)
        seed = int(body.get("seed") or 0)
        names = _tool_names(body)
        k = sum(m["role"] == "assistant" for m in body["messages"])
        pre = "<think>step</think>" if think else ""
        if names == {"mem_search", "mem_view"}:
            if k == 0:
                text = _call("mem_search", {"queries": [task.instruction], "top_k": 5})
            elif k == 1:
                hits = _tool_json(body, "mem_search").get("results", [])
                ids = list(dict.fromkeys(h["session_id"] for h in hits))[:2] or ["none"]
                text = _call("mem_view", {"session_ids": ids})
            else:
                text = "<answer>" + json.dumps({"preferences": prefs_for(task, seed)}) + "</answer>"
        elif "mem_search" in names:  # one_stage: memory steps, then product steps
            if k == 0:
                text = _call("mem_search", {"queries": [task.instruction], "top_k": 5})
            elif k == 1:
                hits = _tool_json(body, "mem_search").get("results", [])
                ids = list(dict.fromkeys(h["session_id"] for h in hits))[:2] or ["none"]
                text = _call("mem_view", {"session_ids": ids})
            else:
                step = product_steps(task, seed, body, k - 2)
                if "@REC::" in step:
                    block = json.dumps({"preferences": prefs_for(task, seed)})
                    text = f"<answer>```json\n{block}\n```\n{step}</answer>"
                else:
                    text = step
        else:
            step = product_steps(task, seed, body, k)
            text = f"<answer>{step}</answer>" if "@REC::" in step else step
        text = pre + text
        return {"content": text, "delay_s": delay_s} if delay_s else text

    return script
