"""The web app of ``shopcomp view``: server-rendered, read-only pages over a :class:`RunCatalog`
(docs/viewer.md).

Routes (GET and HEAD only; any other method answers 405):

``/``
    every run the catalog found (a sortable table of its summary).
``/runs/{run_id}/episodes``
    one run's episodes, one row each, filtered and paged on the server. Query parameters:
    ``failed`` (0/1), ``task_type``, ``taxonomy``, ``strategy`` (one of the run's values, see
    :meth:`RunIndex.facets`), ``status`` (a line status, :data:`STATUSES`), ``q`` (substring of the instruction or task id), ``sort`` (a column,
    see :data:`SORT_KEYS`), ``desc`` (0/1), ``page`` (>= 1), ``per_page`` (1..500, default 50).
``/runs/{run_id}/episodes/{line}``
    one episode (``line``: its 1-based line in the results file): a summary strip, then the
    instruction, gold preferences, every stage's timeline, verdict and reward, the simulator.
``/runs/{run_id}/episodes/{line}/raw``
    the episode's line as plain text (the stored JSON, or the raw bytes of an unreadable line).
``/runs/{run_id}/episodes/{line}/content?stage=S&turn=T&call=C``
    the full content of one tool result as plain text (pages carry at most :data:`RESULT_CAP`
    characters of it).
``/compare?a=RUN&b=RUN``
    two runs: per-task success transitions and metric deltas with 95 % bootstrap CIs.
``/compare/episode?a=RUN&la=LINE&b=RUN&lb=LINE``
    two episodes side by side.
``/api/runs``
    JSON ``{"live", "runs": [RunSummary...]}`` (``live``: some run is being written), polled by a
    runs page while a run is live, which updates its counts and metrics in place.
``/api/runs/{run_id}/rows?after=LINE``
    JSON ``{"run_id", "live", "summary", "rows": [EpisodeRow...], "more"}`` of the rows after line
    ``LINE`` (at most :data:`API_ROWS` of them), for live refresh; ``{"error", "run_id"}`` with
    status 503 while the run file cannot be read.
``/static/{file}``
    the package's stylesheet and script; ``/healthz``: ``{"ok": true}``.

Run ids come only from the catalog (:meth:`RunCatalog.get`): a URL naming anything else, a
traversal (``..``) or an absolute path is a 404, never a file read. Unknown runs and lines answer a
404 page; a bad query value a 400 page naming the parameter and its allowed values. A run file
that cannot be read now (:class:`RunUnreadableError`: replaced by a directory or a FIFO, a symlink
out of its run, a failed open) gives a page with an error box naming the file and why (status
200; the runs and episodes pages show the problem too), and a 503 from the rows API. Only requests
whose ``Host`` header names the server are answered
(:func:`~shopping_companion.viewer.web.allowed_hosts_for`). Every template autoescapes; data
reaches the script only through ``<script type="application/json">`` blocks (Jinja's ``tojson``:
``<``, ``>``, ``&`` and quotes escaped). Every response carries a Content-Security-Policy without
inline script, ``X-Content-Type-Options: nosniff`` and
``Referrer-Policy: no-referrer``. A section of a page that fails to render (malformed data) shows
an error box in place; the rest of the page renders. Only a failure outside any section (a bug)
answers 500, with the error named on the page and the traceback on stderr.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from shopping_companion.viewer.compare import COUNT_METRICS, compare
from shopping_companion.viewer.discovery import RunCatalog
from shopping_companion.viewer.files import RunUnreadableError
from shopping_companion.viewer.index import RunIndex
from shopping_companion.viewer.labels import (
    HELP,
    MEAN_HELP,
    component_help,
    outcome_label,
    stage_total_help,
    stage_total_label,
)
from shopping_companion.viewer.links import BundleLinks, ServerLinks
from shopping_companion.viewer.models import MAX_LIMIT, ROW_STATUSES, SORT_FIELDS, EpisodeView
from shopping_companion.viewer.web import (
    LOCAL_HOST_NAMES,
    BadParam,
    NotFound,
    ReadOnlyGuard,
    param_bool,
    param_choice,
    param_int,
    safe_run_id,
)

__all__ = [
    "API_ROWS",
    "Clipper",
    "Pages",
    "RESULT_CAP",
    "STATIC_DIR",
    "SORT_KEYS",
    "TEMPLATES_DIR",
    "create_app",
    "visible",
]

log = logging.getLogger(__name__)

TEMPLATES_DIR = Path(__file__).with_name("templates")
STATIC_DIR = Path(__file__).with_name("static")

#: Characters of one text (tool result, arguments, assistant text, think text) a page carries;
#: the rest is cut and the page says how much (with a link to the full text on the server).
RESULT_CAP = 20_000
#: Characters of long text one page carries in all; past it every further text is capped at
#: :data:`SMALL_CAP`, so an episode of many huge tool results still gives a page of bounded size.
PAGE_BUDGET = 1_000_000
SMALL_CAP = 1_000
#: Rows one ``/api/runs/.../rows`` answer carries at most (``"more": true`` when there are more).
API_ROWS = 1000
#: ``per_page`` values allowed on the episodes page (the store's page size limit).
PER_PAGE_MAX = MAX_LIMIT
#: Sort columns of the episodes page (``sort=``): the store's.
SORT_KEYS = SORT_FIELDS
#: Line statuses the episodes page can filter by (``status=``).
STATUSES = ROW_STATUSES
#: Marks of returned ids, in legend order, with the legend's words.
MARKS = (
    ("needle", "needle session (holds a gold preference)"),
    ("non_needle", "other session"),
    ("reference", "reference product"),
    ("alternative", "valid alternative"),
    ("other", "other product"),
    ("unknown", "not classified (the benchmark was not found)"),
)

# C0 controls (but tab, newline, carriage return) and DEL become their visible Unicode pictures;
# the bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069) become
# their code point in angle brackets ("⟨U+202E⟩"), so a name cannot reorder the text around it.
_CONTROLS: dict[int, int | str] = {c: 0x2400 + c for c in range(0x20) if c not in (9, 10, 13)}
_CONTROLS[0x7F] = 0x2421
#: Bidirectional formatting characters :func:`visible` shows as ``⟨U+XXXX⟩``: embeddings, overrides
#: and isolates, the implicit marks (LRM, RLM, ALM), and the invisible characters that make two ids
#: look alike or break a line unseen (zero-width space, line / paragraph separator, BOM). The
#: zero-width joiner is left alone: emoji sequences in model text need it.
BIDI_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200B, 0x200E, 0x200F, 0x061C, 0x2028, 0x2029, 0xFEFF)
_CONTROLS.update({c: f"\u27e8U+{c:04X}\u27e9" for c in BIDI_CONTROLS})
#: Shown in place of a value nested too deeply to encode or decode (Python's recursion limit).
TOO_DEEP = "(nested too deeply to show here; the raw line has it)"


# --------------------------------------------------------------------------- text


def visible(text: Any) -> str:
    """``text`` as a string with C0 control characters (but tab and newlines) and DEL replaced by
    their Unicode control pictures (U+2400...), and the bidirectional controls of
    :data:`BIDI_CONTROLS` by ``⟨U+XXXX⟩``, so they show instead of corrupting or reordering the
    page. A value whose ``str`` recurses too deeply gives :data:`TOO_DEEP`."""
    try:
        s = str(text)
    except RecursionError:
        return TOO_DEEP
    return s.translate(_CONTROLS)


@dataclasses.dataclass
class Clip:
    """A text as a page shows it: ``text`` (at most the cap), ``total`` characters of the whole,
    ``cut`` characters left out (0 when whole); ``pretty``: ``text`` is re-indented JSON."""

    text: str
    total: int
    cut: int
    pretty: bool = False

    @property
    def long(self) -> bool:
        """More than 1,500 characters shown (the page folds it)."""
        return len(self.text) > 1500

    @property
    def preview(self) -> str:
        """The first 8 lines, at most 400 characters (shown under a folded text)."""
        return "\n".join(self.text[:400].split("\n")[:8])


class Clipper:
    """Cuts the texts of one page: each at most ``cap`` characters while the page's ``budget``
    lasts, then at most ``small`` (the page's total stays bounded whatever the trajectory holds)."""

    def __init__(self, cap: int = RESULT_CAP, budget: int = PAGE_BUDGET, small: int = SMALL_CAP) -> None:
        self.cap = cap
        self.budget = budget
        self.small = small

    def clip(self, text: Any, *, as_json: bool = False) -> Clip:
        """``text`` (a string, or any JSON-able value when ``as_json``) cut to the current cap.
        ``as_json``: a value, or a string that parses as JSON (up to 1 MB), is shown indented."""
        if text is None:
            return Clip("", 0, 0)
        pretty = False
        if as_json:
            value: Any = text
            if isinstance(text, str):
                value = None
                if len(text) <= 1_000_000 and text[:1] in "{[":
                    try:
                        value = json.loads(text)
                    except (ValueError, RecursionError):  # not JSON, or nested too deeply: the text as is
                        value = None
            if value is not None or not isinstance(text, str):
                try:
                    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
                    pretty = True
                except (TypeError, ValueError, RecursionError):
                    text = visible(text)  # the string as is; a value too deep for str: TOO_DEEP
        s = visible(text) if not isinstance(text, str) else text
        cap = self.cap if self.budget > 0 else self.small
        shown = s[:cap]
        self.budget -= len(shown)
        return Clip(visible(shown), len(s), len(s) - len(shown), pretty)


# --------------------------------------------------------------------------- formatting


def fmt_num(x: Any, digits: int = 3) -> str:
    """A number for a table cell: ints as they are, floats with ``digits`` decimals, None/NaN "–"."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return "–"
        return f"{x:.{digits}f}"
    return visible(x)


def fmt_pct(x: Any) -> str:
    """A share in [0, 1] as a percentage with one decimal ("–" for None)."""
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    return f"{100 * x:.1f}%"


def sort_value(x: Any) -> str:
    """The ``data-v`` attribute of a sortable cell: numbers as text, booleans 1/0, None empty."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, float) and not math.isfinite(x):
        return ""
    return str(x)


def jsonable(value: Any) -> Any:
    """``value`` (dataclasses, pydantic models, containers, scalars) as plain JSON data; NaN and
    infinities become None (JSON has no such numbers)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def row_json(row: Any, instruction_chars: int = 300) -> dict[str, Any]:
    """An :class:`EpisodeRow` as the JSON the script renders (instruction cut to
    ``instruction_chars`` characters, problem to 300)."""
    d = jsonable(row)
    for key, n in (("instruction", instruction_chars), ("problem", 300)):
        if isinstance(d.get(key), str) and len(d[key]) > n:
            d[key] = d[key][:n] + "…"
    return d


def _show(value: Any) -> str:
    """Any value as readable text: strings as they are, the rest as compact JSON (:data:`TOO_DEEP`
    for a value nested too deeply to encode)."""
    if isinstance(value, str):
        return visible(value)
    try:
        return visible(json.dumps(jsonable(value), ensure_ascii=False))
    except RecursionError:
        return TOO_DEEP
    except (TypeError, ValueError):
        try:
            return visible(repr(value))
        except RecursionError:
            return TOO_DEEP


def fmt_signed(x: Any, digits: int = 3) -> str:
    """A difference with its sign ("+0.625", "-0.125", "+0.000"); None/NaN "–"."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    return f"{x:+.{digits}f}"


def fmt_count(x: Any) -> str:
    """A mean count (turns, tool calls): whole numbers without decimals ("3"), others with two
    ("3.25"); None/NaN "–"."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def wbr(text: Any) -> Markup:
    """``text`` escaped, with a line-break opportunity (``<wbr>``) after every ``_``, ``/`` and
    ``:`` so identifiers like ``preference_hallucination`` wrap in a narrow cell; None gives "–"."""
    if text is None:
        return Markup("–")
    escaped = str(Markup.escape(visible(text)))
    return Markup(re.sub(r"([_/:])", r"\1<wbr>", escaped))


def bench_name(path: Any) -> str:
    """The benchmark's short name shown in tables: the last directory of its path ("bench" for
    ``/tmp/x/bench/``); "–" for None."""
    if path is None:
        return "–"
    text = str(path).rstrip("/\\")
    return visible(text.replace("\\", "/").rsplit("/", 1)[-1] or text)


#: Reward components in display order after the outcome reward: the tool and format rewards; the
#: stage total follows them, then every other component (indicators, counts, custom members) by name.
REWARD_HEAD = ("R_tool", "R_fmt")
#: Components a reward table leaves out (``stage`` is the stage number, not a reward).
REWARD_HIDDEN = frozenset({"stage"})


def _stage_no(stage: Any) -> int | None:
    """1 or 2 from a stage number or a ``"s1"`` / ``"s2"`` group name; else None."""
    if isinstance(stage, str):
        stage = stage[1:] if stage[:1] == "s" and stage[1:].isdigit() else None
    try:
        n = int(stage) if stage is not None and not isinstance(stage, bool) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n in (1, 2) else None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def reward_rows(
    components: Mapping[str, Any], stage: Any = None
) -> tuple[list[tuple[str, Any, str]], list[tuple[str, Any]]]:
    """``(head, rest)`` of a stage's reward components, every number under one name
    (:mod:`~shopping_companion.viewer.labels`). ``head``: ``(label, value, tooltip)`` of the
    outcome reward, named R1 (stage 1) or R2 (stage 2): the component ``R1`` / ``R2`` the outcome
    reward logs, which is the stage's ``R_z``, so R_z is not listed again (both are listed when
    they differ; ``R_z`` when the stage is unknown); then R1 of a one-stage answer (logged on its
    stage 2), then :data:`REWARD_HEAD`. ``rest``: ``(name, value)`` of every other component by
    name, without :data:`REWARD_HIDDEN` and ``total`` (shown as the stage total,
    :func:`~shopping_companion.viewer.labels.stage_total_label`). ``stage``: 1, 2 or ``"s1"`` /
    ``"s2"``; None reads the component ``stage``."""
    n = _stage_no(stage if stage is not None else components.get("stage"))
    head: list[tuple[str, Any, str]] = []
    used = {"total", *REWARD_HIDDEN, *REWARD_HEAD}
    z = components.get("R_z")
    if n is not None:
        own_name = outcome_label(n)
        own = components.get(own_name)
        if own is not None and z is not None and not (_is_num(own) and _is_num(z) and abs(own - z) < 1e-9):
            head.append(("R_z", z, HELP["R_z"]))  # a rubric whose R_z is not the paper's outcome reward
            head.append((own_name, own, HELP[own_name]))
        elif own is not None or z is not None:
            head.append((own_name, own if own is not None else z, HELP[own_name]))
        used |= {"R_z", own_name}
        other = outcome_label(3 - n)
        if other in components:  # a one-stage episode: R1 of its answer, on stage 2
            head.append((other, components[other], HELP[other]))
            used.add(other)
    elif z is not None:
        head.append(("R_z", z, HELP["R_z"]))
        used.add("R_z")
    head += [(k, components[k], component_help(k)) for k in REWARD_HEAD if k in components]
    rest = sorted((str(k), v) for k, v in components.items() if k not in used)
    return head, rest


def component_groups(components: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A run's mean reward components (``"s1.R_z"`` ... keys) grouped per stage for the runs page
    and the export: ``[{"stage": "s1", "head": [(label, value, tooltip)...], "total": value | None,
    "total_label": "S1 total", "total_help": ..., "rest": [(name, value)...]}]`` in stage order
    (:func:`reward_rows`: the outcome reward named R1 / R2 once); keys without a ``stage.`` prefix
    form the group ``""`` (its total is "total")."""
    by_stage: dict[str, dict[str, Any]] = {}
    for key, value in components.items():
        stage, _, name = str(key).rpartition(".")
        by_stage.setdefault(stage, {})[name] = value
    out = []
    for stage in sorted(by_stage):
        comps = by_stage[stage]
        n = _stage_no(stage)
        head, rest = reward_rows(comps, n or 0)
        out.append(
            {
                "stage": stage,
                "head": head,
                "total": comps.get("total"),
                "total_label": stage_total_label(n),
                "total_help": stage_total_help(n),
                "rest": rest,
            }
        )
    return out


