"""The action protocol: parse one assistant turn (Qwen/Hermes convention, DESIGN.md §6).

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
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.llm.base import StructuredToolCall
from shopping_companion.types import FormatFlags, Preference, ToolCall

__all__ = [
    "ParsedAction",
    "parse_action",
    "extract_rec_ids",
    "parse_preferences",
    "format_flags",
    "REC_ID_CHARS",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

#: Characters allowed in a product id inside a ``@REC::…@`` marker.
REC_ID_CHARS = r"A-Za-z0-9:_.\-"
_REC_OK = re.compile(r"@REC::([" + REC_ID_CHARS + r"]+)@")
_REC_START = re.compile(r"@rec", re.IGNORECASE)

_THINK_TAG = re.compile(r"</?think>")
_ANSWER_TAG = re.compile(r"</?answer>")
_TOOL_TAG = re.compile(r"</?tool_call>")

_MAX_SNIPPET = 80


class ParsedAction(BaseModel):
    """The parse of one assistant turn.

    ``think_ok``: thinking tags are well-formed (see :func:`parse_action`).
    ``thinking``: the text inside the thinking span(s), joined by blank lines.
    ``tool_calls``: every successfully parsed call, text blocks and structured calls.
    ``tool_errors``: one message per tool-call block (or structured call) that failed to parse.
    ``tool_error_ids``: parallel to ``tool_errors``: the server's call id when the error is about a
    structured call (its tool response must carry that id), else None (a text block).
    ``tool_json_ok``: ``not tool_errors``.
    ``answer``: the text inside the last complete ``<answer>…</answer>`` outside thinking (stripped).
    ``has_answer``: ``answer is not None``.
    ``errors``: every problem found (thinking, tool calls, answer), in that order.
    """

    model_config = ConfigDict(extra="forbid")
    think_ok: bool = True
    thinking: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_errors: list[str] = Field(default_factory=list)
    tool_error_ids: list[str | None] = Field(default_factory=list)
    tool_json_ok: bool = True
    answer: str | None = None
    has_answer: bool = False
    errors: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- helpers


def _snippet(s: str, n: int = _MAX_SNIPPET) -> str:
    s = s.strip().replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + "…"


def _as_text(text: Any) -> str:
    """Coerce any input to ``str`` (bytes are decoded with replacement; None is empty)."""
    if text is None:
        return ""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text).decode("utf-8", errors="replace")
    try:
        return str(text)
    except Exception:  # pragma: no cover - pathological __str__
        return ""


def _split_thinking(text: str) -> tuple[bool, list[str], str, list[str]]:
    """Separate thinking spans from the rest.

    Returns ``(think_ok, spans, outside_text, errors)``.

    Rules: a ``</think>`` that is the first thinking tag of the turn and has no opener is accepted
    (Qwen3 thinking templates put ``<think>`` in the prompt): the text before it is thinking.
    Any other ``</think>`` without an opener is a stray tag (error, the tag is dropped). A
    ``<think>`` inside an open span is nesting (error; spans are delimited by depth counting, so
    the outermost span is thinking). A span still open at the end is unclosed (error; the rest of
    the turn is thinking, so nothing after it is executed).
    """
    errors: list[str] = []
    spans: list[str] = []
    outside: list[str] = []
    tags = list(_THINK_TAG.finditer(text))
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
            val = json.loads(raw)
        except json.JSONDecodeError as e:
            return None, f'"arguments" is a string but not valid JSON: {e.msg} at line {e.lineno} column {e.colno} (char {e.pos})'
        except (ValueError, RecursionError) as e:
            return None, f'"arguments" is a string but not valid JSON: {e}'
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
        return None, f'"name" must be a non-empty string, got {_snippet(json.dumps(name, default=str))}'
    raw_args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    args, err = _decode_arguments(raw_args)
    if err is not None or args is None:
        return None, f"tool call {name.strip()!r}: {err}"
    return (name.strip(), args), None


def _parse_block(body: str) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
    """Parse the JSON inside one ``<tool_call>`` block (a call object or a list of them)."""
    s = body.strip()
    if s.startswith("```"):
        s = re.sub(r"^```[a-zA-Z]*\s*", "", s)
        s = re.sub(r"\s*```$", "", s)
    if not s:
        return [], "empty <tool_call> block"
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as e:
        return [], (
            f"invalid JSON in <tool_call>: {e.msg} at line {e.lineno} column {e.colno} (char {e.pos}); "
            f"got {_snippet(s)!r}"
        )
    except (ValueError, RecursionError) as e:
        return [], f"invalid JSON in <tool_call>: {e}"
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


def _extract_tool_blocks(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str], str]:
    """Find every ``<tool_call>…</tool_call>`` block. Returns (calls, errors, text_without_blocks)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    errors: list[str] = []
    rest: list[str] = []
    pos = 0
    n = len(text)
    block = 0
    while pos < n:
        i = text.find(TOOL_OPEN, pos)
        j_stray = text.find(TOOL_CLOSE, pos)
        if j_stray != -1 and (i == -1 or j_stray < i):
            errors.append(f"stray {TOOL_CLOSE} without a matching {TOOL_OPEN}")
            rest.append(text[pos:j_stray])
            pos = j_stray + len(TOOL_CLOSE)
            continue
        if i == -1:
            rest.append(text[pos:])
            break
        rest.append(text[pos:i])
        block += 1
        start = i + len(TOOL_OPEN)
        j = text.find(TOOL_CLOSE, start)
        if j == -1:
            errors.append(f"tool-call block #{block}: unclosed {TOOL_OPEN} (no {TOOL_CLOSE}); got {_snippet(text[start:])!r}")
            pos = n
            break
        body = text[start:j]
        if TOOL_OPEN in body:
            errors.append(f"tool-call block #{block}: nested {TOOL_OPEN} inside a tool-call block")
        else:
            got, err = _parse_block(body)
            if err is not None:
                errors.append(f"tool-call block #{block}: {err}")
            calls.extend(got)
        pos = j + len(TOOL_CLOSE)
    return calls, errors, "".join(rest)


