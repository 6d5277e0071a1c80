"""The action protocol: parse one assistant turn (Qwen/Hermes convention, docs/architecture.md, the environment).

An assistant turn is text of the form::

    <think> … reasoning … </think>
    <tool_call>{"name": "product_search", "arguments": {"query": "navy shirt"}}</tool_call>
    <tool_call>{"name": "product_view", "arguments": {"product_ids": ["a:1"]}}</tool_call>

or, to finish a stage::

    <think> … </think>
    <answer> … </answer>

Stage 2's answer carries ``@REC::product_id@`` markers (:func:`extract_rec_ids`); stage 1's answer
is a JSON list of preferences (:func:`parse_preferences`). Tool calls may also arrive in the
structured ``tool_calls`` field of an OpenAI-compatible server (:class:`StructuredToolCall`).

Every function here is total: it never raises, whatever the input (malformed JSON, unclosed or
nested tags, binary junk, megabytes of text). Problems are reported as human-readable strings that
the environment shows to the agent and that feed the format reward (Eq. 11,
:func:`format_flags`).

Tags are matched exactly and case-sensitively (``<think>``, ``</think>``, ``<tool_call>``,
``</tool_call>``, ``<answer>``, ``</answer>``): they are the protocol, not prose.

The protocol of one turn (each violation is an error message; :func:`parse_action` has the details):
at most one thinking block, balanced; tool-call blocks read by JSON object boundary
(``raw_decode``, so ``</tool_call>`` inside a JSON string does not end a block) as strict JSON (no
``NaN``/``Infinity``, also in ``arguments`` strings and in the stage-1 preference JSON); exactly one
``<answer>`` block to end a stage (a second one is an error; the first is the answer); no tool
call after the answer.

Decoded values are bounded and cleaned (:class:`ArgumentLimits`, :func:`clean_text`): every string
the parser returns (tool names, argument keys and values after JSON decoding, the answer, the
thinking, stage-1 preference fields) has lone UTF-16 surrogates (``"\\ud800"`` escapes, or a real
lone surrogate in a Python ``str``) replaced by U+FFFD, so the next request's JSON encoding and the
result writer never fail; tool-call arguments deeper, larger or with more items than the limits are
not returned as arguments (the call is kept with empty arguments and listed in
``ParsedAction.rejected``, so the environment answers it with an error observation naming the limit
instead of running it).

Tool calls that appear only in the separate reasoning channel (``reasoning=`` of
:func:`parse_action`: ``reasoning_content`` / ``reasoning`` of an OpenAI-compatible reply) are not
calls: they are counted in ``ParsedAction.calls_in_reasoning`` and reported as the format error
``tool_call_in_reasoning`` (the turn's ``tool_json_ok`` is False).
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.envs.answers import MAX_PREFERENCES, REC_ID_CHARS, extract_rec_ids, parse_preferences
from shopping_companion.envs.protocol_values import (
    STRICT_DECODER,
    ArgumentLimits,
    as_text,
    bound_and_clean,
    clean_text,
    json_error,
    snippet,
    strict_json_loads,
)
from shopping_companion.llm.base import StructuredToolCall
from shopping_companion.types import FormatFlags, ToolCall

__all__ = [
    "ArgumentLimits",
    "ParsedAction",
    "clean_text",
    "REASONING_CALL_ERROR",
    "parse_action",
    "extract_rec_ids",
    "parse_preferences",
    "format_flags",
    "format_tool_call",
    "REC_ID_CHARS",
    "split_thinking",
    "MAX_PREFERENCES",
    "bound_and_clean",
    "strict_json_loads",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

_THINK_TAG = re.compile(r"</?think>")
_ANSWER_TAG = re.compile(r"</?answer>")
_TOOL_TAG = re.compile(r"</?tool_call>")

#: The prefix of the format error for tool calls found only in the reasoning channel.
REASONING_CALL_ERROR = "tool_call_in_reasoning"


class ParsedAction(BaseModel):
    """The parse of one assistant turn.

    ``think_ok``: thinking tags are well-formed (see :func:`parse_action`).
    ``thinking``: the text inside the thinking span(s), joined by blank lines.
    ``tool_calls``: every successfully parsed call, text blocks and structured calls.
    ``tool_errors``: one message per tool-call block (or structured call) that failed to parse.
    ``tool_error_ids``: parallel to ``tool_errors``: the id the error's tool response carries (a
    structured call's id as in ``structured_ids``; a malformed text block's generated id).
    ``structured_ids``: the id of each structured call of the turn, in the server's order (parallel
    to ``structured``, parsed or not); the assistant message's ``tool_calls`` carry these ids.
    Every id of a turn — ``structured_ids``, ``tool_calls``' ``call_id`` and ``tool_error_ids`` —
    is unique within it (rule 2 of :func:`parse_action`).
    ``tool_json_ok``: ``not tool_errors``.
    ``answer``: the text inside the FIRST complete ``<answer>…</answer>`` outside thinking
    (stripped): the first answer ends the stage, so what follows it is "after the answer".
    ``has_answer``: ``answer is not None``.
    ``n_answers``: the number of complete answer blocks (exactly one is the protocol; more is an
    error in ``errors``).
    ``n_think_blocks``: the number of thinking spans (at most one is the protocol).
    ``tool_after_answer``: a tool call (text block, well-formed or not, or a structured call) comes
    after the start of the first answer block (see :func:`parse_action`); an error in ``errors``.
    ``errors``: every problem found (thinking, tool calls, answer, order, reasoning), in that order.
    ``rejected``: ``call_id -> error`` for calls in ``tool_calls`` whose decoded arguments broke
    the :class:`ArgumentLimits` (their ``arguments`` are ``{}``): not to be run, answered with the
    error. Not a format error (the JSON was valid), like a tool's own argument validation.
    ``calls_in_reasoning``: ``<tool_call>`` blocks found in the separate reasoning text when the
    content has neither a tool call nor an answer (they are not run; an error in ``errors``
    starting with :data:`REASONING_CALL_ERROR`; 0 otherwise).
    """

    model_config = ConfigDict(extra="forbid")
    think_ok: bool = True
    thinking: str = ""
    n_think_blocks: int = 0
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_errors: list[str] = Field(default_factory=list)
    tool_error_ids: list[str] = Field(default_factory=list)
    structured_ids: list[str] = Field(default_factory=list)
    tool_json_ok: bool = True
    tool_after_answer: bool = False
    answer: str | None = None
    has_answer: bool = False
    n_answers: int = 0
    errors: list[str] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict)
    calls_in_reasoning: int = 0


# --------------------------------------------------------------------------- helpers


_WS = re.compile(r"\s*")
_FENCE_OPEN = re.compile(r"```[a-zA-Z]*\s*")


def _json_block_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of the JSON values of well-formed ``<tool_call>`` blocks (read by
    :func:`_read_block`): a ``<think>`` or ``</think>`` there lies inside a JSON string, so it is
    text of an argument, not a thinking tag."""
    spans: list[tuple[int, int]] = []
    if TOOL_OPEN not in text:
        return spans
    pos = 0
    while True:
        i = text.find(TOOL_OPEN, pos)
        if i < 0:
            return spans
        start = i + len(TOOL_OPEN)
        block = _read_block(text, start)
        if block is None:
            pos = start
            continue
        spans.append((start, block[0]))
        pos = block[0]


