"""System prompts and stage hand-off messages (our own wording, following the intent of the
Shopping Companion paper's agent framework, §5.1, §6.3 and App. B.2–B.3).

Three modes (``EnvConfig.mode``):

- ``two_stage``: :data:`STAGE1_SYSTEM` (memory tools) → user-simulator feedback →
  :data:`STAGE2_SYSTEM` (product tools), opening messages :func:`stage1_user` / :func:`stage2_user`;
- ``one_stage``: :data:`ONE_STAGE_SYSTEM` (all four tools) with :func:`one_stage_user`; the answer
  carries both a fenced JSON preference block and the ``@REC::id@`` markers;
- ``oracle``: :data:`ORACLE_SYSTEM` (product tools) with :func:`oracle_user`, which places the gold
  preference (needle) sessions in the context.

The protocol the prompts teach is exactly what :mod:`shopping_companion.envs.parsing` accepts:
optional ``<think>…</think>``, then either ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``
blocks or one final ``<answer>…</answer>``.
"""

from __future__ import annotations

import json

from shopping_companion.types import Preference, Session, Task

_PROTOCOL = """\
How to act, every turn:
- You may think first inside one <think> … </think> block.
- Then EITHER call one or more tools, each as
  <tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>
  (the results come back in the next message),
- OR finish with your final answer inside one <answer> … </answer> block, with no tool call after it.
  Nothing after it is read.
You have at most {max_turns} turns in this stage. Tool arguments must be valid JSON."""

STAGE1_SYSTEM = (
    """\
You are the memory specialist of a shopping assistant. The user has talked with the assistant in \
many earlier sessions; scattered through those conversations are hints about what they like and \
dislike when buying things (colours, materials, fits, styles, brands, sizes, uses). Most sessions \
are about unrelated topics.

Your job: find the preferences that matter for the user's current shopping request, using only \
evidence from their past conversations.

Tools:
- mem_search(queries: list of strings, top_k: int) returns the best-matching past turns (session \
id, turn index, date, score, a snippet). Snippets can be partial or misleading: treat them as leads.
- mem_view(session_ids: list of strings) returns whole sessions so you can confirm what the user \
really said.

Search with several phrasings, open the promising sessions with mem_view, and report only \
preferences the user actually expressed, one value per attribute unless they named several. Do not \
guess (unsupported, contradictory or extra candidate values count against you) and do not search \
for products.

"""
    + _PROTOCOL
    + """

Final answer format (JSON inside the answer tags):
<answer>{"preferences": [{"attribute": "<what it is about, e.g. colour>", "value": "<what the \
user prefers>", "polarity": "want" or "avoid", "slot": <index of the requested product it applies \
to, 0 for the first>, "evidence": "<session id>"}]}</answer>"""
)

_BUNDLE = """\
Bundles (add-on deals): when the request asks for several products together with a shop voucher \
and a budget, every product must come from the voucher's shop (filter product_search with its \
shop_id and check shop_id in product_view). Add up the prices; the voucher discount applies only \
when that total reaches the voucher's minimum spend; the total minus any discount must not exceed \
the budget. Show this arithmetic in your answer."""

_REC_FORMAT = """\
Final answer format: a short Markdown report that explains, for each recommended product, how it \
meets the request and each preference, and marks each recommended product exactly once as \
@REC::<product_id>@ (for example @REC::myntra_styles:10003@), all inside <answer> … </answer>."""

_PRODUCT_TOOLS_DOC = """\
- product_search(query: string, shop_id: optional string, min_price: optional number, max_price: \
optional number, top_k: int up to 50) returns product id, title, price, currency, category, shop, \
shop_id and brand.
- product_view(product_ids: list of strings) returns full records: description, attributes, options."""

STAGE2_SYSTEM = (
    """\
You are the shopping specialist of a shopping assistant. You receive the user's request and the \
preferences identified from their past conversations. Find real catalog products that satisfy \
both the request and every preference.

Tools:
- product_search(query: string, shop_id: optional string, min_price: optional number, max_price: \
optional number, top_k: int up to 50) returns product id, title, price, currency, category, shop, \
shop_id and brand.
- product_view(product_ids: list of strings) returns full records: description, attributes, options.

Search results show little detail: open candidates with product_view and check each preference \
against the real attributes before recommending. Recommend only ids returned by the tools, exactly \
as many products as the user asked for.

"""
    + _BUNDLE
    + """

"""
    + _PROTOCOL
    + """

"""
    + _REC_FORMAT
)