#: What each judge field of a verdict means (the column tooltips of the verdict table; from
#: :class:`shopping_companion.types.Verdict`).
VERDICT_HELP = {
    "F": "F: number of gold preference attributes of the task",
    "N": "N: number of products the task asks for",
    "q1": "q1: stage-1 query relevance, 0 or 1",
    "m1": "m1: matched preference attributes, out of F",
    "c1": "c1: matched product count, out of N (add-on tasks only)",
    "h1": "h1: spurious identified preferences (hallucinated, contradictory, piled on one attribute, "
    "misattributed to another product or not an attribute value); – = not assessed",
    "p2": "p2: product validity, 0 or 1",
    "q2": "q2: stage-2 relevance, 0 or 1",
    "m2": "m2: matched preference attributes, out of F",
    "n2": "n2: matched product count, out of N",
    "u2": "u2: budget feasibility, 0 or 1 (add-on tasks only)",
    "success": "stage 2: Succ (Eq. 5); stage 1: every gold preference found",
}
#: Verdict fields shown as "x / F" or "x / N".
VERDICT_OF = {"m1": "F", "c1": "N", "m2": "F", "n2": "N"}
#: What each reason of an uncertain verdict item means (tooltips; :data:`shopping_companion.types.UncertainReason`).
UNCERTAIN_HELP = {
    "unknown_key": "an attribute name no canonical key resolves",
    "value_outside_vocabulary": "a value the vocabularies and units cannot read; compared by words or embeddings only",
    "indirect_statement": "no user turn states it in words the lexicon reads; the user may have said it otherwise",
    "not_stated": "the product's fields and text state nothing the reader recognises about it",
    "field_text_conflict": "a structured field and the title disagree",
    "adjacent_type": "a sibling type of the slot's, or a broader one the category cannot settle",
    "unknown_type": "the slot or the product names no type the type vocabulary knows",
}
#: What an item kind decides (tooltips of the decisions table).
ITEM_HELP = {
    "match": "stage 1: a gold preference reported by the answer (m1)",
    "grounding": "stage 1: an answer preference matching no gold one: harmless, or spurious (h1)",
    "attribute": "stage 2: a gold preference met by its product (m2)",
    "type": "stage 2: the product is of the requested type (q2)",
    "bundle": "stage 2: one shop, every price known, within budget (u2)",
}

