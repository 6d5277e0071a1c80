"""Hostile assistant outputs through the evaluation path (the fuzz suite of issue 14).

Two parts:

* :func:`generate_cases`: a seeded generator of DISTINCT hostile assistant turns (distinct by the
  SHA-256 of the canonical JSON of the reply the server sends: content, reasoning channel,
  structured tool calls, finish reason), in the categories of :data:`CATEGORIES`. Each
  :class:`Case` says in which stage (1: memory tools, 2: product tools) and at which assistant
  turn of that stage it is served, and what the environment must do with it (:attr:`Case.expect`).
* :func:`run_fuzz`: drives the cases through the real evaluation runner
  (:func:`shopping_companion.benchmark.evaluate.run_evaluation`) with the real
  :class:`~shopping_companion.llm.openai_backend.OpenAIBackend` talking over HTTP to the scripted
  OpenAI-compatible server of ``tests/openai_server.py`` on 127.0.0.1, and checks every case
  (:func:`check_cases`). It is shared by ``tests/benchmark/test_eval_fuzz.py`` and
  ``benchmarks/bench_fuzz.py``.

The episode around a hostile turn
    Mode ``two_stage`` (hint ``none``), scripted "oracle" policy: stage 1 = ``mem_view`` of the
    task's needle sessions, then ``<answer>`` with the gold preferences; stage 2 =
    ``product_view`` of the reference products, then ``<answer>`` with their ``@REC::id@``
    markers. The hostile turn is served as assistant turn ``case.turn`` (0-based) of stage
    ``case.stage``; the scripted steps continue after it (the script counts the hostile turn out),
    so the episode is exactly the oracle episode with one turn inserted.

The control episode (what "hostile output cannot raise the reward" compares against)
    The same task, trial, seeds and settings, without the hostile turn: the oracle episode itself.
    Every category's batch uses the same keys ``(task_id, trial)`` (episode i = task i % 3, trial
    i // 3), and the control episode of a key does not depend on the case, so the controls are run
    once (one ``run_evaluation`` over the keys of the largest category) and each hostile episode is
    compared with the control of its own key: per episode, never against an average. Every
    control stage earns the maximum, 3.0 (R_z = R_tool = R_fmt = 1: its calls return only gold ids, its answers are the gold ones);
    :attr:`FuzzReport.control_totals` records this and the test asserts it, so "not more than
    the control" means "not more than a perfect stage", and for a turn that must be rejected the
    stricter "the outcome reward R_z of both stages is exactly the control's". (The control used
    to put the *plain invalid turn* :data:`PLAIN_INVALID_TURN` in the hostile turn's place; since
    issue 31 a turn without a valid action costs f_tc, so that control is no perfect stage, and
    a hostile turn that is a well-formed call a tool rejects would score above it, as it should.)

The checks per case (a failure is recorded under one of :data:`FAILURE_KINDS`)
    ``crash``: an exception escaped ``run_evaluation`` (the run did not complete);
    ``hang``: the batch did not finish within its wall-clock bound, or one episode took longer
    than ``episode_bound_s`` and than :data:`HANG_FACTOR` times its batch's median episode
    (measured between the runner's ``start`` and ``end`` events: a loaded machine slows every
    episode of a batch alike, a case that makes the loop stall stands out from the others);
    ``silent_drop``: the results file does not have exactly one line for the episode's key,
    a line is not valid strict UTF-8 + JSON, or ``read_results`` does not re-load every line;
    ``recorded``: the episode's result has an ``error``, or the hostile turn is missing from
    the trajectory (fewer steps than the hostile turn's index), or a reasoning-channel /
    ``finish_reason`` fact of the reply was not kept on the step;
    ``utf8``: the result does not serialise to strict UTF-8 (``model_dump_json().encode()``);
    ``range``: a stage reward is outside its range (``total`` in [0, 3]; ``R_z``, ``R_tool``,
    ``R_fmt`` in [0, 1]; every ``r(u)`` in [0, 1]; all finite);
    ``reward_increase``: the hostile episode's reward exceeds the control's: per stage
    ``reward.total(hostile) > reward.total(control) + 1e-9`` or the episode sum likewise; for a
    case the environment must *reject* (``expect == "reject"``), also any change of the
    outcome reward ``R_z`` of either stage (a rejected turn changes nothing the judge sees);
    ``observation``: for ``expect == "reject"``: the hostile turn executed a tool without error,
    ended the stage, or none of the observations that follow it (tool results, reminder) names
    the problem (contains, case-insensitively, one of ``case.names``).

``expect``
    ``"reject"``: the turn is invalid; nothing may run, the stage goes on, an observation names
    the problem. ``"answer"``: the turn is a (hostile) final answer; the stage ends on it.
    ``"any"``: valid-but-odd or ambiguous (e.g. Lucene syntax in a query, ``1e309``): the
    environment may run it or reject it; only robustness, range and reward are checked.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from shopping_companion.types import EpisodeResult, Task

CATEGORIES = (
    "deep_nesting_text",
    "deep_nesting_structured",
    "huge_arguments",
    "odd_unicode",
    "tags_in_strings",
    "reasoning_channel",
    "truncated_length",
    "many_answers",
    "wrong_types",
    "unknown_ids",
    "lucene_bombs",
    "odd_numbers",
    "duplicate_keys",
    "hostile_preferences",
    "empty_whitespace",
    "garbage_structured",
)

# an episode is a hang only when it also took this many times its batch's median episode
HANG_FACTOR = 10.0
FAILURE_KINDS = ("crash", "hang", "silent_drop", "recorded", "utf8", "range", "reward_increase", "observation")

PLAIN_INVALID_TURN = "I need a moment to weigh the options before I decide what to do."

NEST_NAMES = ("depth", "nest", "deep", "level")
JSON_NAMES = ("json", "parse", "decode", "malformed", "invalid", "expecting", "could not")
SIZE_NAMES = ("too long", "too large", "too big", "limit", "size", "characters", "bytes", "at most", "exceed")
REASONING_NAMES = ("reasoning",)
LENGTH_NAMES = ("length", "truncat", "cut off", "max_tokens", "incomplete", "token limit")
ID_NAMES = ("unknown", "not found", "no such", "does not exist", "not exist", "invalid id", "empty")


@dataclass
class Case:
    """One hostile assistant turn and what must happen to it (module docstring)."""

    category: str
    stage: int  # 1 (memory tools) or 2 (product tools)
    turn: int  # 0-based assistant turn of that stage at which the reply is served
    reply: dict[str, Any]  # a ScriptedOpenAIServer spec: content, reasoning_content, tool_calls, ...
    expect: str = "reject"  # "reject" | "answer" | "any"
    names: tuple[str, ...] = ()  # for "reject": one of these must appear in the observation
    label: str = ""

    @property
    def digest(self) -> str:
        return reply_digest(self.reply)


def reply_digest(reply: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a reply spec (lone surrogates escaped, keys sorted)."""
    return hashlib.sha256(json.dumps(reply, sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


# --------------------------------------------------------------------------- building blocks


def _tc(obj: Any) -> str:
    """A Hermes text tool call; ``obj`` a dict (JSON-encoded, surrogates as escapes) or raw text."""
    body = obj if isinstance(obj, str) else json.dumps(obj)
    return f"<tool_call>{body}</tool_call>"


def _text(content: str, **extra: Any) -> dict[str, Any]:
    return {"content": content, **extra}


def _structured(name: str, arguments: str, content: str = "", **extra: Any) -> dict[str, Any]:
    return {"content": content, "tool_calls": [{"name": name, "arguments": arguments, "id": "call_fuzz_0"}], **extra}


def _nest(depth: int, shape: str, leaf: str = '"x"') -> str:
    """JSON text nested ``depth`` levels: ``list`` [[[…]]], ``dict`` {"a": {…}} or ``mixed``."""
    if shape == "list":
        return "[" * depth + leaf + "]" * depth
    if shape == "dict":
        return '{"a": ' * depth + leaf + "}" * depth
    out = []
    for i in range(depth):
        out.append("[" if i % 2 else '{"k": ')
    tail = "".join("]" if i % 2 else "}" for i in reversed(range(depth)))
    return "".join(out) + leaf + tail


def _call_text(name: str, args_json: str) -> str:
    return '{"name": "%s", "arguments": %s}' % (name, args_json)


_TOOL_FIELDS = {
    1: [
        ("mem_search", "queries", '{"queries": %s, "top_k": 5}'),
        ("mem_search", "top_k", '{"queries": ["what I like"], "top_k": %s}'),
        ("mem_view", "session_ids", '{"session_ids": %s}'),
        ("mem_search", "extra", '{"queries": ["q"], "extra": %s}'),
    ],
    2: [
        ("product_search", "query", '{"query": %s}'),
        ("product_search", "top_k", '{"query": "shirt", "top_k": %s}'),
        ("product_search", "min_price", '{"query": "shirt", "min_price": %s}'),
        ("product_view", "product_ids", '{"product_ids": %s}'),
    ],
}


# --------------------------------------------------------------------------- the generator


def generate_cases(tasks: list[Task], seed: int = 0) -> list[Case]:
    """Distinct hostile turns for episodes of ``tasks`` (ids of the first task are used where a
    case needs a real id). Deterministic for a given ``seed``; duplicates (same reply digest)
    are dropped, so ``len(result)`` is the number of distinct hostile outputs."""
    rng = random.Random(seed)
    task = tasks[0]
    needle = task.needle_session_ids[0]
    ref = task.reference_product_ids[0]
    out: list[Case] = []

    def add(
        cat: str,
        stage: int,
        reply: dict[str, Any],
        expect: str = "reject",
        names: tuple[str, ...] = (),
        turn: int | None = None,
        label: str = "",
    ) -> None:
        out.append(Case(cat, stage, rng.choice((0, 1)) if turn is None else turn, reply, expect, tuple(names), label))

    # -- deep nesting, text <tool_call> and structured arguments, 50..10,000 levels
    depths = [50, 64, 100, 128, 150, 199, 200, 201, 230, 255, 256, 300, 500, 1000, 2500, 5000, 10_000]
    for stage in (1, 2):
        for depth in depths:
            for shape in ("list", "dict", "mixed"):
                tool, fld, tmpl = rng.choice(_TOOL_FIELDS[stage])
                args = tmpl % _nest(depth, shape)
                add(
                    "deep_nesting_text",
                    stage,
                    _text("<think>go</think>" + _tc(_call_text(tool, args))),
                    names=NEST_NAMES + (fld,),
                    label=f"{tool}.{fld} {shape} depth {depth}",
                )
                tool, fld, tmpl = rng.choice(_TOOL_FIELDS[stage])
                add(
                    "deep_nesting_structured",
                    stage,
                    _structured(tool, tmpl % _nest(depth, shape)),
                    names=NEST_NAMES + (fld,),
                    label=f"{tool}.{fld} {shape} depth {depth}",
                )
        for depth in (200, 1000, 10_000):  # the arguments object itself, and the call object
            tool = "mem_search" if stage == 1 else "product_search"
            add(
                "deep_nesting_text",
                stage,
                _text(_tc(_call_text(tool, _nest(depth, "dict", "{}")))),
                names=NEST_NAMES + JSON_NAMES + ("a",),
                label=f"arguments nested {depth}",
            )
            add(
                "deep_nesting_text",
                stage,
                _text(_tc(_nest(depth, "list", "{}"))),
                names=NEST_NAMES + JSON_NAMES,
                label=f"call nested {depth}",
            )

    # -- huge arguments (MBs) and huge id lists
    for stage in (1, 2):
        for mb in (1, 3):
            word = rng.choice(["shirt ", "preference ", "blue cotton ", "x"])
            big = word * (mb * 1_000_000 // len(word))
            if stage == 1:
                add(
                    "huge_arguments",
                    stage,
                    _text(_tc({"name": "mem_search", "arguments": {"queries": [big]}})),
                    names=SIZE_NAMES + ("queries",),
                    label=f"{mb} MB query text",
                )
                add(
                    "huge_arguments",
                    stage,
                    _structured("mem_search", json.dumps({"queries": [big[:-1]], "top_k": 3})),
                    names=SIZE_NAMES + ("queries",),
                    label=f"{mb} MB query structured",
                )
            else:
                add(
                    "huge_arguments",
                    stage,
                    _text(_tc({"name": "product_search", "arguments": {"query": big}})),
                    names=SIZE_NAMES + ("query",),
                    label=f"{mb} MB query text",
                )
                add(
                    "huge_arguments",
                    stage,
                    _structured("product_search", json.dumps({"query": big[:-1], "top_k": 3})),
                    names=SIZE_NAMES + ("query",),
                    label=f"{mb} MB query structured",
                )
        for n in (21, 1000, 100_000, 300_000):
            if stage == 1:
                ids = [needle] + [f"sess-{i}" for i in range(n)]
                add(
                    "huge_arguments",
                    stage,
                    _text(_tc({"name": "mem_view", "arguments": {"session_ids": ids}})),
                    names=SIZE_NAMES + ("session_ids", "too many"),
                    label=f"{n} session ids",
                )
            else:
                ids = [ref] + [f"p:{i}" for i in range(n)]
                add(
                    "huge_arguments",
                    stage,
                    _structured("product_view", json.dumps({"product_ids": ids})),
                    names=SIZE_NAMES + ("product_ids", "too many"),
                    label=f"{n} product ids",
                )
        qs = [f"q{i}" for i in range(50_000)]
        tool = (
            {"name": "mem_search", "arguments": {"queries": qs}}
            if stage == 1
            else {"name": "product_search", "arguments": {"query": " ".join(qs)}}
        )
        add(
            "huge_arguments",
            stage,
            _text(_tc(tool)),
            expect="reject" if stage == 1 else "any",
            names=SIZE_NAMES + ("queries", "query"),
            label="50k queries",
        )
        many_calls = "".join(
            _tc(
                {
                    "name": "mem_search" if stage == 1 else "product_search",
                    "arguments": {"queries": [f"q {i}"]} if stage == 1 else {"query": f"q {i}"},
                }
            )
            for i in range(5000)
        )
        add("huge_arguments", stage, _text(many_calls), expect="any", label="5000 calls in one turn")

    # -- lone surrogates and other odd unicode
    odd = [
        "\ud800",
        "\udfff",
        "\udbff",
        "\udc00\ud800",
        "a\ud800b",
        "\ud83d",
        "\x00",
        "nul\x00inside",
        "\u202ertl\u202c",
        "\u200f\u200e",
        "e" + "\u0301" * 200,
        "\ufeff",
        "\ufffe\uffff",
        "\u2028\u2029",
        "\x1b[31mred\x1b[0m",
        "Z\u0351\u0352\u0353\u0354\u0355" * 300,
        "\U0001f6d2" * 1000,
        "\u00e9" * 200_000,
        "\u0000\u0001\u0002\u0003",
    ]
    for stage in (1, 2):
        for s in odd:
            id_names = ID_NAMES + (SIZE_NAMES if len(s) > 10_000 else ())
            if stage == 1:
                add(
                    "odd_unicode",
                    stage,
                    _text(_tc({"name": "mem_search", "arguments": {"queries": [f"shirt {s}"]}})),
                    expect="any",
                    label=f"query {s[:8]!r}",
                )
                add(
                    "odd_unicode",
                    stage,
                    _text(_tc({"name": "mem_view", "arguments": {"session_ids": [s]}})),
                    names=id_names,
                    label=f"session id {s[:8]!r}",
                )
            else:
                add(
                    "odd_unicode",
                    stage,
                    _structured("product_search", json.dumps({"query": f"shirt {s}"})),
                    expect="any",
                    label=f"query {s[:8]!r}",
                )
                add(
                    "odd_unicode",
                    stage,
                    _structured("product_view", json.dumps({"product_ids": [s]})),
                    names=id_names,
                    label=f"product id {s[:8]!r}",
                )
        for s in odd[:8]:  # raw odd text as the whole message, in the thinking, in a tool name
            add("odd_unicode", stage, _text(s * 3), names=("tool call", "answer"), label=f"raw text {s[:8]!r}")
            add(
                "odd_unicode",
                stage,
                _text(f"<think>{s}</think>" + PLAIN_INVALID_TURN),
                names=("tool call", "answer"),
                label=f"thinking {s[:8]!r}",
            )
            add(
                "odd_unicode",
                stage,
                _text(_tc({"name": f"mem_search{s}", "arguments": {}})),
                names=("unknown", "not available", "allowed", "tool"),
                label=f"tool name {s[:8]!r}",
            )
        # JSON escapes written by the model itself (the text holds a backslash-u sequence)
        for esc in (
            "\\ud800",
            "\\udfff",
            "\\udbff\\udbff",
            "\\u0000",
            "\\ud800\\u0041",
            "\\x41",
            "\\u12",
            "\\uZZZZ",
            "\\",
        ):
            tool = "mem_search" if stage == 1 else "product_search"
            argname = "queries" if stage == 1 else "query"
            val = f'["a{esc}b"]' if stage == 1 else f'"a{esc}b"'
            add(
                "odd_unicode",
                stage,
                _text(_tc('{"name": "%s", "arguments": {"%s": %s}}' % (tool, argname, val))),
                expect="any",
                label=f"escape {esc}",
            )
            add(
                "odd_unicode",
                stage,
                _structured(tool, '{"%s": %s}' % (argname, val)),
                expect="any",
                label=f"escape {esc} structured",
            )

    # -- protocol tags inside JSON strings
    tags = [
        "</tool_call>",
        "<tool_call>",
        "<answer>",
        "</answer>",
        "<think>",
        "</think>",
        "</tool_call><answer>@REC::x@</answer>",
        '<answer>{"preferences": []}</answer>',
        '</tool_call>{"name": "product_view", "arguments": {}}<tool_call>',
    ]
    for stage in (1, 2):
        for t in tags:
            if stage == 1:
                add(
                    "tags_in_strings",
                    stage,
                    _text(_tc({"name": "mem_search", "arguments": {"queries": [f"my {t} style"]}})),
                    expect="any",
                    label=f"query with {t[:20]}",
                )
                add(
                    "tags_in_strings",
                    stage,
                    _structured("mem_search", json.dumps({"queries": [f"a{t}b"]})),
                    expect="any",
                    label=f"structured query with {t[:20]}",
                )
                add(
                    "tags_in_strings",
                    stage,
                    _text(_tc({"name": "mem_view", "arguments": {"session_ids": [f"{needle}{t}"]}})),
                    names=ID_NAMES + (t.lower(),),
                    label=f"id with {t[:20]}",
                )
            else:
                add(
                    "tags_in_strings",
                    stage,
                    _text(_tc({"name": "product_search", "arguments": {"query": f"shirt {t} cotton"}})),
                    expect="any",
                    label=f"query with {t[:20]}",
                )
                add(
                    "tags_in_strings",
                    stage,
                    _structured("product_search", json.dumps({"query": f"a{t}b"})),
                    expect="any",
                    label=f"structured query with {t[:20]}",
                )
                add(
                    "tags_in_strings",
                    stage,
                    _text(_tc({"name": "product_view", "arguments": {"product_ids": [f"{ref}{t}"]}})),
                    names=ID_NAMES + (t.lower(),),
                    label=f"id with {t[:20]}",
                )

    # -- tool calls only in the reasoning channel
    for stage in (1, 2):
        good = (
            {"name": "mem_view", "arguments": {"session_ids": [needle]}}
            if stage == 1
            else {"name": "product_view", "arguments": {"product_ids": [ref]}}
        )
        search = (
            {"name": "mem_search", "arguments": {"queries": ["what do I like"]}}
            if stage == 1
            else {"name": "product_search", "arguments": {"query": "blue shirt"}}
        )
        for key in ("reasoning_content", "reasoning"):
            for content in ("", "Let me look that up.", " ", None):
                for call in (good, search):
                    add(
                        "reasoning_channel",
                        stage,
                        {"content": content, key: "I should call a tool. " + _tc(call)},
                        names=REASONING_NAMES,
                        label=f"{key} content={content!r} {call['name']}",
                    )
            add(
                "reasoning_channel",
                stage,
                {"content": "", key: _tc(good) * 3},
                names=REASONING_NAMES,
                label=f"{key} three calls",
            )
            add(
                "reasoning_channel",
                stage,
                {"content": "", key: f"<think>{_tc(search)}</think>"},
                names=REASONING_NAMES,
                label=f"{key} call in think",
            )
            add(
                "reasoning_channel",
                stage,
                {"content": "", key: "```json\n" + json.dumps(good) + "\n```"},
                names=("tool call", "answer", "reasoning"),
                label=f"{key} fenced json",
            )
            add(
                "reasoning_channel",
                stage,
                {"content": "", key: "\ud800" + _tc(search)},
                names=REASONING_NAMES,
                label=f"{key} surrogate",
            )
        add(
            "reasoning_channel",
            stage,
            {"content": "", "reasoning_content": _tc(good), "reasoning": _tc(search)},
            names=REASONING_NAMES,
            label="both keys",
        )

    # -- finish_reason "length" with a truncated call
    for stage in (1, 2):
        call = json.dumps(
            {"name": "mem_search", "arguments": {"queries": ["what colour do I like", "my usual fabric"], "top_k": 5}}
            if stage == 1
            else {"name": "product_search", "arguments": {"query": "blue cotton shirt for daily wear", "top_k": 10}}
        )
        cuts = sorted({rng.randrange(1, len(call) - 1) for _ in range(12)} | {1, len(call) - 1})
        for cut in cuts:
            add(
                "truncated_length",
                stage,
                _text("<think>ok</think><tool_call>" + call[:cut], finish_reason="length"),
                names=LENGTH_NAMES,
                label=f"text cut at {cut}",
            )
        for cut in cuts[::2]:
            name = "mem_search" if stage == 1 else "product_search"
            args = json.loads(call)["arguments"]
            add(
                "truncated_length",
                stage,
                _structured(name, json.dumps(args)[:cut], finish_reason="length"),
                names=LENGTH_NAMES + JSON_NAMES,
                label=f"structured cut at {cut}",
            )
        add(
            "truncated_length",
            stage,
            _text("<think>" + "hmm " * 5000, finish_reason="length"),
            names=LENGTH_NAMES,
            label="truncated thinking",
        )
        add(
            "truncated_length",
            stage,
            _text("<think>ok</think><tool_call>" + call + "</tool_", finish_reason="length"),
            names=LENGTH_NAMES,
            label="truncated close tag",
        )
        add(
            "truncated_length",
            stage,
            _text("<answer>" + ('{"preferences": [' if stage == 1 else "@REC::"), finish_reason="length"),
            expect="any",
            label="truncated answer",
        )

    # -- many answers, answers then calls
    for stage in (1, 2):
        ans = (
            "<answer>"
            + (
                json.dumps({"preferences": [p.model_dump() for p in task.preferences]})
                if stage == 1
                else f"@REC::{ref}@"
            )
            + "</answer>"
        )
        call = _tc(
            {"name": "mem_view", "arguments": {"session_ids": [needle]}}
            if stage == 1
            else {"name": "product_view", "arguments": {"product_ids": [ref]}}
        )
        for k in (2, 3, 10, 1000):
            add("many_answers", stage, _text(ans * k), expect="any", label=f"{k} answers")
        for k in (1, 2, 50):
            add("many_answers", stage, _text(ans + call * k), expect="any", label=f"answer then {k} calls")
            add("many_answers", stage, _text(call * k + ans), expect="any", label=f"{k} calls then answer")
        add("many_answers", stage, _text("<answer>" + ans + "</answer>"), expect="any", label="nested answer")
        add("many_answers", stage, _text("<answer><answer></answer>"), expect="any", label="unbalanced answers")
        add("many_answers", stage, _text(ans.replace("</answer>", "") * 5), expect="any", label="5 unclosed answers")
        if stage == 2:
            add(
                "many_answers",
                stage,
                _text("<answer>" + "".join(f"@REC::{ref}@" for _ in range(10_000)) + "</answer>"),
                expect="answer",
                label="10k rec markers",
            )
            add(
                "many_answers",
                stage,
                _text("<answer>@REC::\ud800@ @REC::" + ref + "@</answer>"),
                expect="answer",
                label="surrogate rec marker",
            )
            add(
                "many_answers",
                stage,
                _text("<answer>@REC::" + "x" * 100_000 + "@</answer>"),
                expect="answer",
                label="100k-char rec id",
            )

    # -- wrong types for every argument of the four tools
    wrong = {
        ("mem_search", "queries"): [None, True, 5, 2.5, [], [1], [None], [[]], {}, {"a": "b"}, [True], ["ok", 7]],
        ("mem_search", "top_k"): [None, True, False, "ten", 0, -1, 51, 2.5, 10**30, [], {}, [5], "5x"],
        ("mem_view", "session_ids"): [None, True, 5, "", [], [1], [None], [[needle]], {}, {needle: 1}, [True], [2.5]],
        ("product_search", "query"): [None, True, 5, 2.5, [], ["a", "b"], {}, {"q": "x"}, [None], False],
        ("product_search", "shop_id"): [True, 7, 2.5, [], ["shop"], {}, {"id": "x"}],
        ("product_search", "min_price"): [True, "cheap", -5, -0.01, [], [1], {}, "1e2x"],
        ("product_search", "max_price"): [False, "dear", -1, [], [100], {}, {"v": 1}],
        ("product_search", "top_k"): [None, True, "many", 0, -3, 51, 1000, 3.7, [], {}, [10]],
        ("product_view", "product_ids"): [None, True, 5, "", [], [1], [None], [[ref]], {}, {ref: 1}, [False], [1.5]],
    }
    base = {
        "mem_search": {"queries": ["what do I like"]},
        "mem_view": {},
        "product_search": {"query": "shirt"},
        "product_view": {},
    }
    for (tool, fld), values in wrong.items():
        stage = 1 if tool.startswith("mem_") else 2
        names = (fld, fld.replace("_ids", " id")) if fld.endswith("_ids") else (fld,)
        for v in values:
            args = dict(base[tool])
            args[fld] = v
            if rng.random() < 0.5:
                add(
                    "wrong_types",
                    stage,
                    _text(_tc({"name": tool, "arguments": args})),
                    names=names,
                    label=f"{tool}.{fld}={v!r}"[:80],
                )
            else:
                add(
                    "wrong_types",
                    stage,
                    _structured(tool, json.dumps(args)),
                    names=names,
                    label=f"{tool}.{fld}={v!r}"[:80],
                )
    # a missing required argument, arguments null
    for tool, fld in (
        ("mem_search", "queries"),
        ("mem_view", "session_ids"),
        ("product_search", "query"),
        ("product_view", "product_ids"),
    ):
        stage = 1 if tool.startswith("mem_") else 2
        add("wrong_types", stage, _text(_tc({"name": tool, "arguments": {}})), names=(fld,), label=f"{tool} no {fld}")
        add("wrong_types", stage, _structured(tool, "{}"), names=(fld,), label=f"{tool} no {fld} structured")
        add(
            "wrong_types",
            stage,
            _text(_tc({"name": tool, "arguments": None})),
            names=(fld, "arguments"),
            label=f"{tool} arguments null",
        )

    # -- unknown / empty ids in product_view and mem_view
    for stage in (1, 2):
        tool, fld, known = ("mem_view", "session_ids", needle) if stage == 1 else ("product_view", "product_ids", ref)
        idsets = [
            ["nope-1"],
            [""],
            ["", ""],
            [" "],
            ["\t\n"],
            [known + "x"],
            [known.upper()],
            [known, "nope-2"],
            ["nope-3", known],
            [known, ""],
            [known, " ", "nope-4"],
            [f"{known}\x00"],
            ["../../etc/passwd"],
            ["*"],
            ["null"],
            [known * 50],
        ]
        for ids in idsets:
            partial = known in ids
            unknown = [i for i in ids if i != known]
            names = ID_NAMES + tuple(i for i in unknown if len(i.strip()) >= 5 and "\x00" not in i)
            add(
                "unknown_ids",
                stage,
                _text(_tc({"name": tool, "arguments": {fld: ids}})),
                expect="any" if partial else "reject",
                names=names,
                label=f"{ids!r}"[:80],
            )

    # -- Lucene query syntax bombs
    bombs = [
        "*" * 1000,
        "a* " * 500,
        "?" * 300,
        "shirt~" * 200,
        "(" * 5000,
        ")" * 5000,
        "(" * 3000 + "x" + ")" * 3000,
        "/.*.*.*.*.*.*.*a/",
        "/(a+)+b/",
        "title:[* TO *]",
        "price:{0 TO *}",
        "*:*",
        " OR ".join(["a"] * 2000),
        " AND ".join(f"w{i}" for i in range(1500)),
        "+" * 1000,
        "-" * 1000,
        "\\" * 999,
        '"' * 999,
        "a^99999999999",
        "a~99999",
        "field:" * 500,
        "&& || ! NOT AND OR",
        "{!func}sqrt(1)",
        "_exists_:title",
        "shirt AND (NOT OR AND)",
        '"' + "a " * 5000,
        "brand:nike^10 OR *",
        "a" * 40_000,
        " ".join(["x"] * 10_000),
        "[[[[[",
        "~~~",
        "title:/[a-z]{1,1000}{1,1000}/",
    ]
    for stage in (1, 2):
        for q in bombs:
            if stage == 1:
                add(
                    "lucene_bombs",
                    stage,
                    _text(_tc({"name": "mem_search", "arguments": {"queries": [q]}})),
                    expect="any",
                    label=q[:40],
                )
            else:
                add(
                    "lucene_bombs",
                    stage,
                    _text(_tc({"name": "product_search", "arguments": {"query": q, "top_k": 50}})),
                    expect="any",
                    label=q[:40],
                )
                if rng.random() < 0.5:
                    add(
                        "lucene_bombs",
                        stage,
                        _structured("product_search", json.dumps({"query": q, "shop_id": q[:200]})),
                        expect="any",
                        label="shop " + q[:40],
                    )

    # -- odd numbers
    nums = [
        "1e309",
        "-1e309",
        "NaN",
        "-NaN",
        "Infinity",
        "-Infinity",
        "-0",
        "-0.0",
        "0e0",
        "1e-400",
        "5.0",
        "5.5",
        "123456789012345678901234567890",
        "-123456789012345678901234567890",
        "0x10",
        "1_000",
        "+5",
        ".5",
        "5.",
        "01",
        "1e2",
        "1E+2",
        "9" * 5000,
    ]
    for stage in (1, 2):
        for n in nums:
            if stage == 1:
                args = '{"queries": ["what do I like"], "top_k": %s}' % n
                tool = "mem_search"
            else:
                fld = rng.choice(["top_k", "min_price", "max_price"])
                args = '{"query": "shirt", "%s": %s}' % (fld, n)
                tool = "product_search"
            add("odd_numbers", stage, _text(_tc(_call_text(tool, args))), expect="any", label=f"text {n[:20]}")
            add("odd_numbers", stage, _structured(tool, args), expect="any", label=f"structured {n[:20]}")

    # -- duplicate keys
    for stage in (1, 2):
        if stage == 1:
            variants = [
                '{"name": "mem_search", "name": "product_view", "arguments": {"queries": ["a"]}}',
                '{"name": "mem_view", "arguments": {"session_ids": ["%s"]}, "arguments": {"session_ids": ["x"]}}'
                % needle,
                '{"name": "mem_search", "arguments": {"queries": ["a"], "queries": 5}}',
                '{"name": "mem_search", "arguments": {"queries": 5, "queries": ["a"]}}',
                '{"name": "mem_search", "arguments": {"top_k": 3, "top_k": 3, "queries": ["a"], "top_k": 999}}',
                '{"name": "mem_view", "name": "mem_view", "arguments": {"session_ids": ["%s"], "session_ids": []}}'
                % needle,
            ]
        else:
            variants = [
                '{"name": "product_search", "name": "mem_view", "arguments": {"query": "a"}}',
                '{"name": "product_view", "arguments": {"product_ids": ["%s"]}, "arguments": {"product_ids": ["x"]}}'
                % ref,
                '{"name": "product_search", "arguments": {"query": "a", "query": 5}}',
                '{"name": "product_search", "arguments": {"query": 5, "query": "a"}}',
                '{"name": "product_search", "arguments": {"query": "a", "min_price": 1, "min_price": -1}}',
                '{"name": "product_view", "arguments": {"product_ids": ["%s"], "product_ids": [null]}}' % ref,
            ]
        for v in variants:
            add("duplicate_keys", stage, _text(_tc(v)), expect="any", label=v[:60])
            inner = json.loads(v)  # last key wins: what a lax parser would do
            raw_args = v[v.index('"arguments": ') + len('"arguments": ') : -1]
            add(
                "duplicate_keys",
                stage,
                _structured(inner["name"], raw_args),
                expect="any",
                label="structured " + v[:50],
            )

    # -- stage-1 answers with hostile preference JSON
    gold = [p.model_dump() for p in task.preferences]
    hostile_prefs: list[str] = [
        json.dumps({"preferences": gold * 5000}),
        json.dumps({"preferences": [{"attribute": f"a{i}", "value": f"v{i}"} for i in range(20_000)]}),
        json.dumps({"preferences": [{"attribute": "colour\ud800", "value": "blue\udfff"}]}),
        '{"preferences": [{"attribute": "colour", "value": "\\ud800"}]}',
        '{"preferences": [{"attribute": "colour", "value": "blue", "slot": 1e309}]}',
        '{"preferences": [{"attribute": "colour", "value": "blue", "slot": NaN}]}',
        '{"preferences": [{"attribute": "colour", "value": "blue", "slot": -1}]}',
        '{"preferences": [{"attribute": "colour", "value": "blue", "slot": 123456789012345678901234567890}]}',
        '{"preferences": [{"attribute": null, "value": 5}]}',
        '{"preferences": [{"attribute": ["a"], "value": {"b": 1}}]}',
        '{"preferences": [{"attribute": "colour", "value": "blue", "polarity": "maybe"}]}',
        '{"preferences": [{"attribute": "colour", "value": "blue", "extra": "x"}]}',
        '{"preferences": {"attribute": "colour", "value": "blue"}}',
        '{"preferences": null}',
        '{"preferences": [], "preferences": %s}' % json.dumps(gold),
        '{"preferences": %s} trailing garbage' % json.dumps(gold),
        '{"preferences": ' + _nest(300, "list", "{}") + "}",
        '{"preferences": [' + _nest(5000, "dict", "1") + "]}",
        '{"preferences": [{"attribute": "colour", "value": "' + "x" * 2_000_000 + '"}]}',
        '{"preferences": [{"attribute": "colour", "value": "@REC::%s@ </answer><answer>"}]}' % ref,
        '{"preferences": [{"attribute": "</answer>", "value": "<think>"}]}',
        json.dumps(
            {
                "preferences": gold
                + [{"attribute": g["attribute"], "value": g["value"], "polarity": "avoid"} for g in gold]
            }
        ),
        json.dumps({"preferences": [dict(g, value=g["value"] + "\u202e") for g in gold]}),
        json.dumps({"preferences": [dict(g, value=g["value"] + "\x00") for g in gold]}),
        json.dumps({"preferences": [dict(g, attribute=g["attribute"] * 1000) for g in gold]}),
        "[" * 10_000,
        "\ud800",
        "",
        "{}",
        json.dumps(gold),
        "```json\n" + json.dumps({"preferences": gold}) + "\n```",
        json.dumps({"preferences": gold}).replace('"', "'"),
        json.dumps({"preferences": [dict(g, slot=True) for g in gold]}),
        json.dumps({"preferences": [dict(g, slot=0.5) for g in gold]}),
        json.dumps({"preferences": [dict(g, value="") for g in gold]}),
        json.dumps({"preferences": [dict(g, value=" " * 100) for g in gold]}),
    ]
    for i, p in enumerate(hostile_prefs):
        add(
            "hostile_preferences",
            1,
            _text("<think>done</think><answer>" + p + "</answer>"),
            expect="answer",
            label=f"preferences #{i}",
        )
        if i % 3 == 0:
            add(
                "hostile_preferences",
                1,
                _text("<answer>" + p + "</answer>", finish_reason="length"),
                expect="any",
                label=f"preferences #{i} length",
            )

    # -- empty messages, only whitespace
    blanks = [
        "",
        " ",
        "\n",
        "\t",
        "\r\n",
        " \n\t ",
        "\u00a0",
        "\u3000",
        "\u2003\u2009",
        "\u200b",
        " " * 100_000,
        "\n" * 5000,
        "<think></think>",
        "<think> </think>\n",
        "</think>",
    ]
    for stage in (1, 2):
        for b in blanks:
            add("empty_whitespace", stage, _text(b), names=("tool call", "answer"), label=f"{b[:10]!r}")
        add("empty_whitespace", stage, {"content": None}, names=("tool call", "answer"), label="content null")
        add(
            "empty_whitespace",
            stage,
            {"content": None, "tool_calls": []},
            names=("tool call", "answer"),
            label="null, no calls",
        )
        add(
            "empty_whitespace",
            stage,
            {"content": "", "finish_reason": "stop", "usage": None},
            names=("tool call", "answer"),
            label="no usage",
        )
        add("empty_whitespace", stage, _text(_tc("")), names=JSON_NAMES + ("empty",), label="empty tool call")
        add("empty_whitespace", stage, _text("<answer></answer>"), expect="any", label="empty answer")
        add("empty_whitespace", stage, _text("<answer>   \n</answer>"), expect="any", label="blank answer")

    # -- garbage instead of JSON in structured calls
    garbage = [
        "",
        " ",
        "null",
        "[]",
        "[1, 2]",
        "{",
        "}",
        "}{",
        "{}{}",
        "not json",
        "\x00\x01\x02",
        "{'queries': ['a']}",
        '{"queries": ["a"],}',
        "{queries: [a]}",
        '"just a string"',
        "true",
        "0",
        "NaN",
        '{"a": NaN}',
        "<tool_call>{}</tool_call>",
        '{"queries": ["a"]} extra',
        "\ud800",
        '{"queries": ["\\ud800"]',
        "{" * 100_000,
        "]" * 100_000,
        "x" * 1_000_000,
    ]
    for stage in (1, 2):
        tool = "mem_search" if stage == 1 else "product_search"
        for g in garbage:
            exp = "reject" if g not in ("{}",) else "any"
            add(
                "garbage_structured",
                stage,
                _structured(tool, g),
                expect=exp,
                names=JSON_NAMES + SIZE_NAMES + NEST_NAMES + ("arguments", "queries", "query"),
                label=f"{g[:20]!r}",
            )
        for name in (
            "",
            " ",
            "\ud800",
            "unknown_tool",
            "mem_search" if stage == 2 else "product_search",
            "x" * 10_000,
            "functions." + tool,
        ):
            add(
                "garbage_structured",
                stage,
                _structured(name, "{}"),
                names=("unknown", "not available", "allowed", "tool", "name"),
                label=f"name {name[:20]!r}",
            )
        calls = [
            {
                "name": tool,
                "arguments": json.dumps({"queries": [f"q{i}"]} if stage == 1 else {"query": f"q{i}"}),
                "id": f"c{i}",
            }
            for i in range(500)
        ]
        add("garbage_structured", stage, {"content": "", "tool_calls": calls}, expect="any", label="500 calls")
        dup = [{"name": tool, "arguments": "{}", "id": "same"} for _ in range(5)]
        add(
            "garbage_structured",
            stage,
            {"content": "", "tool_calls": dup},
            names=JSON_NAMES + ("queries", "query"),
            label="5 calls one id",
        )
        mixed = {
            "content": _tc({"name": tool, "arguments": {}}),
            "tool_calls": [{"name": tool, "arguments": "{", "id": "m"}],
        }
        add("garbage_structured", stage, mixed, names=JSON_NAMES + ("queries", "query"), label="text and structured")

    # distinct by digest, in generation order
    seen: set[str] = set()
    distinct = []
    for c in out:
        d = c.digest
        if d not in seen:
            seen.add(d)
            distinct.append(c)
    return distinct


# --------------------------------------------------------------------------- the scripted episode


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or [] if isinstance(t, dict)}


def oracle_step(task: Task, stage: int, k: int) -> str:
    """The oracle's ``k``-th assistant turn (0-based, hostile turn counted out) of ``stage``."""
    if stage == 1:
        if k == 0:
            return "<think>open the needle</think>" + _tc(
                {"name": "mem_view", "arguments": {"session_ids": task.needle_session_ids}}
            )
        prefs = [p.model_dump() for p in task.preferences]
        return "<think>done</think><answer>" + json.dumps({"preferences": prefs}) + "</answer>"
    if k == 0:
        return "<think>view it</think>" + _tc(
            {"name": "product_view", "arguments": {"product_ids": task.reference_product_ids}}
        )
    recs = " ".join(f"@REC::{r}@" for r in task.reference_product_ids)
    return f"<think>done</think><answer>These match what you like. {recs}</answer>"


class FuzzScript:
    """Server script: finds the episode (task from the opening message, trial from the sampling
    seed), serves the oracle, and at ``(case.stage, case.turn)`` the hostile reply (with
    ``control=True`` the oracle alone: the control episode)."""

    def __init__(self, tasks: list[Task], by_seed: dict[tuple[str, int], Case | None], control: bool) -> None:
        self.tasks = {f"Shopping request: {t.instruction}": t for t in tasks}
        self.by_seed = by_seed
        self.control = control
        self.unmatched = 0

    def _task(self, body: dict[str, Any]) -> Task | None:
        for m in body.get("messages") or []:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                for key, t in self.tasks.items():
                    if key in m["content"]:
                        return t
                return None
        return None

    def __call__(self, body: dict[str, Any]) -> Any:
        task = self._task(body)
        if task is None:
            self.unmatched += 1
            return {"status": 400, "message": "fuzz script: no task matches the request"}
        case = self.by_seed.get((task.task_id, int(body.get("seed") or 0)))
        names = _tool_names(body)
        stage = 1 if "mem_search" in names else 2
        k = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if case is not None and case.stage == stage and not self.control:
            if k == case.turn:
                return case.reply
            if k > case.turn:
                k -= 1
        return oracle_step(task, stage, k)


# --------------------------------------------------------------------------- running and checking


@dataclass
class Failure:
    kind: str
    category: str
    label: str
    detail: str


@dataclass
class FuzzReport:
    cases: list[Case]
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    episode_s: dict[str, float] = field(default_factory=dict)  # max seconds of one episode per category
    control_totals: Counter = field(default_factory=Counter)  # stage reward totals of the control episodes
    control_episodes: int = 0  # control episodes run (one per key, shared by the categories)

    def count(self, kind: str) -> int:
        return len({(f.category, f.label) for f in self.failures if f.kind == kind})

    def by_category(self) -> dict[str, Counter]:
        out: dict[str, Counter] = defaultdict(Counter)
        for f in self.failures:
            out[f.category][f.kind] += 1
        return out

    def summary(self) -> str:
        per_cat = Counter(c.category for c in self.cases)
        lines = [f"{len(self.cases)} distinct hostile outputs in {len(per_cat)} categories, {self.seconds:.1f} s"]
        lines.append("  " + ", ".join(f"{k}: {self.count(k)}" for k in FAILURE_KINDS))
        lines.append(
            "  control episodes, stage reward totals: "
            + ", ".join(f"{v:g} x{n}" for v, n in sorted(self.control_totals.items()))
        )
        bc = self.by_category()
        for cat in CATEGORIES:
            if cat in per_cat:
                fails = ", ".join(f"{k} {n}" for k, n in sorted(bc.get(cat, Counter()).items())) or "ok"
                lines.append(
                    f"  {cat:24s} {per_cat[cat]:4d} cases, max episode {self.episode_s.get(cat, 0):.1f} s: {fails}"
                )
        return "\n".join(lines)


def _stage_of(res: EpisodeResult, stage: int):
    return next((s for s in res.stages if s.trajectory.stage == stage), None)


def _observation_after(traj, turn: int) -> str:
    """Text of the messages that follow the ``turn``-th assistant message of ``traj``."""
    seen = -1
    out: list[str] = []
    for m in traj.messages:
        if m.role == "assistant":
            seen += 1
            if seen > turn:
                break
            continue
        if seen == turn:
            out.append(m.content or "")
    return "\n".join(out)


def _reward_range(res: EpisodeResult) -> list[str]:
    bad = []
    for st in res.stages:
        r = st.reward
        vals = {"total": (r.total, 3.0)}
        for k in ("R_z", "R_tool", "R_fmt"):
            if k in r.components:
                vals[k] = (r.components[k], 1.0)
        for i, v in enumerate(r.per_tool_call):
            vals[f"r(u{i})"] = (v, 1.0)
        for k, (v, hi) in vals.items():
            if not (isinstance(v, (int, float)) and math.isfinite(v) and -1e-9 <= v <= hi + 1e-9):
                bad.append(f"stage {st.trajectory.stage} {k}={v!r}")
    return bad


def _run_batch(
    label: str,
    tasks,
    cases: list[Case | None],
    backend_factory,
    products,
    make_memory,
    judge,
    path: Path,
    settings,
    control: bool,
    batch_timeout_s: float,
    concurrency: int,
):
    """One ``run_evaluation`` of ``cases`` (episode i = task i % len(tasks), trial i // len(tasks)).
    Returns (exception or None, timed_out, {key: seconds}, {(task_id, trial): case})."""
    from shopping_companion.benchmark.evaluate import derive_seed, run_evaluation
    from tests.openai_server import ScriptedOpenAIServer

    n_tasks = len(tasks)
    trials = max(1, -(-len(cases) // n_tasks))
    by_seed: dict[tuple[str, int], Case | None] = {}
    by_key: dict[tuple[str, int], Case | None] = {}
    for i in range(trials * n_tasks):
        t, trial = tasks[i % n_tasks], i // n_tasks
        c = cases[i] if i < len(cases) else None
        s = derive_seed(settings.sampling.seed, t.task_id, trial)
        assert (t.task_id, s) not in by_seed, "sampling seed collision"
        by_seed[(t.task_id, s)] = c
        by_key[(t.task_id, trial)] = c
    script = FuzzScript(tasks, by_seed, control)
    starts: dict[tuple, float] = {}
    times: dict[tuple, float] = {}
    box: dict[str, BaseException | None] = {"exc": None}

    def on_event(ev: str, key: tuple, t: float) -> None:
        if ev == "start":
            starts[key] = t
        else:
            times[(key[0], key[1])] = t - starts.get(key, t)

    with ScriptedOpenAIServer(script) as srv:
        backend = backend_factory(srv.base_url)
        settings_b = type(settings)(**{**settings.__dict__, "trials": trials})

        def target() -> None:
            try:
                run_evaluation(
                    tasks,
                    backend,
                    products,
                    make_memory,
                    judge,
                    path,
                    settings_b,
                    progress=False,
                    concurrency=concurrency,
                    on_event=on_event,
                )
            except BaseException as e:  # noqa: BLE001 - recorded as a crash
                box["exc"] = e

        th = threading.Thread(target=target, name=f"fuzz-{label}", daemon=True)
        th.start()
        th.join(batch_timeout_s)
        timed_out = th.is_alive()
    now = time.monotonic()
    for key, t0 in starts.items():  # episodes still running when the batch was abandoned
        times.setdefault((key[0], key[1]), now - t0)
    return box["exc"], timed_out, times, by_key


def _read_lines(path: Path) -> tuple[dict[tuple[str, int], list[dict]], list[str]]:
    """Raw lines of the results file by (task_id, trial), and the problems found reading them."""
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    problems = []
    if not path.exists():
        return out, problems
    for n, raw in enumerate(path.read_bytes().split(b"\n")[:-1]):
        try:
            obj = json.loads(raw.decode("utf-8", errors="strict"))
            out[(obj["task_id"], int(obj["trial"]))].append(obj)
        except Exception as e:  # noqa: BLE001
            problems.append(f"line {n + 1}: {type(e).__name__}: {str(e)[:120]}")
    if path.stat().st_size and not path.read_bytes().endswith(b"\n"):
        problems.append("last line is not terminated")
    return out, problems


def run_fuzz(
    cases: list[Case],
    tasks: list[Task],
    products,
    make_memory: Callable[[Task], Any],
    judge,
    workdir: Path,
    *,
    concurrency: int = 4,
    episode_bound_s: float = 60.0,
    batch_timeout_s: float = 600.0,
    timeout_s: float = 60.0,
    log: Callable[[str], None] | None = None,
) -> FuzzReport:
    """Run every case through ``run_evaluation``, one batch per category, beside one batch of
    control episodes shared by the categories, and check them (module docstring). A batch that
    raises is re-run one case per file, so a crash is attributed to the cases that cause it and
    the other cases are still checked. Never raises for a failing case: failures are in the
    report."""
    from shopping_companion.benchmark.evaluate import EvalSettings
    from shopping_companion.benchmark.report import read_results
    from shopping_companion.envs.env import EnvConfig
    from shopping_companion.llm.base import Sampling
    from shopping_companion.llm.openai_backend import OpenAIBackend
    from shopping_companion.types import EpisodeResult

    t_start = time.perf_counter()
    report = FuzzReport(cases=list(cases))
    settings = EvalSettings(trials=1, sampling=Sampling(seed=7, max_tokens=512), env=EnvConfig(max_turns=6))

    def backend_factory(url: str):
        return OpenAIBackend("fuzz", base_url=url, api_key="k", timeout_s=timeout_s, max_retries=0, backoff_s=0.0)

    def fail(kind: str, c: Case, detail: str) -> None:
        report.failures.append(
            Failure(kind, c.category, f"stage {c.stage} turn {c.turn}: {c.label or c.digest[:12]}", detail[:300])
        )

    by_cat: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        by_cat[c.category].append(c)

    def run_group(name: str, group: list[Case | None], control: bool, tasks_: list[Task] | None = None):
        path = workdir / ("control" if control else "hostile") / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        exc, timed_out, times, by_key = _run_batch(
            name,
            tasks_ or tasks,
            list(group),
            backend_factory,
            products,
            make_memory,
            judge,
            path,
            settings,
            control,
            batch_timeout_s,
            concurrency,
        )
        return path, exc, timed_out, times, by_key

    # the control episodes: one batch over the keys of the largest category (module docstring)
    n_keys = max((len(g) for g in by_cat.values()), default=0)
    ctl_path, ctl_exc, ctl_to, _, _ = run_group("all", [None] * n_keys, control=True)
    shared_controls = {} if (ctl_exc or ctl_to) else {(r.task_id, r.trial): r for r in read_results(ctl_path)}
    report.control_episodes = len(shared_controls)
    for r in shared_controls.values():
        report.control_totals.update(round(st.reward.total, 6) for st in r.stages)
    for cat, group in by_cat.items():
        t0 = time.perf_counter()
        if log:
            log(f"fuzz: {cat}: {len(group)} cases")
        if ctl_exc is not None or ctl_to:
            for c in group:
                fail("crash" if ctl_exc else "hang", c, f"CONTROL run failed: {ctl_exc!r}")
            continue
        path, exc, timed_out, times, by_key = run_group(cat, group, control=False)
        units: list[tuple[Path, dict, dict, BaseException | None, bool, dict]] = [
            (path, by_key, times, exc, timed_out, shared_controls)
        ]
        if exc is not None and not timed_out:  # attribute the crash: each case alone, with its own control
            units = []
            for i, c in enumerate(group):
                one_task = [tasks[i % len(tasks)]]
                cp, ce, cto, _, _ = run_group(f"{cat}-{i:04d}", [c], control=True, tasks_=one_task)
                ctl_one = {} if (ce or cto) else {(r.task_id, r.trial): r for r in read_results(cp)}
                for r in ctl_one.values():
                    report.control_totals.update(round(st.reward.total, 6) for st in r.stages)
                p, e, to, tm, bk = run_group(f"{cat}-{i:04d}", [c], control=False, tasks_=one_task)
                units.append((p, bk, tm, e, to, ctl_one))
        for upath, ukeys, utimes, uexc, uto, uctl in units:
            bound_s = (
                max(episode_bound_s, HANG_FACTOR * statistics.median(utimes.values())) if utimes else episode_bound_s
            )
            lines, problems = _read_lines(upath)
            try:
                reloaded = read_results(upath)
            except Exception as e:  # noqa: BLE001
                reloaded = []
                problems.append(f"read_results raised {type(e).__name__}: {e}")
            n_lines = sum(len(v) for v in lines.values())
            if len(reloaded) != n_lines:
                problems.append(f"read_results re-loaded {len(reloaded)} of {n_lines} readable lines")
            for key, c in ukeys.items():
                if c is None:
                    continue
                if uexc is not None:
                    fail("crash", c, f"{type(uexc).__name__}: {uexc}")
                if uto and key not in lines:
                    fail("hang", c, f"batch not finished after {batch_timeout_s:.0f} s")
                secs = utimes.get(key)
                if secs is not None:
                    report.episode_s[c.category] = max(report.episode_s.get(c.category, 0.0), secs)
                    if secs > bound_s:
                        fail("hang", c, f"episode took {secs:.1f} s > {bound_s:.0f} s")
                got = lines.get(key, [])
                if len(got) != 1 or problems:
                    if (uexc is None and not uto) or got or problems:
                        fail(
                            "silent_drop", c, f"{len(got)} readable line(s) for the episode; " + "; ".join(problems[:3])
                        )
                    if len(got) != 1:
                        continue
                try:
                    res = EpisodeResult.model_validate(got[0])
                except Exception as e:  # noqa: BLE001
                    fail("silent_drop", c, f"line does not validate: {type(e).__name__}: {str(e)[:200]}")
                    continue
                _check_one(c, res, uctl.get(key), fail)
        if log:
            log(f"fuzz: {cat}: done in {time.perf_counter() - t0:.1f} s")
    report.seconds = time.perf_counter() - t_start
    return report


def _check_one(c: Case, res: EpisodeResult, ctl: EpisodeResult | None, fail) -> None:
    if res.error is not None:
        fail("recorded", c, f"episode error: {res.error[:200]}")
    try:
        res.model_dump_json().encode("utf-8", errors="strict")
    except Exception as e:  # noqa: BLE001
        fail("utf8", c, f"{type(e).__name__}: {e}")
    bad = _reward_range(res)
    if bad:
        fail("range", c, "; ".join(bad))
    st = _stage_of(res, c.stage)
    if st is None:
        fail("recorded", c, f"stage {c.stage} missing from the result")
        return
    steps = st.trajectory.steps
    if len(steps) <= c.turn:
        fail("recorded", c, f"stage {c.stage} has {len(steps)} step(s); the hostile turn {c.turn} is missing")
        return
    step = steps[c.turn]
    if c.reply.get("finish_reason") == "length" and step.finish_reason != "length":
        fail("recorded", c, f"finish_reason 'length' not kept on the step (got {step.finish_reason!r})")
    rkey = (
        "reasoning_content" if c.reply.get("reasoning_content") else ("reasoning" if c.reply.get("reasoning") else None)
    )
    if rkey and not (step.reasoning or "").strip():
        fail("recorded", c, f"the {rkey} text is not kept on the step")
    # reward vs the control episode
    if ctl is None or ctl.error is not None:
        fail("reward_increase", c, f"no usable control episode ({ctl.error if ctl else 'missing'})")
    else:
        h_tot = sum(s.reward.total for s in res.stages)
        c_tot = sum(s.reward.total for s in ctl.stages)
        if h_tot > c_tot + 1e-9:
            fail("reward_increase", c, f"episode reward {h_tot:.4f} > control {c_tot:.4f}")
        for s in res.stages:
            cs = _stage_of(ctl, s.trajectory.stage)
            if cs is None:
                continue
            if s.reward.total > cs.reward.total + 1e-9:
                fail(
                    "reward_increase",
                    c,
                    f"stage {s.trajectory.stage} reward {s.reward.total:.4f} > control {cs.reward.total:.4f}",
                )
            if c.expect == "reject":
                hz, cz = s.reward.components.get("R_z"), cs.reward.components.get("R_z")
                if hz is not None and cz is not None and abs(hz - cz) > 1e-9:
                    fail(
                        "reward_increase",
                        c,
                        f"stage {s.trajectory.stage} R_z changed by a rejected turn: {hz:.4f} vs control {cz:.4f}",
                    )
    if c.expect == "reject":
        ok_results = [r for r in step.tool_results if r.error is None]
        if ok_results:
            fail("observation", c, f"the invalid turn ran {[r.name for r in ok_results]} without an error")
        if (
            len(steps) == c.turn + 1
            and st.trajectory.termination != "max_turns"
            and st.trajectory.final_answer is not None
            and step.format.has_answer
        ):
            fail("observation", c, "the invalid turn ended the stage")
        obs = _observation_after(st.trajectory, c.turn).lower()
        if c.names and not any(n.lower() in obs for n in c.names):
            fail(
                "observation",
                c,
                f"no observation names the problem (want one of {list(c.names)[:6]}); got {obs[:200]!r}",
            )
    elif c.expect == "answer":
        if len(steps) != c.turn + 1:
            fail("observation", c, f"the answer did not end stage {c.stage} ({len(steps)} steps)")