def _extract_answer(text: str) -> tuple[str | None, list[str]]:
    """The content of the last complete ``<answer>…</answer>``; errors for unclosed/stray/nested."""
    errors: list[str] = []
    answer: str | None = None
    open_at: int | None = None
    for m in _ANSWER_TAG.finditer(text):
        if m.group(0) == ANSWER_OPEN:
            if open_at is not None:
                errors.append(f"nested {ANSWER_OPEN} (answer blocks cannot nest)")
                continue
            open_at = m.end()
        else:
            if open_at is None:
                errors.append(f"stray {ANSWER_CLOSE} without a matching {ANSWER_OPEN}")
                continue
            answer = text[open_at : m.start()].strip()
            open_at = None
    if open_at is not None:
        errors.append(f"unclosed {ANSWER_OPEN} (no {ANSWER_CLOSE} before the end of the turn)")
    return answer, errors


# --------------------------------------------------------------------------- public API


def parse_action(
    text: str,
    structured: list[StructuredToolCall] | None = None,
    call_id_prefix: str = "call",
) -> ParsedAction:
    """Parse one assistant turn. Never raises.

    1. **Thinking** (``think_ok``): every ``<think>`` is closed by a ``</think>``, no ``<think>``
       inside an open one, no stray ``</think>``. A single leading ``</think>`` with no opener
       (the first thinking tag of the turn) is accepted: Qwen3 thinking templates put ``<think>``
       in the prompt, so the text before it is thinking. No thinking tags at all is fine.
    2. **Tool calls**: every ``<tool_call>…</tool_call>`` block *outside* thinking holds a JSON
       object ``{"name": str, "arguments": {...}}`` (or a JSON list of them). ``arguments`` may be
       a JSON string holding an object (decoded), missing/null/"" (→ ``{}``); ``parameters`` is an
       alias, unknown keys are ignored, a Markdown fence inside the block is tolerated. One error per
       failing block: invalid JSON (with line/column/char position), missing ``"name"``, arguments
       not an object, nested or unclosed ``<tool_call>``, stray ``</tool_call>``. A block that
       fails contributes no call (a list block is all-or-nothing).
       Structured calls come first, keeping the server's ``id``; a text block identical (same name
       and arguments) to a structured call is dropped as its echo. Calls without an id get
       ``f"{call_id_prefix}_{k}"``, k counting the calls of this turn from 0.
    3. **Answer**: the last complete ``<answer>…</answer>`` outside thinking and outside tool-call
       blocks (stripped). Unclosed, stray or nested answer tags are errors.
    """
    try:
        return _parse_action(text, structured, call_id_prefix)
    except Exception as e:  # pragma: no cover - defensive: the parser must be total
        msg = f"internal parser error: {type(e).__name__}: {_snippet(str(e))}"
        return ParsedAction(
            think_ok=False, tool_json_ok=False, tool_errors=[msg], tool_error_ids=[None], errors=[msg]
        )