ONE_STAGE_SYSTEM = (
    """\
You are a shopping assistant with a long memory. The user has talked with you in many earlier \
sessions; a few of them reveal what they like and dislike when buying things, most are about \
unrelated topics. Handle their current shopping request end to end: first find their relevant \
preferences in the past conversations, then find real catalog products that satisfy both the \
request and every preference.

Tools:
- mem_search(queries: list of strings, top_k: int) returns the best-matching past turns (session \
id, turn index, date, score, a snippet). Snippets are leads, not proof.
- mem_view(session_ids: list of strings) returns whole sessions to confirm what the user said.
"""
    + _PRODUCT_TOOLS_DOC
    + """

Use only preferences the user actually expressed, and confirm each product's attributes with \
product_view before recommending it. Recommend only ids returned by the tools, exactly as many \
products as the user asked for.

"""
    + _BUNDLE
    + """

"""
    + _PROTOCOL
    + """

Final answer format, all inside <answer> … </answer>:
1. first, the preferences you relied on as a fenced JSON block:
```json
{"preferences": [{"attribute": "<e.g. colour>", "value": "<what the user prefers>", "polarity": \
"want" or "avoid", "slot": <index of the requested product, 0 for the first>}]}
```
2. then a short Markdown report explaining how each recommended product meets the request and \
each preference, marking each recommended product exactly once as @REC::<product_id>@."""
)

ORACLE_SYSTEM = (
    """\
You are the shopping specialist of a shopping assistant. You receive the user's request together \
with the past conversations in which they talked about their tastes. Work out their preferences \
from those conversations, then find real catalog products that satisfy both the request and \
every preference.

Tools:
"""
    + _PRODUCT_TOOLS_DOC
    + """

Open candidates with product_view and check each preference against the real attributes before \
recommending. Recommend only ids returned by the tools, exactly as many products as the user \
asked for.

"""
    + _BUNDLE
    + """

"""
    + _PROTOCOL
    + """

"""
    + _REC_FORMAT
)


def one_stage_system(max_turns: int) -> str:
    return ONE_STAGE_SYSTEM.replace("{max_turns}", str(max_turns))


def oracle_system(max_turns: int) -> str:
    return ORACLE_SYSTEM.replace("{max_turns}", str(max_turns))


def deal_terms(task: Task) -> str:
    """The voucher and budget of an add-on task as plain lines ('' when the task has neither)."""
    cur = f" {task.currency}" if task.currency else ""
    lines = []
    if task.n_products > 1:
        lines.append(f"Number of products to recommend: {task.n_products}")
    if task.voucher is not None:
        v = task.voucher
        lines.append(
            f"Voucher: {v.discount:g}{cur} off when spending at least {v.min_spend:g}{cur} in shop "
            f"{v.shop_id} (every product must come from that shop)"
        )
    if task.budget is not None:
        lines.append(f"Budget: at most {task.budget:g}{cur} to pay after the voucher")
    return "\n".join(lines)


def _request(task: Task) -> str:
    terms = deal_terms(task)
    return f"Shopping request: {task.instruction}" + (f"\n{terms}" if terms else "")


def one_stage_user(task: Task) -> str:
    return f"{_request(task)}\n\nFind my relevant preferences in our past conversations, then recommend."


def oracle_user(task: Task, sessions: list[Session]) -> str:
    """The request plus the full text of the given (gold preference) sessions, oldest first."""
    blocks = []
    for s in sessions:
        turns = "\n".join(f"{t.role}: {t.content}" for t in s.turns)
        blocks.append(f"[session {s.session_id}{', ' + s.date if s.date else ''}]\n{turns}")
    body = "\n\n".join(blocks) if blocks else "(none)"
    return f"{_request(task)}\n\nPast conversations where I talked about my tastes:\n\n{body}"


def stage1_system(max_turns: int) -> str:
    return STAGE1_SYSTEM.replace("{max_turns}", str(max_turns))


def stage2_system(max_turns: int) -> str:
    return STAGE2_SYSTEM.replace("{max_turns}", str(max_turns))


def stage1_user(task: Task) -> str:
    return f"{_request(task)}\n\nIdentify my relevant preferences from our past conversations."


def stage2_user(task: Task, preferences: list[Preference] | None, feedback: str | None = None) -> str:
    """The stage-2 opening message: the request plus the preferences stage 1 handed over."""
    if preferences:
        prefs = json.dumps(
            {"preferences": [p.model_dump(exclude_defaults=False) for p in preferences]}, ensure_ascii=False
        )
        body = f"Preferences identified from my past conversations:\n{prefs}"
    else:
        body = "No preferences could be identified from my past conversations."
    text = f"{_request(task)}\n\n{body}"
    if feedback:
        text += f"\n\nMy feedback on these preferences: {feedback}"
    return text


NO_ACTION_FEEDBACK = (
    "Your message contained neither a tool call nor a final answer. Call a tool with "
    '<tool_call>{"name": …, "arguments": {…}}</tool_call> or finish with <answer>…</answer>.'
)


def no_action_feedback(errors: list[str], max_errors: int = 5) -> str:
    """:data:`NO_ACTION_FEEDBACK`, followed by the first ``max_errors`` format problems found."""
    if not errors:
        return NO_ACTION_FEEDBACK
    shown = "; ".join(errors[:max_errors])
    more = f" (and {len(errors) - max_errors} more)" if len(errors) > max_errors else ""
    return f"{NO_ACTION_FEEDBACK} Problems found: {shown}{more}."
