"""The two stage answers of the action protocol (:mod:`~shopping_companion.envs.parsing`): stage 2's
``@REC::product_id@`` markers (:func:`extract_rec_ids`) and stage 1's JSON list of preferences
(:func:`parse_preferences`). Both are total: problems come back as messages, never as exceptions.
"""

from __future__ import annotations

import re
from typing import Any

from shopping_companion.envs.protocol_values import as_text, clean_text, json_error, snippet, strict_json_loads
from shopping_companion.types import Preference

__all__ = ["MAX_PREFERENCES", "REC_ID_CHARS", "extract_rec_ids", "parse_preferences"]

#: Characters allowed in a product id inside a ``@REC::…@`` marker.
REC_ID_CHARS = r"A-Za-z0-9:_.\-"
_REC_OK = re.compile(r"@REC::([" + REC_ID_CHARS + r"]+)@")
_REC_START = re.compile(r"@rec", re.IGNORECASE)


def extract_rec_ids(answer: str | None) -> tuple[list[str], list[str]]:
    """Product ids in ``@REC::product_id@`` markers, and malformed markers. Never raises.

    A well-formed marker is ``@REC::`` + one or more of ``A-Z a-z 0-9 : _ . -`` + ``@``. Every
    other occurrence of ``@REC`` (any case) is malformed, e.g. ``@REC::@`` (empty id), ``@REC:id@``
    (single colon), ``@rec::id@`` (lower case), ``@REC::two words@`` or an unterminated
    ``@REC::id``; it is reported as the marker text up to its closing ``@`` (or 40 characters).
    Ids are deduplicated preserving first-occurrence order.
    """
    try:
        text = as_text(answer)
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
        s = clean_text(str(v)).strip()
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


#: Most preferences a stage-1 answer may list (more makes the answer invalid).
MAX_PREFERENCES = 200


def parse_preferences(answer: str | None) -> tuple[list[Preference], str | None]:
    """Parse a stage-1 answer into preferences. Returns ``(prefs, None)`` or ``([], error)``.

    The answer is strict JSON (``NaN``/``Infinity`` are invalid), optionally inside a Markdown
    ```json fence or surrounded by prose (the first fenced block, else the whole text, else the
    outermost ``{…}`` / ``[…]`` is decoded).
    Accepted shapes:

    - ``{"preferences": [item, ...]}`` or a bare list ``[item, ...]`` where an item is
      ``{"attribute": str, "value": str | number | list, "polarity"?: "want"|"avoid", "slot"?: int}``
      (``key``/``name`` are aliases of ``attribute``; ``product``/``product_index`` of ``slot``);
    - a flat object ``{"colour": "navy", "size": ["M", "L"]}`` (nested objects are flattened
      one level: ``{"shirt": {"colour": "navy"}}`` → colour=navy).

    A list value yields one preference per element. Polarity words: want/like/prefer/positive →
    ``want``; avoid/dislike/negative/not/no → ``avoid``; missing → ``want``; anything else makes the
    item invalid. Items without attribute or value are skipped; if every item of a non-empty list is
    invalid the whole answer is invalid. ``{"preferences": []}`` is valid and empty. An answer
    with more than :data:`MAX_PREFERENCES` preferences (after list values are expanded) is invalid:
    no real user has that many, and judging them is quadratic in their number.
    """
    try:
        prefs, err = _parse_preferences(answer)
        if err is None and len(prefs) > MAX_PREFERENCES:
            return [], (
                f"{len(prefs)} preferences in the answer; at most {MAX_PREFERENCES} are read "
                "(list the user's preferences, not every possible value)"
            )
        return prefs, (None if err is None else clean_text(err))
    except Exception as e:  # pragma: no cover - defensive
        return [], f"internal error while parsing preferences: {type(e).__name__}"


def _parse_preferences(answer: Any) -> tuple[list[Preference], str | None]:
    text = as_text(answer)
    if not text.strip():
        return [], "empty answer: expected a JSON list of preferences"
    obj: Any = None
    last_err = "no JSON found"
    for cand in _json_candidates(text):
        try:
            obj = strict_json_loads(cand)
            break
        except (ValueError, RecursionError) as e:
            last_err = json_error(e)
    else:
        return [], f"answer is not valid JSON: {last_err}"

    items: list[Any]
    wrapped = isinstance(obj, dict) and "preferences" in obj  # {"preferences": [...] or {...}}
    if wrapped:
        obj = obj["preferences"]
    if isinstance(obj, list):
        items = obj
    elif isinstance(obj, dict):
        items = _flat_items(obj)
    elif wrapped:
        return [], f'"preferences" must be a list, got {type(obj).__name__}'
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
            return [], f"attribute {attr!r}: unknown polarity {snippet(str(pol_raw))!r}"
    slot_raw = it.get("slot", it.get("product_index", it.get("product")))
    slot = 0
    if slot_raw is not None:
        # an integer, or a string / whole float holding one ("1", 1.0); not true/false, 1.9 or 1e400
        ok = not isinstance(slot_raw, bool)
        try:
            as_float = float(slot_raw) if ok else 0.0
            ok = ok and as_float == as_float and abs(as_float) < 1e6 and as_float == int(as_float)
            slot = int(as_float) if ok else 0
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            return (
                [],
                f"attribute {attr!r}: slot must be an integer (0 for the first product), got {snippet(str(slot_raw))!r}",
            )
        if slot < 0:
            return [], f"attribute {attr!r}: slot must be >= 0"
    return [Preference(slot=slot, attribute=attr, value=t, polarity=polarity) for t in texts], None  # type: ignore[arg-type]