#: The list holding one entry per returned item, by tool (the tool results the episode page shows
#: as a table).
RESULT_LISTS = {
    "mem_search": "results",
    "mem_view": "sessions",
    "product_search": "results",
    "product_view": "products",
}
#: Items of one tool result shown in its table; characters of an item's snippet.
RESULT_ITEMS = 100
SNIPPET_CHARS = 120
_TOOL_CALL_RE = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.S)


def _cut(text: Any, n: int) -> str:
    s = " ".join(visible(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def result_items(call: Any) -> dict[str, Any] | None:
    """The items of a ``mem_search`` / ``mem_view`` / ``product_search`` / ``product_view`` result
    as table rows, or None (another tool, or a result that is not such JSON, or over 2 MB).
    Returns ``{"rows": [{"id", "mark", "score", "title", "meta", "snippet"}...], "total": n}``:
    at most :data:`RESULT_ITEMS` rows, ``mark`` from the call's returned ids (None when the id was
    not classified), ``title`` the product title or the session date, ``snippet`` the first
    :data:`SNIPPET_CHARS` characters of the memory snippet / the session's first turns / the
    product's category and brand."""
    key = RESULT_LISTS.get(getattr(call, "name", None) or "")
    content = getattr(call, "content", None)
    if key is None or not isinstance(content, str) or len(content) > 2_000_000 or content[:1] != "{":
        return None
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply: shown as text instead
        return None
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    marks: dict[str, str] = {}
    for rid, mark in getattr(call, "returned", None) or []:
        marks.setdefault(str(rid), str(mark))
    rows = []
    for it in items[:RESULT_ITEMS]:
        if not isinstance(it, dict):
            rows.append({"id": None, "mark": None, "score": None, "title": "", "meta": "", "snippet": _cut(it, 200)})
            continue
        rid = it.get("product_id", it.get("session_id"))
        score = it.get("score")
        if "session_id" in it and "product_id" not in it:
            title = _cut(it.get("date") or "", 40)
            meta = ""
            if it.get("role") is not None or it.get("turn_index") is not None:
                meta = _cut(f"{it.get('role') or ''} turn {it.get('turn_index', '–')}".strip(), 40)
            snippet = it.get("snippet")
            if snippet is None and isinstance(it.get("turns"), list):
                snippet = " | ".join(
                    f"{t.get('role', '?')}: {t.get('content', '')}" for t in it["turns"][:4] if isinstance(t, dict)
                )
        else:
            title = _cut(it.get("title") or "", 160)
            price = it.get("price")
            meta = " · ".join(
                x
                for x in (
                    f"{fmt_num(price, 2)} {it.get('currency') or ''}".strip() if price is not None else "",
                    _cut(it.get("shop") or "", 60),
                )
                if x
            )
            cat = it.get("category") or (it.get("category_path") or [None])[-1]
            snippet = " · ".join(_cut(x, 80) for x in (cat, it.get("brand")) if x)
        rows.append(
            {
                "id": None if rid is None else visible(rid),
                "mark": marks.get(str(rid)) if rid is not None else None,
                "score": score if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
                "title": title,
                "meta": meta,
                "snippet": _cut(snippet or "", SNIPPET_CHARS),
            }
        )
    return {"rows": rows, "total": len(items)}


def turn_prose(text: Any) -> str:
    """A turn's text without its ``<tool_call>...</tool_call>`` blocks (their arguments are shown
    with each call), stripped; "" when nothing else is left."""
    return _TOOL_CALL_RE.sub("", str(text or "")).strip()


def has_tool_call(text: Any) -> bool:
    """The turn text holds a ``<tool_call>`` block."""
    return "<tool_call>" in str(text or "")


def turn_marks(stage: Any, every: int = 10) -> list[int]:
    """Turn indexes a stage's mini navigation links to: every ``every``-th turn (0, 10, 20, ...),
    when the stage has more than ``every`` turns; else none."""
    turns = getattr(stage, "turns", None) or []
    if len(turns) <= every:
        return []
    return [t.index for t in turns if t.index % every == 0]


def make_env() -> Environment:
    """The Jinja2 environment of every page: the package's templates, autoescape on for every
    template whatever its name, undefined names are errors, the formatting filters."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=fmt_num, pct=fmt_pct, sv=sort_value, show=_show, visible=visible, signed=fmt_signed, cnt=fmt_count
    )
    env.filters.update(bench_name=bench_name, wbr=wbr)
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "ensure_ascii": False}
    env.globals.update(MARKS=MARKS, SORT_KEYS=SORT_KEYS, STATUSES=STATUSES, jsonable=jsonable, row_json=row_json)
    env.globals.update(
        VERDICT_HELP=VERDICT_HELP,
        VERDICT_OF=VERDICT_OF,
        UNCERTAIN_HELP=UNCERTAIN_HELP,
        ITEM_HELP=ITEM_HELP,
        COUNT_METRICS=COUNT_METRICS,
        HELP=HELP,
        MEAN_HELP=MEAN_HELP,
        stage_total_label=stage_total_label,
        stage_total_help=stage_total_help,
        reward_rows=reward_rows,
        component_groups=component_groups,
        result_items=result_items,
        turn_prose=turn_prose,
        has_tool_call=has_tool_call,
        turn_marks=turn_marks,
    )
    return env


# --------------------------------------------------------------------------- query parameters


def episode_query(params: Mapping[str, str], facets: Mapping[str, list[str]]) -> dict[str, Any]:
    """The episodes page's query parameters checked: ``{"failed_only", "task_type", "taxonomy",
    "strategy", "ability", "stress", "status", "q", "sort", "desc", "page", "per_page"}``. Raises
    :class:`BadParam` naming the parameter and its allowed values (``task_type`` / ``taxonomy`` /
    ``strategy`` / ``ability`` / ``stress``: the run's facet
    values; ``status``: :data:`STATUSES`; ``sort``: :data:`SORT_KEYS`; ``page`` >= 1; ``per_page``
    1..500)."""
    sort = params.get("sort") or "line"
    if sort not in SORT_KEYS:
        raise BadParam("sort", sort, ", ".join(SORT_KEYS))
    q = params.get("q") or None
    if q is not None and len(q) > 500:
        raise BadParam("q", q[:40] + "…", "a text of at most 500 characters")
    return {
        "failed_only": param_bool(params, "failed"),
        "task_type": param_choice(params, "task_type", facets.get("task_type", [])),
        "taxonomy": param_choice(params, "taxonomy", facets.get("taxonomy", [])),
        "strategy": param_choice(params, "strategy", facets.get("strategy", [])),
        **{k: param_choice(params, k, facets.get(k, [])) for k in ("ability", "stress")},
        "status": param_choice(params, "status", STATUSES),
        "q": q,
        "sort": sort,
        "desc": param_bool(params, "desc"),
        "page": param_int(params, "page", 1, 1),
        "per_page": param_int(params, "per_page", 50, 1, PER_PAGE_MAX),
    }


def _page_links(page: int, n_pages: int) -> list[int | None]:
    """Page numbers to link: the first, the last, and two either side of ``page``; ``None`` marks
    a gap."""
    keep = sorted({1, n_pages, *range(max(1, page - 2), min(n_pages, page + 2) + 1)})
    out: list[int | None] = []
    for i, p in enumerate(keep):
        if i and p != keep[i - 1] + 1:
            out.append(None)
        out.append(p)
    return out


# --------------------------------------------------------------------------- pages


class Pages:
    """Renders every page to an HTML string; used by the server (:func:`create_app`) and by the
    static export (:mod:`shopping_companion.viewer.export`) with their own links."""

    def __init__(self, env: Environment | None = None) -> None:
        self.env = env or make_env()

    # a section of a page: rendered on its own, a failure shows an error box in its place
    def _section(self, render: Callable[[], Any], what: str) -> Markup:
        try:
            return Markup(render())
        except Exception as e:  # noqa: BLE001 - malformed data must not take the page down
            log.warning("viewer: could not render %s: %s", what, e, exc_info=True)
            return Markup(self.env.get_template("_error_box.html").render(what=what, error=f"{type(e).__name__}: {e}"))

    def render(self, name: str, links: Any, **context: Any) -> str:
        """Template ``name`` rendered with ``links`` as ``L`` and ``context``."""
        return self.env.get_template(name).render(L=links, **context)

    def error(self, links: Any, status: int, title: str, message: str, **extra: Any) -> str:
        """The error page: ``status`` (400, 404, 405, 500), a title and an escaped message."""
        return self.render("error.html", links, status=status, title=title, message=message, extra=extra)

    def unreadable(self, links: Any, message: str) -> str:
        """The page shown (status 200) in place of one that needs a run file that cannot be read
        now: an error box with ``message`` (the :class:`RunUnreadableError`: path and reason)."""
        return self.render("unreadable.html", links, message=message)

    def runs(self, links: Any, summaries: list[Any], **extra: Any) -> str:
        """The runs page: one row per :class:`RunSummary`, sortable on the client."""
        ks = sorted({k for s in summaries for k in (s.pass_hat_k or {})})
        comps = sorted({c for s in summaries for c in (s.components or {})})
        runs_api = getattr(links, "runs_api", lambda: None)()
        live = {"live": any(s.live for s in summaries), "runs_url": runs_api}
        return self.render("runs.html", links, summaries=summaries, ks=ks, comps=comps, live=live, **extra)

    def episodes(self, links: Any, index: RunIndex, query: dict[str, Any]) -> str:
        """The episodes page of one run for a checked ``query`` (see :func:`episode_query`)."""
        summary = index.summary
        per_page = query["per_page"]
        keys = ("failed_only", "task_type", "taxonomy", "strategy", "ability", "stress", "status", "q", "sort", "desc")
        kwargs = {k: query[k] for k in keys}
        page = index.query(**kwargs, offset=(query["page"] - 1) * per_page, limit=per_page)
        n_pages = max(1, -(-page.total // per_page))
        if query["page"] > n_pages and page.total:
            raise BadParam("page", str(query["page"]), f"an integer 1..{n_pages} ({page.total} matching episodes)")
        params = {
            "failed": "1" if query["failed_only"] else None,
            "task_type": query["task_type"],
            "taxonomy": query["taxonomy"],
            "strategy": query["strategy"],
            **{k: query[k] for k in ("ability", "stress")},
            "status": query["status"],
            "q": query["q"],
            "sort": None if query["sort"] == "line" else query["sort"],
            "desc": "1" if query["desc"] else None,
            "per_page": None if per_page == 50 else per_page,
        }
        filtered = any(
            query[k] for k in ("failed_only", "task_type", "taxonomy", "strategy", "ability", "stress", "status", "q")
        )
        filtered = filtered or query["sort"] != "line"
        last_line = max((r.line for r in page.rows), default=0)
        live = {
            "live": bool(summary.live),
            "rows_url": links.rows_api(summary.run_id),
            "after": max(last_line, summary.n_lines) if filtered or query["desc"] else last_line,
            "append": not filtered and not query["desc"] and query["page"] == n_pages,
            "episode_base": links.episode(summary.run_id, 0)[:-1],
        }
        return self.render(
            "episodes.html",
            links,
            summary=summary,
            page=page,
            query=query,
            params=params,
            facets=index.facets(),
            n_pages=n_pages,
            page_links=_page_links(query["page"], n_pages),
            live=live,
        )

    def _module(self, links: Any, run_id: str, idp: str = "") -> Any:
        """The ``_episode.html`` macros bound to ``links``, a fresh :class:`Clipper` (one per
        episode) and ``idp``, the prefix of every element id (two episodes on one page differ)."""
        clipper = Clipper()
        ctx = {"L": links, "clip": clipper.clip, "run_id": run_id, "idp": idp}
        return self.env.get_template("_episode.html").make_module(ctx)

    def episode_sections(self, links: Any, run_id: str, view: EpisodeView, *, idp: str = "", toolbar: bool = True):
        """One episode's sections rendered one by one: ``{"summary", "nav", "raw", "task",
        "stages": {stage number: html}, "simulator", "record"}`` (``raw`` / ``record`` None when
        the page has none; ``nav`` "" without ``toolbar``). ``idp``: the element id prefix;
        ``toolbar``: the summary carries the gold toggle and fold buttons, and the mini
        navigation is rendered (a side-by-side page has one toolbar of its own)."""
        mod = self._module(links, run_id, idp)
        out: dict[str, Any] = {
            "summary": self._section(lambda: mod.summary(view, toolbar), "the summary strip"),
            "nav": self._section(lambda: mod.episode_nav(view), "the navigation") if toolbar else Markup(""),
            "raw": None,
            "record": None,
        }
        if view.raw is not None or (view.result is None and view.record is None):  # a line that is no episode
            out["raw"] = self._section(lambda: mod.raw_line(view), "the raw line")
        out["task"] = self._section(lambda: mod.task_section(view), "the instruction and gold preferences")
        out["stages"] = {
            stage.stage: self._section(lambda s=stage: mod.stage_section(view, s), f"stage {stage.stage}")
            for stage in view.stages
        }
        out["simulator"] = self._section(lambda: mod.simulator_section(view), "the simulator")
        if view.record is not None:
            out["record"] = self._section(lambda: mod.record_section(view), "the line's other fields")
        return out

    def episode_parts(self, links: Any, run_id: str, view: EpisodeView) -> list[Markup]:
        """One episode's sections (summary strip, navigation, raw line, task, stages, simulator,
        other fields) in page order (see :meth:`episode_sections`)."""
        sec = self.episode_sections(links, run_id, view)
        parts = [sec["summary"], sec["nav"]]
        if sec["raw"] is not None:
            parts.append(sec["raw"])
        parts += [sec["task"], *sec["stages"].values(), sec["simulator"]]
        if sec["record"] is not None:
            parts.append(sec["record"])
        return parts

    def episode(self, links: Any, summary: Any, view: EpisodeView) -> str:
        """The episode page of ``view`` (line ``view.row.line`` of run ``summary``)."""
        parts = self.episode_parts(links, summary.run_id, view)
        return self.render("episode.html", links, summary=summary, view=view, parts=parts)

    def compare(self, links: Any, summaries: list[Any], a: str | None, b: str | None, result: Any, problem: str | None):
        """The compare page: the run pickers, then (when both are given) the comparison."""
        return self.render("compare.html", links, summaries=summaries, a=a, b=b, cmp=result, problem=problem)

    def compare_episode(self, links: Any, sides: list[tuple[Any, EpisodeView]]) -> str:
        """Two episodes side by side: ``sides`` = ``[(summary, view), (summary, view)]``. The task
        is shown once (twice when the two episodes are of different tasks), then one grid row per
        stage number with each side's stage (or a note that the side has no such stage)."""
        cols = []
        for (summary, view), idp in zip(sides, ("a-", "b-"), strict=True):
            cols.append((summary, view, self.episode_sections(links, summary.run_id, view, idp=idp, toolbar=False)))
        stage_numbers = sorted({n for _, _, sec in cols for n in sec["stages"]})
        ids = [v.task.task_id if v.task is not None else v.row.task_id for _, v, _ in cols]
        same_task = ids[0] is not None and ids[0] == ids[1]
        return self.render("compare_episode.html", links, cols=cols, stage_numbers=stage_numbers, same_task=same_task)


