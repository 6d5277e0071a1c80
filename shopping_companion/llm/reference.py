"""The scripted reference policy: a rule-based BASELINE and smoke test, not an LLM.

It follows the two-stage workflow with real tool calls through the same environment as any model:

Stage 1: ``mem_search`` with the instruction and a few generic preference queries → ``mem_view``
of the best sessions → preferences extracted by rules (a catalog attribute value mentioned in a
user turn together with a first-person cue) → ``<answer>`` JSON.

Stage 2: ``product_search`` with the product words of the request plus the preference values →
``product_view`` of the top candidates → the candidate matching most preference values (ties: the
search rank) → Markdown answer with one ``@REC::id@`` marker.

Add-on deals (the request states "Number of products to recommend: N" and a shop voucher): the
requested product phrases are read from the request ("a pair of men's trousers, a unisex cap and
…"); stage 1 assigns each preference to the phrase sharing most words with the turn (else the
session) it came from; stage 2 runs one ``product_search`` (filtered by the voucher's shop) and one
``product_view`` per product, then picks the combination that fits the budget after the voucher
(enumerated) and matches most preferences of each slot, and shows the arithmetic.

The only outside knowledge it uses is an attribute-value vocabulary built from the catalog (public
to every agent through ``product_view``); it never sees the task's gold preferences.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Iterable

from shopping_companion.envs.parsing import format_tool_call as _call
from shopping_companion.envs.parsing import parse_action
from shopping_companion.llm.base import AssistantMessage, Messages, Sampling, StructuredToolCall, ToolSchemas
from shopping_companion.sentences import split_sentences
from shopping_companion.types import Product

_CUES = re.compile(
    r"\b(i|i'm|i've|my|me)\b.*\b(always|prefer|love|only|go for|reach for|stick|trust|comfortable|"
    r"suits?|works?|end up|keep|favou?rite|habit|signature|pick|choose|take|gravitat\w*|happier|"
    r"camp|must|look for|buy|wear|like)\b",
    re.IGNORECASE,
)

_STOP = set(
    """a an the i me my we you your it is are be to of for and or in on at with that this those can could
    would will please help find need new pick one which what who how fits fit usually like likes liked
    something suits suit taste recommend recommendation actually wear shopping today looking look know
    style good time replace old matches match preferences preference think you'd i'd i'm im want get some
    buy find by from as so do does any about our out up""".split()
)

_MEM_QUERIES = [
    "what I usually like to wear or buy",
    "my favourite colour, fabric and fit",
    "things I always choose when shopping",
    "what I find comfortable and what I avoid",
]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9][a-z0-9'\-]*", text.lower())


def build_attribute_vocabulary(products: Iterable[Product], min_count: int = 20, max_words: int = 3) -> dict[str, str]:
    """Map each frequent short attribute value (lowercased) to its attribute key.

    Values that are numbers, years or longer than ``max_words`` words are skipped.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for p in products:
        for k, v in p.attributes.items():
            v = str(v).strip()
            if not v or len(v.split()) > max_words or re.fullmatch(r"[\d.,\s%-]+", v):
                continue
            if v.lower() in {"na", "n/a", "no", "yes", "none", "other", "regular", "true", "false"}:
                continue
            counts[(v.lower(), k)] += 1
    vocab: dict[str, str] = {}
    for (v, k), n in counts.most_common():
        if n >= min_count and v not in vocab:
            vocab[v] = k
    return vocab