def split_thinking(text: str) -> tuple[bool, list[str], str, list[str]]:
    """Separate thinking spans from the rest.

    Returns ``(think_ok, spans, outside_text, errors)``; ``len(spans)`` is the number of thinking
    blocks.

    Thinking tags inside the JSON value of a well-formed ``<tool_call>`` block are argument text
    and are ignored. Rules: a ``</think>`` that is the first thinking tag of the turn and has no
    opener is accepted
    (Qwen3 thinking templates put ``<think>`` in the prompt): the text before it is thinking.
    Any other ``</think>`` without an opener is a stray tag (error, the tag is dropped). A
    ``<think>`` inside an open span is nesting (error; spans are delimited by depth counting, so
    the outermost span is thinking). A span still open at the end is unclosed (error; the rest of
    the turn is thinking, so nothing after it is executed). More than one thinking span in a turn
    (two ``<think>`` blocks, or a leading ``</think>`` and a later block) is an error: the protocol
    is at most one thinking block per turn.
    """
    errors: list[str] = []
    spans: list[str] = []
    outside: list[str] = []
    tags = list(_THINK_TAG.finditer(text))
    if not tags:
        return True, spans, text, errors
    inside = _json_block_spans(text)
    if inside:
        starts = [a for a, _ in inside]

        def in_json(i: int) -> bool:
            k = bisect.bisect_right(starts, i) - 1
            return k >= 0 and i < inside[k][1]

        tags = [m for m in tags if not in_json(m.start())]
        if not tags:
            return True, spans, text, errors
    pos = 0
    depth = 0
    span_start = 0
    first = True
    nested_reported = False
    for m in tags:
        is_close = m.group(0) == THINK_CLOSE
        if is_close:
            if depth == 0:
                if first:
                    # Leading stray </think>: the opener was in the prompt.
                    spans.append(text[: m.start()])
                else:
                    errors.append(f"stray {THINK_CLOSE} without a matching {THINK_OPEN} at char {m.start()}")
                    outside.append(text[pos : m.start()])
                pos = m.end()
            else:
                depth -= 1
                if depth == 0:
                    spans.append(text[span_start : m.start()])
                    pos = m.end()
        else:
            if depth == 0:
                outside.append(text[pos : m.start()])
                span_start = m.end()
            elif not nested_reported:
                errors.append(f"nested {THINK_OPEN} at char {m.start()} (thinking blocks cannot nest)")
                nested_reported = True
            depth += 1
        first = False
    if depth > 0:
        errors.append(f"unclosed {THINK_OPEN} (no {THINK_CLOSE} before the end of the turn)")
        spans.append(text[span_start:])
    else:
        outside.append(text[pos:])
    if len(spans) > 1:
        errors.append(f"{len(spans)} thinking blocks in one turn (at most one {THINK_OPEN} block per turn)")
    return not errors, spans, "".join(outside), errors