# --------------------------------------------------------------------------- the ASGI app


class _Site:
    """The endpoints of :func:`create_app` over one catalog, rendered with ``links``; the catalog
    is used under ``lock`` (requests are served by a thread pool; a :class:`RunIndex` refreshes in
    place)."""

    def __init__(self, catalog: RunCatalog, pages: Pages, links: Any) -> None:
        self.catalog = catalog
        self.pages = pages
        self.links = links
        self.lock = threading.Lock()

    def get_index(self, run_id: str) -> RunIndex:
        try:
            return self.catalog.get(safe_run_id(run_id))  # refreshed by the catalog
        except KeyError:
            raise NotFound(f"run {run_id!r}") from None

    @staticmethod
    def get_view(index: RunIndex, line: int) -> EpisodeView:
        try:
            return index.episode(line)
        except KeyError:
            raise NotFound(f"line {line} of run {index.summary.run_id!r}") from None

    def page(self, build: Callable[[Request], Response | str]) -> Callable[[Request], Response]:
        """An endpoint answering ``build(request)`` (HTML or a response) under the lock; the error
        pages for a missing run or line (404), a bad query value (400), an unreadable run file (200,
        an error box) and a bug (500, the traceback on stderr)."""
        pages, links = self.pages, self.links

        def endpoint(request: Request) -> Response:
            try:
                with self.lock:
                    out = build(request)
                return out if isinstance(out, Response) else HTMLResponse(out)
            except NotFound as e:
                return HTMLResponse(pages.error(links, 404, "Not found", f"There is no {e.what}."), status_code=404)
            except BadParam as e:
                html = pages.error(links, 400, "Bad request", str(e), param=e.name, allowed=e.allowed)
                return HTMLResponse(html, status_code=400)
            except RunUnreadableError as e:  # the file went away or was replaced: say so, in the page
                return HTMLResponse(pages.unreadable(links, str(e)))
            except Exception as e:  # noqa: BLE001 - a bug: say so on the page, traceback on stderr
                log.exception("viewer: %s %s failed", request.method, request.url.path)
                html = pages.error(links, 500, "Internal error", f"{type(e).__name__}: {e}")
                return HTMLResponse(html, status_code=500)

        return endpoint

    def runs_page(self, request: Request) -> str:
        return self.pages.runs(self.links, self.catalog.runs())

    def episodes_page(self, request: Request) -> str:
        index = self.get_index(request.path_params["run_id"])
        return self.pages.episodes(self.links, index, episode_query(request.query_params, index.facets()))

    def episode_page(self, request: Request) -> str:
        index = self.get_index(request.path_params["run_id"])
        return self.pages.episode(self.links, index.summary, self.get_view(index, request.path_params["line"]))

    def raw_page(self, request: Request) -> Response:
        index = self.get_index(request.path_params["run_id"])
        line = request.path_params["line"]
        try:
            data = index.raw(line)
        except KeyError:
            raise NotFound(f"line {line} of run {index.summary.run_id!r}") from None
        # the stored bytes as text; never rendered as HTML (text/plain, nosniff)
        return PlainTextResponse(data.decode("utf-8", errors="replace"))

    def content_page(self, request: Request) -> Response:
        index = self.get_index(request.path_params["run_id"])
        view = self.get_view(index, request.path_params["line"])
        params = request.query_params
        s = param_int(params, "stage", 0, 1, 2)
        t = param_int(params, "turn", 0, 0)
        c = param_int(params, "call", 0, 0)
        for stage in view.stages:
            if stage.stage == s:
                for turn in stage.turns:
                    if turn.index == t and c < len(turn.calls):
                        return PlainTextResponse(turn.calls[c].content)
        raise NotFound(f"tool call stage={s} turn={t} call={c} in line {view.row.line}")

    def compare_page(self, request: Request) -> str:
        params = request.query_params
        summaries = self.catalog.runs()
        a, b = params.get("a") or None, params.get("b") or None
        ids = [s.run_id for s in summaries]
        for name, value in (("a", a), ("b", b)):
            if value is not None and value not in ids:
                raise BadParam(name, value, ", ".join(ids))
        result, problem = None, None
        if a and b:
            ia, ib = self.get_index(a), self.get_index(b)
            try:
                result = compare(ia, ib)
            except ValueError as e:
                problem = str(e)
        return self.pages.compare(self.links, summaries, a, b, result, problem)

    def compare_episode_page(self, request: Request) -> str:
        params = request.query_params
        sides = []
        for run_key, line_key in (("a", "la"), ("b", "lb")):
            run_id = params.get(run_key)
            if not run_id:
                raise BadParam(run_key, "", "a run id from the runs page")
            line = param_int(params, line_key, 0, 1)
            if not line:
                raise BadParam(line_key, "", "a line number >= 1")
            index = self.get_index(run_id)
            sides.append((index.summary, self.get_view(index, line)))
        return self.pages.compare_episode(self.links, sides)

    def rows_api(self, request: Request) -> Response:
        try:
            with self.lock:
                index = self.get_index(request.path_params["run_id"])
                after = param_int(request.query_params, "after", 0, 0)
                rows = index.rows_after(after)
                summary = index.summary
                unclassified = index.unclassified
        except NotFound as e:
            return JSONResponse({"error": f"there is no {e.what}"}, status_code=404)
        except BadParam as e:
            return JSONResponse({"error": str(e), "param": e.name, "allowed": e.allowed}, status_code=400)
        except RunUnreadableError as e:
            return JSONResponse({"error": str(e), "run_id": request.path_params["run_id"]}, status_code=503)
        if summary.problem:  # no rows can be trusted now; the script keeps polling
            return JSONResponse({"error": summary.problem, "run_id": summary.run_id}, status_code=503)
        body = {
            "run_id": summary.run_id,
            "live": bool(summary.live),
            "summary": jsonable(summary),
            "rows": [row_json(r) for r in rows[:API_ROWS]],
            "more": len(rows) > API_ROWS,
            "unclassified": unclassified,
        }
        return JSONResponse(body)

    def runs_api(self, request: Request) -> Response:
        with self.lock:
            summaries = self.catalog.runs()
        return JSONResponse({"live": any(s.live for s in summaries), "runs": [jsonable(s) for s in summaries]})

    @staticmethod
    def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    def not_found(self, request: Request, exc: Exception) -> Response:
        html = self.pages.error(self.links, 404, "Not found", f"There is no page {request.url.path!r}.")
        return HTMLResponse(html, 404)

    def routes(self) -> list[Any]:
        get = ["GET", "HEAD"]
        page = self.page
        return [
            Route("/", page(self.runs_page), methods=get),
            Route("/healthz", self.healthz, methods=get),
            Route("/compare", page(self.compare_page), methods=get),
            Route("/compare/episode", page(self.compare_episode_page), methods=get),
            Route("/api/runs", self.runs_api, methods=get),
            Route("/api/runs/{run_id:path}/rows", self.rows_api, methods=get),
            Route("/runs/{run_id:path}/episodes/{line:int}/raw", page(self.raw_page), methods=get),
            Route("/runs/{run_id:path}/episodes/{line:int}/content", page(self.content_page), methods=get),
            Route("/runs/{run_id:path}/episodes/{line:int}", page(self.episode_page), methods=get),
            Route("/runs/{run_id:path}/episodes", page(self.episodes_page), methods=get),
            Mount("/static", app=StaticFiles(directory=str(STATIC_DIR), follow_symlink=False), name="static"),
        ]