def _parse_action(
    text: Any, structured: list[StructuredToolCall] | None, call_id_prefix: Any
) -> ParsedAction:
    text = _as_text(text)
    prefix = _as_text(call_id_prefix) or "call"
    think_ok, spans, outside, think_errors = _split_thinking(text)
    text_calls, tool_errors, no_tools = _extract_tool_blocks(outside)
    answer, answer_errors = _extract_answer(no_tools)
    error_ids: list[str | None] = [None] * len(tool_errors)

    calls: list[ToolCall] = []
    seen: list[tuple[str, str]] = []
    for k, sc in enumerate(structured or []):
        try:
            name = _as_text(getattr(sc, "name", "")).strip()
            raw_args = getattr(sc, "arguments", None)
            sid = _as_text(getattr(sc, "id", "")).strip()
        except Exception as e:  # pragma: no cover - defensive
            tool_errors.append(f"structured tool call #{k}: unreadable ({type(e).__name__})")
            error_ids.append(None)
            continue
        if not name:
            tool_errors.append(f'structured tool call #{k}: missing "name"')
            error_ids.append(sid or None)
            continue
        args, err = _decode_arguments(raw_args)
        if err is not None or args is None:
            tool_errors.append(f"structured tool call #{k} ({name!r}): {err}")
            error_ids.append(sid or None)
            continue
        cid = sid or f"{prefix}_{len(calls)}"
        calls.append(ToolCall(name=name, arguments=args, call_id=cid))
        seen.append((name, _canon(args)))
    for name, args in text_calls:
        key = (name, _canon(args))
        if key in seen:
            seen.remove(key)
            continue
        calls.append(ToolCall(name=name, arguments=args, call_id=f"{prefix}_{len(calls)}"))
    # make call ids unique within the turn
    used: set[str] = set()
    for c in calls:
        if c.call_id in used:
            base, n = c.call_id, 1
            while f"{base}_{n}" in used:
                n += 1
            c.call_id = f"{base}_{n}"
        used.add(c.call_id)

    thinking = "\n\n".join(s.strip() for s in spans if s.strip())
    return ParsedAction(
        think_ok=think_ok,
        thinking=thinking,
        tool_calls=calls,
        tool_errors=tool_errors,
        tool_error_ids=error_ids,
        tool_json_ok=not tool_errors,
        answer=answer,
        has_answer=answer is not None,
        errors=think_errors + tool_errors + answer_errors,
    )


def _canon(args: dict[str, Any]) -> str:
    try:
        return json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)
    except Exception:  # pragma: no cover - defensive
        return repr(args)


def extract_rec_ids(answer: str | None) -> tuple[list[str], list[str]]:
    """Product ids in ``@REC::product_id@`` markers, and malformed markers. Never raises.

    A well-formed marker is ``@REC::`` + one or more of ``A-Z a-z 0-9 : _ . -`` + ``@``. Every
    other occurrence of ``@REC`` (any case) is malformed, e.g. ``@REC::@`` (empty id), ``@REC:id@``
    (single colon), ``@rec::id@`` (lower case), ``@REC::two words@`` or an unterminated
    ``@REC::id``; it is reported as the marker text up to its closing ``@`` (or 40 characters).
    Ids are deduplicated preserving first-occurrence order.
    """
    try:
        text = _as_text(answer)
        ids: list[str] = []
        malformed: list[str] = []
        for m in _REC_START.finditer(text):
            ok = _REC_OK.match(text, m.start())
            if ok is not None:
                pid = ok.group(1)
                if pid not in ids:
                    ids.append(pid)
                continue
            end = text.find("@", m.end())
            stop = min(end + 1 if end != -1 else len(text), m.start() + 40)
            malformed.append(text[m.start() : stop])
        return ids, malformed
    except Exception as e:  # pragma: no cover - defensive
        return [], [f"internal error: {type(e).__name__}"]


_POLARITY = {
    "want": "want",
    "wants": "want",
    "like": "want",
    "likes": "want",
    "prefer": "want",
    "prefers": "want",
    "positive": "want",
    "+": "want",
    "yes": "want",
    "avoid": "avoid",
    "avoids": "avoid",
    "dislike": "avoid",
    "dislikes": "avoid",
    "negative": "avoid",
    "not": "avoid",
    "no": "avoid",
    "-": "avoid",
}


def _scalar_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float, str)):
        s = str(v).strip()
        return s or None
    return None


def _json_candidates(s: str) -> list[str]:
    """The texts to try decoding: a fenced block's content, the whole text, the outermost {...}/[...]."""
    out: list[str] = []
    m = re.search(r"```[a-zA-Z]*\s*\n?(.*?)```", s, re.DOTALL)
    if m:
        out.append(m.group(1).strip())
    out.append(s.strip())
    for o, c in ("{}", "[]"):
        i, j = s.find(o), s.rfind(c)
        if i != -1 and j > i:
            out.append(s[i : j + 1])
    return out