class ReferencePolicy:
    """Rule-based baseline implementing :class:`~shopping_companion.llm.base.ChatBackend`."""

    name = "reference-policy (rule-based baseline, not an LLM)"

    def __init__(
        self, vocabulary: dict[str, str], n_view_sessions: int = 3, n_view_products: int = 8, n_view_bundle: int = 4
    ):
        if not vocabulary:
            raise ValueError("vocabulary: must not be empty (build it with build_attribute_vocabulary)")
        self.vocabulary = vocabulary
        self.n_view_sessions = n_view_sessions
        self.n_view_products = n_view_products
        self.n_view_bundle = n_view_bundle  # per item of an add-on deal (N views must fit the observation limit)
        # longest values first so "navy blue" wins over "blue"
        self._values = sorted(vocabulary, key=lambda v: (-len(v), v))
        self._patterns = {v: re.compile(r"(?<![a-z])" + re.escape(v) + r"(?![a-z])") for v in self._values}

    # ------------------------------------------------------------------ protocol

    def chat(
        self, messages: Messages, tools: ToolSchemas | None = None, sampling: Sampling | None = None
    ) -> AssistantMessage:
        names = {t["function"]["name"] for t in tools or []}
        n_assistant = sum(m["role"] == "assistant" for m in messages)
        last_tool = [m for m in messages if m["role"] == "tool"][-1:] or [None]
        if "mem_search" in names:
            text = self._stage1(messages, n_assistant, last_tool[0])
        else:
            text = self._stage2(messages, n_assistant, last_tool[0])
        return AssistantMessage(content=text)

    # ------------------------------------------------------------------ stage 1

    def _stage1(self, messages: Messages, turn: int, last: dict[str, Any] | None) -> str:
        request = _request(messages)
        if turn == 0:
            return _call("mem_search", {"queries": [request] + _MEM_QUERIES, "top_k": 15})
        data = _load(last)
        if turn == 1 and data.get("results"):
            best: dict[str, float] = {}
            for h in data["results"]:
                best[h["session_id"]] = max(best.get(h["session_id"], -1.0), float(h.get("score", 0)))
            ids = sorted(best, key=lambda s: -best[s])[: self.n_view_sessions]
            return _call("mem_view", {"session_ids": ids})
        prefs = []
        seen: set[tuple[int, str]] = set()
        terms = _deal_terms(messages)
        phrases = _product_phrases(request, terms["n"]) if terms["n"] > 1 else []
        for s in data.get("sessions", []):
            session_text = " ".join(t.get("content", "") for t in s.get("turns", []) if t.get("role") == "user")
            for t in s.get("turns", []):
                if t.get("role") != "user" or not _CUES.search(t.get("content", "")):
                    continue
                text = t["content"].lower()
                slot = _best_slot(phrases, text, session_text) if phrases else 0
                for v in self._values:
                    attr = self.vocabulary[v]
                    if (slot, attr) in seen or not self._patterns[v].search(text):
                        continue
                    seen.add((slot, attr))
                    prefs.append(
                        {
                            "attribute": attr,
                            "value": v,
                            "polarity": "want",
                            "slot": slot,
                            "evidence": s.get("session_id"),
                        }
                    )
        return "<answer>" + json.dumps({"preferences": prefs}, ensure_ascii=False) + "</answer>"

    # ------------------------------------------------------------------ stage 2

    def _stage2(self, messages: Messages, turn: int, last: dict[str, Any] | None) -> str:
        request, prefs = _stage2_inputs(messages)
        terms = _deal_terms(messages)
        if terms["n"] > 1:
            return self._stage2_bundle(messages, request, prefs, terms)
        values = [str(p.get("value", "")) for p in prefs if p.get("polarity", "want") == "want"]
        if turn == 0:
            words = [w for w in _words(request) if w not in _STOP]
            query = " ".join(words + values) or request
            return _call("product_search", {"query": query, "top_k": 20})
        data = _load(last)
        if turn == 1:
            ids = [h["product_id"] for h in data.get("results", [])][: self.n_view_products]
            if ids:
                return _call("product_view", {"product_ids": ids})
            return "<answer>I could not find any product matching the request.</answer>"
        products = data.get("products", [])
        if not products:
            return "<answer>I could not verify any product for the request.</answer>"

        def matches(p: dict[str, Any]) -> list[str]:
            blob = " ".join([p.get("title", "")] + [str(x) for x in (p.get("attributes") or {}).values()]).lower()
            return [v for v in values if v and v.lower() in blob]

        best = max(products, key=lambda p: (len(matches(p)), -products.index(p)))
        met = matches(best)
        lines = [
            f"**Recommendation: {best.get('title', '')}** @REC::{best['product_id']}@",
            "",
            f"- Price: {best.get('price')} {best.get('currency') or ''}".rstrip(),
            f"- Shop: {best.get('shop_id', '')}",
            "- Preferences confirmed from its product page: " + (", ".join(met) if met else "none"),
        ]
        return "<answer>" + "\n".join(lines) + "</answer>"

    # ------------------------------------------------------------------ stage 2, add-on deals

    def _stage2_bundle(
        self, messages: Messages, request: str, prefs: list[dict[str, Any]], terms: dict[str, Any]
    ) -> str:
        n, shop = terms["n"], terms["shop_id"]
        phrases = _product_phrases(request, n) or [request.split("\n", 1)[0]] * n
        calls = _tool_history(messages)  # [(tool name, arguments, parsed result)] in call order
        views = [res for name, _, res in calls if name == "product_view"]
        slot = len(views)
        if slot < n:
            last_name, _, last_res = calls[-1] if calls else (None, None, {})
            searches_since_view = 0
            for name, _, _ in reversed(calls):
                if name != "product_search":
                    break
                searches_since_view += 1
            if last_name == "product_search" and last_res.get("results"):
                ids = [h["product_id"] for h in last_res["results"]][: self.n_view_bundle]
                return _call("product_view", {"product_ids": ids})
            # stage-1 slots steer the query only when they are informative (not all on one slot)
            informative = len({int(p.get("slot", 0) or 0) for p in prefs}) > 1
            values = [
                str(p.get("value", ""))
                for p in prefs
                if informative and p.get("polarity", "want") == "want" and int(p.get("slot", 0) or 0) == slot
            ]
            words = [w for w in _words(phrases[slot]) if w not in _STOP and w != "pair"]
            if searches_since_view == 0:
                query = " ".join(words + values) or phrases[slot]
            elif searches_since_view == 1:
                query = " ".join(words) or phrases[slot]  # nothing found: drop the preference words
            else:
                return "<answer>I could not find products for every item of the bundle in the voucher's shop.</answer>"
            args: dict[str, Any] = {"query": query, "top_k": 20}
            if shop:
                args["shop_id"] = shop
            return _call("product_search", args)
        return self._bundle_answer(views[:n], prefs, terms)

    def _bundle_answer(self, views: list[dict[str, Any]], prefs: list[dict[str, Any]], terms: dict[str, Any]) -> str:
        import itertools

        n = len(views)
        cands: list[list[tuple[dict[str, Any], list[str]]]] = []
        informative = len({int(p.get("slot", 0) or 0) for p in prefs}) > 1
        for slot, res in enumerate(views):
            # a candidate is scored on its slot's values, or on every wanted value when stage 1
            # could not tell the slots apart (values of other items rarely fit this one)
            values = [
                str(p.get("value", ""))
                for p in prefs
                if p.get("polarity", "want") == "want" and (not informative or int(p.get("slot", 0) or 0) == slot)
            ]
            row = []
            for p in res.get("products", [])[: self.n_view_bundle]:
                if terms["shop_id"] and p.get("shop_id") != terms["shop_id"]:
                    continue
                blob = " ".join([p.get("title", "")] + [str(x) for x in (p.get("attributes") or {}).values()]).lower()
                row.append((p, [v for v in values if v and v.lower() in blob]))
            if not row:
                return "<answer>I could not verify a product from the voucher's shop for every item.</answer>"
            cands.append(row)

        def cost(combo) -> tuple[float | None, float]:
            prices = [c[0].get("price") for c in combo]
            if any(not isinstance(x, (int, float)) for x in prices):
                return None, 0.0
            total = float(sum(prices))
            disc = terms["discount"] if terms["discount"] and total >= terms["min_spend"] - 1e-9 else 0.0
            return total, disc

        best, best_key = None, None
        for combo in itertools.product(*cands):
            if len({c[0]["product_id"] for c in combo}) < n:
                continue
            total, disc = cost(combo)
            fits = total is not None and (terms["budget"] is None or total - disc <= terms["budget"] + 1e-6)
            key = (fits, sum(len(c[1]) for c in combo), -sum(row.index(c) for row, c in zip(cands, combo)))
            if best_key is None or key > best_key:
                best, best_key = combo, key
        if best is None:
            return "<answer>I could not put together distinct products for every item.</answer>"
        total, disc = cost(best)
        cur = next((c[0].get("currency") for c in best if c[0].get("currency")), "") or ""
        lines = ["**Bundle recommendation**", ""]
        for i, (p, met) in enumerate(best):
            lines.append(
                f"{i + 1}. {p.get('title', '')} @REC::{p['product_id']}@ — {p.get('price')} {cur}, shop "
                f"{p.get('shop_id', '')}; preferences confirmed: {', '.join(met) if met else 'none'}"
            )
        if total is not None:
            pay = total - disc
            lines += [
                "",
                f"Total {total:g} {cur} − voucher {disc:g} = {pay:g} {cur}"
                + (f" (budget {terms['budget']:g})" if terms["budget"] is not None else ""),
            ]
        return "<answer>" + "\n".join(lines) + "</answer>"