def create_app(catalog: RunCatalog, *, export: bool = False, allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The viewer's Starlette app over ``catalog`` (routes: see the module docstring).

    ``export``: render the pages with the static bundle's links (:class:`BundleLinks`, relative
    file names) instead of the server's, to see what ``shopcomp view --export`` writes; the routes
    are the same. ``allowed_hosts``: the ``Host`` header names answered (Starlette's
    ``TrustedHostMiddleware``: exact names, ``*.example.com`` or ``"*"`` for any; an IPv6 address
    in brackets); any other Host gets a plain-text 400 "Invalid host header" (against DNS
    rebinding). Default :data:`LOCAL_HOST_NAMES`; see :func:`allowed_hosts_for`. The store is used
    under one lock (requests are served by a thread pool; a :class:`RunIndex` refreshes in place)."""
    pages = Pages()
    site = _Site(catalog, pages, BundleLinks() if export else ServerLinks())

    def refusal(method: str) -> str:
        return pages.error(
            ServerLinks(), 405, "Method not allowed", f"{method} is not allowed: this viewer is read-only."
        )

    app = Starlette(routes=site.routes(), exception_handlers={404: site.not_found})
    hosts = list(LOCAL_HOST_NAMES if allowed_hosts is None else allowed_hosts)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)
    app.add_middleware(ReadOnlyGuard, refusal=refusal)  # added last: outermost, so the 400 carries the headers too
    return app
