"""The scripted reference policy: a rule-based BASELINE and smoke test, not an LLM.

It follows the two-stage workflow with real tool calls through the same environment as any model:

Stage 1: ``mem_search`` with the instruction and a few generic preference queries → ``mem_view``
of the best sessions → preferences extracted by rules (a catalog attribute value mentioned in a
user turn together with a first-person cue) → ``<answer>`` JSON.

Stage 2: ``product_search`` with the product words of the request plus the preference values →
``product_view`` of the top candidates → the candidate matching most preference values (ties: the
search rank) → Markdown answer with one ``@REC::id@`` marker.

The only outside knowledge it uses is an attribute-value vocabulary built from the catalog (public
to every agent through ``product_view``); it never sees the task's gold preferences.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Iterable

from shopping_companion.llm.base import AssistantMessage, Sampling
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


def build_attribute_vocabulary(
    products: Iterable[Product], min_count: int = 20, max_words: int = 3
) -> dict[str, str]:
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

    def __init__(self, vocabulary: dict[str, str], n_view_sessions: int = 3, n_view_products: int = 8):
        if not vocabulary:
            raise ValueError("vocabulary: must not be empty (build it with build_attribute_vocabulary)")
        self.vocabulary = vocabulary
        self.n_view_sessions = n_view_sessions
        self.n_view_products = n_view_products
        # longest values first so "navy blue" wins over "blue"
        self._values = sorted(vocabulary, key=lambda v: (-len(v), v))
        self._patterns = {v: re.compile(r"(?<![a-z])" + re.escape(v) + r"(?![a-z])") for v in self._values}

    # ------------------------------------------------------------------ protocol

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        sampling: Sampling | None = None,
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

    def _stage1(self, messages: list[dict[str, Any]], turn: int, last: dict[str, Any] | None) -> str:
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
        seen_attr: set[str] = set()
        for s in data.get("sessions", []):
            for t in s.get("turns", []):
                if t.get("role") != "user" or not _CUES.search(t.get("content", "")):
                    continue
                text = t["content"].lower()
                for v in self._values:
                    attr = self.vocabulary[v]
                    if attr in seen_attr or not self._patterns[v].search(text):
                        continue
                    seen_attr.add(attr)
                    prefs.append({"attribute": attr, "value": v, "polarity": "want", "slot": 0,
                                  "evidence": s.get("session_id")})
        return "<answer>" + json.dumps({"preferences": prefs}, ensure_ascii=False) + "</answer>"

    # ------------------------------------------------------------------ stage 2

    def _stage2(self, messages: list[dict[str, Any]], turn: int, last: dict[str, Any] | None) -> str:
        request, prefs = _stage2_inputs(messages)
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
            blob = " ".join(
                [p.get("title", "")] + [str(x) for x in (p.get("attributes") or {}).values()]
            ).lower()
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


def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def _load(msg: dict[str, Any] | None) -> dict[str, Any]:
    if not msg:
        return {}
    try:
        data = json.loads(msg["content"])
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def _request(messages: list[dict[str, Any]]) -> str:
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    m = re.search(r"Shopping request:\s*(.*?)(?:\n\n|$)", user, re.S)
    return (m.group(1) if m else user).strip()


def _stage2_inputs(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    prefs: list[dict[str, Any]] = []
    m = re.search(r"(\{\"preferences\".*\})", user, re.S)
    if m:
        try:
            prefs = list(json.loads(m.group(1)).get("preferences", []))
        except ValueError:
            prefs = []
    return _request(messages), prefs