def _load(msg: dict[str, Any] | None) -> dict[str, Any]:
    if not msg:
        return {}
    try:
        data = json.loads(msg["content"])
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def _request(messages: Messages) -> str:
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    m = re.search(r"Shopping request:\s*(.*?)(?:\n\n|$)", user, re.S)
    return (m.group(1) if m else user).strip()


def _stage2_inputs(messages: Messages) -> tuple[str, list[dict[str, Any]]]:
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    prefs: list[dict[str, Any]] = []
    m = re.search(r"(\{\"preferences\".*\})", user, re.S)
    if m:
        try:
            prefs = list(json.loads(m.group(1)).get("preferences", []))
        except ValueError:
            prefs = []
    return _request(messages), prefs


_NUM = r"([\d][\d,]*(?:\.\d+)?)"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _deal_terms(messages: Messages) -> dict[str, Any]:
    """Number of products, voucher shop / discount / minimum spend and budget from the deal lines
    the environment appends to the request (``prompts.deal_terms``); defaults for a single product."""
    user = next((m["content"] for m in messages if m["role"] == "user"), "") or ""
    out: dict[str, Any] = {"n": 1, "shop_id": None, "discount": 0.0, "min_spend": 0.0, "budget": None}
    m = re.search(r"Number of products to recommend:\s*(\d+)", user)
    if m:
        out["n"] = max(1, int(m.group(1)))
    m = re.search(
        r"Voucher:\s*" + _NUM + r"\S*\s.*?off when spending at least\s*" + _NUM + r"\S*.*?in shop (\S+)", user
    )
    if m:
        out.update(discount=_num(m.group(1)), min_spend=_num(m.group(2)), shop_id=m.group(3))
    m = re.search(r"Budget: at most\s*" + _NUM, user)
    if m:
        out["budget"] = _num(m.group(1))
    return out