def parse_preferences(answer: str | None) -> tuple[list[Preference], str | None]:
    """Parse a stage-1 answer into preferences. Returns ``(prefs, None)`` or ``([], error)``.

    The answer is JSON, optionally inside a Markdown ```json fence or surrounded by prose (the
    first fenced block, else the whole text, else the outermost ``{…}`` / ``[…]`` is decoded).
    Accepted shapes:

    - ``{"preferences": [item, ...]}`` or a bare list ``[item, ...]`` where an item is
      ``{"attribute": str, "value": str | number | list, "polarity"?: "want"|"avoid", "slot"?: int}``
      (``key``/``name`` are aliases of ``attribute``; ``product``/``product_index`` of ``slot``);
    - a flat object ``{"colour": "navy", "size": ["M", "L"]}`` (nested objects are flattened
      one level: ``{"shirt": {"colour": "navy"}}`` → colour=navy).

    A list value yields one preference per element. Polarity words: want/like/prefer/positive →
    ``want``; avoid/dislike/negative/not/no → ``avoid``; missing → ``want``; anything else makes the
    item invalid. Items without attribute or value are skipped; if every item of a non-empty list is
    invalid the whole answer is invalid. ``{"preferences": []}`` is valid and empty.
    """
    try:
        return _parse_preferences(answer)
    except Exception as e:  # pragma: no cover - defensive
        return [], f"internal error while parsing preferences: {type(e).__name__}"


def _parse_preferences(answer: Any) -> tuple[list[Preference], str | None]:
    text = _as_text(answer)
    if not text.strip():
        return [], "empty answer: expected a JSON list of preferences"
    obj: Any = None
    last_err = "no JSON found"
    for cand in _json_candidates(text):
        try:
            obj = json.loads(cand)
            break
        except json.JSONDecodeError as e:
            last_err = f"{e.msg} at line {e.lineno} column {e.colno} (char {e.pos})"
        except (ValueError, RecursionError) as e:
            last_err = str(e)
    else:
        return [], f"answer is not valid JSON: {last_err}"

    items: list[Any]
    if isinstance(obj, dict) and "preferences" in obj:
        inner = obj["preferences"]
        if isinstance(inner, list):
            items = inner
        elif isinstance(inner, dict):
            items = _flat_items(inner)
        else:
            return [], f'"preferences" must be a list, got {type(inner).__name__}'
    elif isinstance(obj, list):
        items = obj
    elif isinstance(obj, dict):
        items = _flat_items(obj)
    else:
        return [], f"answer JSON must be an object or a list, got {type(obj).__name__}"

    prefs: list[Preference] = []
    problems: list[str] = []
    for k, it in enumerate(items):
        got, err = _item_prefs(it)
        if err:
            problems.append(f"item {k}: {err}")
        prefs.extend(got)
    if items and not prefs:
        return [], "no valid preference in the answer (" + "; ".join(problems[:3]) + ")"
    return prefs, None


def _flat_items(d: dict[str, Any]) -> list[Any]:
    items: list[Any] = []
    for k, v in d.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                items.append({"attribute": k2, "value": v2})
        else:
            items.append({"attribute": k, "value": v})
    return items


def _item_prefs(it: Any) -> tuple[list[Preference], str | None]:
    if not isinstance(it, dict):
        return [], f"expected an object, got {type(it).__name__}"
    attr = None
    for key in ("attribute", "key", "name"):
        attr = _scalar_text(it.get(key))
        if attr:
            break
    if not attr:
        return [], 'missing "attribute"'
    raw_val = it.get("value", it.get("values"))
    vals = raw_val if isinstance(raw_val, list) else [raw_val]
    texts = [t for t in (_scalar_text(v) for v in vals) if t]
    if not texts:
        return [], f'attribute {attr!r}: missing or empty "value"'
    pol_raw = it.get("polarity")
    if pol_raw is None:
        polarity = "want"
    else:
        polarity = _POLARITY.get(str(pol_raw).strip().lower(), "")
        if not polarity:
            return [], f"attribute {attr!r}: unknown polarity {_snippet(str(pol_raw))!r}"
    slot_raw = it.get("slot", it.get("product_index", it.get("product")))
    slot = 0
    if slot_raw is not None:
        try:
            slot = int(slot_raw)
        except (TypeError, ValueError):
            return [], f"attribute {attr!r}: slot must be an integer"
        if slot < 0:
            return [], f"attribute {attr!r}: slot must be >= 0"
    return [Preference(slot=slot, attribute=attr, value=t, polarity=polarity) for t in texts], None  # type: ignore[arg-type]


def format_flags(parsed: ParsedAction) -> FormatFlags:
    """The per-turn protocol flags of Eq. 11 (stored on ``Step.format``)."""
    return FormatFlags(
        think_ok=parsed.think_ok,
        tool_json_ok=parsed.tool_json_ok,
        has_answer=parsed.has_answer,
        errors=list(parsed.errors),
    )