def _decode_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments may be an object, a JSON string holding an object, or absent/null/empty (→ {})."""
    if raw is None:
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            val = strict_json_loads(raw)
        except (ValueError, RecursionError) as e:
            return None, f'"arguments" is a string but not valid JSON: {json_error(e)}'
        if isinstance(val, dict):
            return val, None
        return None, f'"arguments" must be a JSON object, got a string holding {type(val).__name__}'
    return None, f'"arguments" must be a JSON object, got {type(raw).__name__}'


def _call_from_obj(obj: Any) -> tuple[tuple[str, dict[str, Any]] | None, str | None]:
    """Validate one decoded call object ``{"name": str, "arguments": {...}}``.

    Unknown extra keys are ignored. ``"parameters"`` is accepted as an alias of ``"arguments"``
    (Llama convention), and ``{"function": {"name":…, "arguments":…}}`` (OpenAI shape) is unwrapped.
    """
    if not isinstance(obj, dict):
        return None, f"a tool call must be a JSON object, got {type(obj).__name__}"
    if "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if name is None:
        return None, 'missing "name"'
    if not isinstance(name, str) or not name.strip():
        return None, f'"name" must be a non-empty string, got {snippet(json.dumps(name, default=str))}'
    raw_args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    args, err = _decode_arguments(raw_args)
    if err is not None or args is None:
        return None, f"tool call {name.strip()!r}: {err}"
    return (name.strip(), args), None


def _calls_from_value(obj: Any) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
    """The calls of one decoded block value (a call object or a non-empty list of them)."""
    objs = obj if isinstance(obj, list) else [obj]
    if not objs:
        return [], "empty list in <tool_call>"
    calls: list[tuple[str, dict[str, Any]]] = []
    for o in objs:
        call, err = _call_from_obj(o)
        if err is not None or call is None:
            return [], f"bad <tool_call>: {err}"
        calls.append(call)
    return calls, None


def _parse_block(body: str) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
    """Parse the text between ``<tool_call>`` and a ``</tool_call>`` as one whole JSON value.

    Used for the error message of a block that :func:`_extract_tool_blocks` could not read by
    object boundary (the positions are then relative to the block's JSON text)."""
    s = body.strip()
    if s.startswith("```"):
        s = re.sub(r"^```[a-zA-Z]*\s*", "", s)
        s = re.sub(r"\s*```$", "", s)
    if not s:
        return [], "empty <tool_call> block"
    try:
        obj = strict_json_loads(s)
    except (ValueError, RecursionError) as e:
        return [], f"invalid JSON in <tool_call>: {json_error(e)}; got {snippet(s)!r}"
    return _calls_from_value(obj)


def _read_block(text: str, start: int) -> tuple[int, Any] | None:
    """Read one block by JSON object boundary from ``start`` (just after ``<tool_call>``).

    Skips whitespace and an optional Markdown fence opener, decodes one strict JSON value with
    ``raw_decode``, then requires (after whitespace and the fence's closing ```` ``` ````, if any)
    ``</tool_call>``. Returns ``(end, value)`` with ``end`` just after the closer, or None
    when the block cannot be read that way (invalid JSON, text after the value, no closer)."""
    n = len(text)
    p = _WS.match(text, start).end()  # type: ignore[union-attr]
    fenced = False
    if text.startswith("```", p):
        p = _FENCE_OPEN.match(text, p).end()  # type: ignore[union-attr]
        fenced = True
    if p >= n or text.startswith(TOOL_CLOSE, p):
        return None
    try:
        obj, e = STRICT_DECODER.raw_decode(text, p)
    except (ValueError, RecursionError):
        return None
    q = _WS.match(text, e).end()  # type: ignore[union-attr]
    if fenced and text.startswith("```", q):
        q = _WS.match(text, q + 3).end()  # type: ignore[union-attr]
    if not text.startswith(TOOL_CLOSE, q):
        return None
    return q + len(TOOL_CLOSE), obj


def _decoded_end(text: str, start: int) -> int:
    """Where the JSON object or list after ``start`` ends when it decodes (else ``start``): the
    search for the closer of a block that has text after its value starts there, so a
    ``</tool_call>`` inside a JSON string is not taken for the closer. (A bare string value is not
    trusted: an unterminated ``"`` would otherwise run into the following blocks.)"""
    p = _WS.match(text, start).end()  # type: ignore[union-attr]
    if text.startswith("```", p):
        p = _FENCE_OPEN.match(text, p).end()  # type: ignore[union-attr]
    if not text.startswith(("{", "["), p):
        return start
    try:
        return STRICT_DECODER.raw_decode(text, p)[1]
    except (ValueError, RecursionError):
        return start


def _extract_tool_blocks(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[int], list[str], list[int], str]:
    """Find every ``<tool_call>…</tool_call>`` block, by JSON object boundary.

    Returns ``(calls, call_pos, errors, block_pos, text_without_blocks)``: ``call_pos[k]`` and
    ``block_pos`` (one per opened block, good or bad) are offsets in ``text_without_blocks`` where
    the block was cut out, so the caller can tell what came before or after an answer block.

    A block is read by :func:`_read_block` (JSON value, then the closer); when that fails the block
    ends at the next ``</tool_call>`` (after the decodable JSON value, if any) and the error message
    comes from decoding the whole block text (:func:`_parse_block`)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    call_pos: list[int] = []
    errors: list[str] = []
    block_pos: list[int] = []
    rest: list[str] = []
    rest_len = 0
    pos = 0
    n = len(text)
    block = 0
    while pos < n:
        i = text.find(TOOL_OPEN, pos)
        j_stray = text.find(TOOL_CLOSE, pos)
        if j_stray != -1 and (i == -1 or j_stray < i):
            errors.append(f"stray {TOOL_CLOSE} without a matching {TOOL_OPEN}")
            rest.append(text[pos:j_stray])
            rest_len += j_stray - pos
            pos = j_stray + len(TOOL_CLOSE)
            continue
        if i == -1:
            rest.append(text[pos:])
            break
        rest.append(text[pos:i])
        rest_len += i - pos
        block += 1
        block_pos.append(rest_len)
        start = i + len(TOOL_OPEN)
        read = _read_block(text, start)
        if read is not None:
            end, obj = read
            got, err = _calls_from_value(obj)
            if err is not None:
                errors.append(f"tool-call block #{block}: {err}")
            calls.extend(got)
            call_pos.extend([rest_len] * len(got))
            pos = end
            continue
        j = text.find(TOOL_CLOSE, _decoded_end(text, start))
        if j == -1:
            errors.append(
                f"tool-call block #{block}: unclosed {TOOL_OPEN} (no {TOOL_CLOSE}); got {snippet(text[start:])!r}"
            )
            pos = n
            break
        body = text[start:j]
        if TOOL_OPEN in body:
            errors.append(f"tool-call block #{block}: nested {TOOL_OPEN} inside a tool-call block")
        else:
            got, err = _parse_block(body)
            if err is not None:
                errors.append(f"tool-call block #{block}: {err}")
            calls.extend(got)  # (empty: _read_block reads every block that decodes as a whole)
            call_pos.extend([rest_len] * len(got))
        pos = j + len(TOOL_CLOSE)
    return calls, call_pos, errors, block_pos, "".join(rest)


def _extract_answer(text: str) -> tuple[list[tuple[int, str]], list[str]]:
    """Every complete ``<answer>…</answer>`` as ``(offset of its <answer> tag, stripped content)``;
    errors for unclosed/stray/nested tags and for more than one complete block."""
    errors: list[str] = []
    blocks: list[tuple[int, str]] = []
    open_at: int | None = None
    tag_at = 0
    for m in _ANSWER_TAG.finditer(text):
        if m.group(0) == ANSWER_OPEN:
            if open_at is not None:
                errors.append(f"nested {ANSWER_OPEN} (answer blocks cannot nest)")
                continue
            open_at = m.end()
            tag_at = m.start()
        else:
            if open_at is None:
                errors.append(f"stray {ANSWER_CLOSE} without a matching {ANSWER_OPEN}")
                continue
            blocks.append((tag_at, text[open_at : m.start()].strip()))
            open_at = None
    if open_at is not None:
        errors.append(f"unclosed {ANSWER_OPEN} (no {ANSWER_CLOSE} before the end of the turn)")
    if len(blocks) > 1:
        errors.append(
            f"{len(blocks)} {ANSWER_OPEN} blocks in one turn: exactly one answer block ends a stage "
            "(the first one was taken as the answer)"
        )
    return blocks, errors


# --------------------------------------------------------------------------- public API


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One text tool-call block of the protocol, ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``
    (compact JSON, non-ASCII kept): what :func:`parse_action` reads back as one call."""
    return TOOL_OPEN + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + TOOL_CLOSE


def parse_action(
    text: str,
    structured: list[StructuredToolCall] | None = None,
    call_id_prefix: str = "call",
    *,
    reasoning: str | None = None,
    limits: ArgumentLimits | None = None,
) -> ParsedAction:
    """Parse one assistant turn. Never raises.

    ``text``: the content; ``structured``: the server's parsed calls; ``reasoning``: the separate
    reasoning text, if any (rule 6); ``limits``: bounds on decoded arguments (rule 7; default
    :class:`ArgumentLimits`).

    1. **Thinking** (``think_ok``): every ``<think>`` is closed by a ``</think>``, no ``<think>``
       inside an open one, no stray ``</think>``. A single leading ``</think>`` with no opener
       (the first thinking tag of the turn) is accepted: Qwen3 thinking templates put ``<think>``
       in the prompt, so the text before it is thinking. No thinking tags at all is fine.
    2. **Tool calls**: every ``<tool_call>…</tool_call>`` block *outside* thinking holds a JSON
       object ``{"name": str, "arguments": {...}}`` (or a JSON list of them). A block is read by
       JSON object boundary: after ``<tool_call>`` (whitespace and an optional Markdown fence
       skipped) one JSON value is decoded (``json.JSONDecoder.raw_decode``) and ``</tool_call>``
       must follow it (whitespace and the fence's closing backticks allowed), so the text
       ``</tool_call>`` inside a JSON string argument does not cut the call. JSON is strict:
       ``NaN``, ``Infinity`` and ``-Infinity`` are invalid (also in an ``arguments`` string).
       ``arguments`` may be a JSON string holding an object (decoded), missing/null/"" (→ ``{}``);
       ``parameters`` is an alias, unknown keys are ignored. One error per failing block: invalid
       JSON (with line/column/char position, relative to the block's JSON text), text after the
       JSON value, missing ``"name"``, arguments not an object, nested or unclosed ``<tool_call>``,
       stray ``</tool_call>``. A block that fails contributes no call (a list block is
       all-or-nothing); it ends at the next ``</tool_call>`` after its decodable JSON value (or
       after the opener when nothing decodes).
       Structured calls come first; a text block identical (same name and arguments) to a
       structured call is dropped as its echo. **Ids** are given out here and nowhere else, unique
       within the turn: a structured call (parsed or not) keeps the server's ``id`` unless an
       earlier call of the turn has it (then ``f"{id}_{n}"``, n from 1); a call with an empty or
       missing id and a text call get ``f"{call_id_prefix}_{k}"``, k counting the calls of this
       turn from 0, a malformed structured call without an id and a malformed text block
       ``f"{call_id_prefix}-invalid{j}"``, j counting the errors; a generated id never takes an
       id the server gave another call of the turn (``_<n>`` is appended until it is free).
    3. **Answer**: the first complete ``<answer>…</answer>`` outside thinking and outside tool-call
       blocks (stripped). Unclosed, stray or nested answer tags are errors, and so is a second
       complete answer block (``n_answers`` > 1; ``answer`` stays the first: the first answer ends
       the stage).
    4. **Order**: a tool call after the answer is a protocol error (``tool_after_answer``, one
       message in ``errors``): a text block (parsed or not) that starts after the first answer
       block's ``<answer>`` tag (inside or after it), or a structured call in a turn whose text
       holds an answer, unless the structured call's text echo comes before the ``<answer>`` tag
       (an OpenAI-style message carries its ``tool_calls`` after its content; a server-side Hermes
       parser moves blocks that followed the answer there). Such calls stay in ``tool_calls``
       (recorded), but a turn with an answer ends the stage, so the environment runs none of them.
       Tool calls before the answer in an answer turn are not an error (they are not run either).
    5. **Thinking blocks**: at most one per turn (``n_think_blocks``); a second one makes
       ``think_ok`` False.
    6. **Reasoning channel**: ``<tool_call>`` blocks in ``reasoning`` are never calls. When the
       content holds no tool call (well-formed or not) and no answer, each such block is counted
       in ``calls_in_reasoning`` and one error starting with ``tool_call_in_reasoning`` says that
       calls must be written in the message content; :func:`format_flags` then sets
       ``tool_json_ok`` False (f_tc = 0 in Eq. 11). With a call or an answer in the content, calls
       written in the reasoning are just thoughts.
    7. **Bounds and cleaning**: every decoded string (names, argument keys and values) is cleaned
       (:func:`clean_text`); the content and reasoning text too. Arguments over ``limits``
       (:func:`bound_and_clean`) are replaced by ``{}`` and the call is listed in ``rejected``.
    """
    try:
        return _parse_action(text, structured, call_id_prefix, reasoning, limits)
    except Exception as e:  # pragma: no cover - defensive: the parser must be total
        msg = f"internal parser error: {type(e).__name__}: {snippet(str(e))}"
        cid = f"{call_id_prefix if isinstance(call_id_prefix, str) and call_id_prefix else 'call'}-invalid0"
        return ParsedAction(think_ok=False, tool_json_ok=False, tool_errors=[msg], tool_error_ids=[cid], errors=[msg])


def _parse_action(
    text: Any,
    structured: list[StructuredToolCall] | None,
    call_id_prefix: Any,
    reasoning: Any = None,
    limits: ArgumentLimits | None = None,
) -> ParsedAction:
    text = clean_text(as_text(text))
    prefix = clean_text(as_text(call_id_prefix)) or "call"
    think_ok, spans, outside, think_errors = split_thinking(text)
    raw_calls, raw_pos, tool_errors, block_pos, no_tools = _extract_tool_blocks(outside)
    # bound and clean decoded arguments: a call over a limit is kept with {} and its error
    text_calls: list[tuple[str, dict[str, Any]]] = []
    call_pos: list[int] = []
    text_rejected: list[str | None] = []
    for (name, args), cp in zip(raw_calls, raw_pos):
        good, bound_err = bound_and_clean(args, limits)
        text_calls.append((clean_text(name), good if good is not None else {}))
        text_rejected.append(bound_err)
        call_pos.append(cp)
    answers, answer_errors = _extract_answer(no_tools)
    answer = answers[0][1] if answers else None
    answer_at = answers[0][0] if answers else None
    n_text_errors = len(tool_errors)  # malformed text blocks come first in tool_errors
    error_ids: list[str | None] = [None] * n_text_errors
    # text blocks after the first answer's <answer> tag; structured calls unless echoed before it
    n_after = 0 if answer_at is None else sum(1 for b in block_pos if b > answer_at)
    echoes_before: list[tuple[str, str]] = []
    echoes_after: list[tuple[str, str]] = []
    if answer_at is not None and structured:
        for (name, args), cp in zip(text_calls, call_pos):
            (echoes_before if cp <= answer_at else echoes_after).append((name, _canon(args)))

    calls: list[ToolCall] = []
    call_errs: list[str | None] = []  # parallel to calls: the bound error, if any
    seen: list[tuple[str, str]] = []
    # who carries each id of the turn, in the order ids are given out (below):
    # ("call" | "error", index in calls | error_ids, the server's id or "", the id to generate)
    holders: list[tuple[str, int, str, str]] = []
    for k, sc in enumerate(structured or []):
        try:
            name = as_text(getattr(sc, "name", "")).strip()
            raw_args = getattr(sc, "arguments", None)
            sid = as_text(getattr(sc, "id", "")).strip()
        except Exception as e:  # pragma: no cover - defensive
            tool_errors.append(f"structured tool call #{k}: unreadable ({type(e).__name__})")
            error_ids.append(None)
            holders.append(("error", len(error_ids) - 1, "", f"{prefix}-invalid{len(error_ids) - 1}"))
            continue
        name, sid = clean_text(name), clean_text(sid)
        args, err = _decode_arguments(raw_args) if name else (None, None)
        bound_err: str | None = None
        if args is not None:
            good, bound_err = bound_and_clean(args, limits)
            args = good if good is not None else {}
        if answer_at is not None:  # where does this structured call sit relative to the answer?
            key_k = (name, _canon(args)) if args is not None else None
            if key_k is not None and key_k in echoes_before:
                echoes_before.remove(key_k)  # its text echo precedes the answer
            elif key_k is not None and key_k in echoes_after:
                echoes_after.remove(key_k)  # its text echo follows the answer (already counted)
            else:
                n_after += 1
        if not name or err is not None or args is None:
            tool_errors.append(
                f'structured tool call #{k}: missing "name"'
                if not name
                else f"structured tool call #{k} ({name!r}): {err}"
            )
            error_ids.append(None)
            holders.append(("error", len(error_ids) - 1, sid, f"{prefix}-invalid{len(error_ids) - 1}"))
            continue
        holders.append(("call", len(calls), sid, f"{prefix}_{len(calls)}"))
        calls.append(ToolCall(name=name, arguments=args, call_id=""))
        call_errs.append(bound_err)
        seen.append((name, _canon(args)))
    n_structured = len(holders)
    for (name, args), bound_err in zip(text_calls, text_rejected):
        key = (name, _canon(args))
        if key in seen:
            seen.remove(key)
            continue
        holders.append(("call", len(calls), "", f"{prefix}_{len(calls)}"))
        calls.append(ToolCall(name=name, arguments=args, call_id=""))
        call_errs.append(bound_err)
    holders += [("error", j, "", f"{prefix}-invalid{j}") for j in range(n_text_errors)]
    # Call ids, unique within the turn (the one place they are given out): structured calls in the
    # server's order keep the server's id unless an earlier call has it (then ``<id>_<n>``); calls
    # without one, text calls and malformed text blocks get a generated id that no server id of
    # the turn has.
    reserved = {sid for _, _, sid, _ in holders if sid}
    used: set[str] = set()
    final: list[str] = []
    for kind, i, sid, generated in holders:
        want = sid or generated
        cid, n = want, 0
        while cid in used or (cid != sid and cid in reserved):
            n += 1
            cid = f"{want}_{n}"
        used.add(cid)
        final.append(cid)
        if kind == "call":
            calls[i].call_id = cid
        else:
            error_ids[i] = cid
    structured_ids = final[:n_structured]
    rejected = {c.call_id: e for c, e in zip(calls, call_errs) if e is not None}

    order_errors: list[str] = []
    if n_after:
        order_errors.append(
            f"{n_after} tool call(s) after the {ANSWER_OPEN} block: an answer ends the stage, so "
            "nothing after it is run (put tool calls in a turn without an answer)"
        )
    thinking = "\n\n".join(s.strip() for s in spans if s.strip())
    n_reasoning = 0
    reasoning_errors: list[str] = []
    if reasoning is not None and not calls and not tool_errors and answer is None:
        n_reasoning = clean_text(as_text(reasoning)).count(TOOL_OPEN)
        if n_reasoning:
            reasoning_errors.append(
                f"{REASONING_CALL_ERROR}: {n_reasoning} tool call(s) were written in the reasoning "
                "(thinking) channel and were not run; write each call in the message content, after "
                f'the thinking, as {TOOL_OPEN}{{"name": …, "arguments": {{…}}}}{TOOL_CLOSE}'
            )
    return ParsedAction(
        think_ok=think_ok,
        thinking=thinking,
        n_think_blocks=len(spans),
        tool_calls=calls,
        tool_errors=tool_errors,
        tool_error_ids=error_ids,
        structured_ids=structured_ids,
        tool_json_ok=not tool_errors,
        tool_after_answer=n_after > 0,
        answer=answer,
        has_answer=answer is not None,
        n_answers=len(answers),
        errors=think_errors + tool_errors + answer_errors + order_errors + reasoning_errors,
        rejected=rejected,
        calls_in_reasoning=n_reasoning,
    )


def _canon(args: dict[str, Any]) -> str:
    try:
        return json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)
    except Exception:  # pragma: no cover - defensive
        return repr(args)


def format_flags(parsed: ParsedAction) -> FormatFlags:
    """The per-turn protocol flags of Eq. 11 (stored on ``Step.format``).

    ``tool_json_ok`` is the turn's tool-call verdict: every block parsed (``parsed.tool_json_ok``)
    AND no tool call after the answer (``tool_after_answer`` is also stored on its own) AND no
    call written only in the reasoning channel (``calls_in_reasoning``; the error
    ``tool_call_in_reasoning…`` is in ``errors``)."""
    return FormatFlags(
        think_ok=parsed.think_ok,
        tool_json_ok=parsed.tool_json_ok and not parsed.tool_after_answer and not parsed.calls_in_reasoning,
        has_answer=parsed.has_answer,
        n_answers=parsed.n_answers,
        n_think_blocks=parsed.n_think_blocks,
        tool_after_answer=parsed.tool_after_answer,
        errors=list(parsed.errors),
    )