_PHRASE_END = set("there here in from all for at on with please to that which so both together".split())


_ITEM_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+|\s+plus\s+")


def _phrase(text: str) -> str:
    """``text``'s leading words up to the first word that ends an item phrase ("… shoes there")."""
    words: list[str] = []
    for w in text.split():
        if words and w.lower().strip(".") in _PHRASE_END:
            break
        words.append(w.strip("."))
    return " ".join(words)


def _product_phrases(request: str, n: int) -> list[str]:
    """The ``n`` requested product phrases of an add-on request ("a pair of men's trousers, a unisex
    cap and a unisex wallet" → three phrases), read from the sentence listing the most items (items
    introduced by an article; else the list after the last buying verb, "I want to buy bras and
    backpacks"); [] when no sentence lists ``n`` items."""
    sentences = split_sentences(request.split("\n", 1)[0])
    best: list[str] = []
    for sent in sentences:
        items = []
        for part in _ITEM_SPLIT.split(sent):
            m = re.search(r"\b(?:an?|one)\s+((?:pair of\s+)?[\w'’\-]+(?:\s+[\w'’\-]+)*)", part, re.I)
            if m:
                items.append(_phrase(m.group(1)))
        if len(items) > len(best):
            best = items
    if len(best) < n:
        for sent in sentences:
            m = re.search(r".*\b(?:buy|get|find|need|want|order|purchase)\s+(.*)", sent, re.I)
            items = [p for p in (_phrase(part) for part in _ITEM_SPLIT.split(m.group(1))) if p] if m else []
            if len(items) >= n:
                best = items
                break
    return best[:n] if len(best) >= n else []


def _best_slot(phrases: list[str], turn_text: str, session_text: str) -> int:
    """The slot whose product phrase shares most content words with the turn (then the session); 0 on no overlap."""

    def score(text: str) -> list[int]:
        ws = set(_words(text.lower()))
        return [
            len({w for w in _words(p) if w not in _STOP and w not in ("pair", "men's", "women's", "unisex")} & ws)
            for p in phrases
        ]

    for text in (turn_text, session_text):
        sc = score(text)
        if max(sc, default=0) > 0:
            return sc.index(max(sc))
    return 0


def _tool_history(messages: Messages) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool name, arguments, parsed JSON result) of every tool call so far, in call order.

    Each assistant turn is read by the environment's parser
    (:func:`~shopping_companion.envs.parsing.parse_action`): a block that does not parse is
    ``("", {})``, listed before the turn's calls as the environment answers it first."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for m in messages:
        if m["role"] != "assistant":
            continue
        structured = []
        for k, tc in enumerate(m.get("tool_calls") or []):
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            structured.append(
                StructuredToolCall(
                    id=str(tc.get("id") or f"call_{k}"),
                    name=str(fn.get("name", "")),
                    arguments=args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False),
                )
            )
        parsed = parse_action(m.get("content") or "", structured=structured or None)
        calls += [("", {})] * len(parsed.tool_errors) + [(c.name, c.arguments) for c in parsed.tool_calls]
    results = [_load(m) for m in messages if m["role"] == "tool"]
    return [(name, args, results[i] if i < len(results) else {}) for i, (name, args) in enumerate(calls)]
