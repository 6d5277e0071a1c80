"""Malformed agent output through the real environment (real BM25 index, real memory store, rule
judge, Eq. 11 format reward): >= 200 generated cases (seeded), in both stages.

Categories: broken JSON (text blocks and structured OpenAI calls), wrong argument types, unknown
tools, missing/broken answer tags, broken thinking tags, repeated identical calls, enormous
outputs, Lucene query syntax, unicode. For every case: no exception; every bad call yields an error
observation (counted exactly); a turn with neither a call nor an answer yields the reminder; and
the format indicators of the finished stage are what Eq. 11 says (f_tc = 0 iff a tool-call block
or structured call did not parse, or the stage made no tool call, or a turn without an answer held
no parsed call; f_th = 0 iff thinking tags were malformed; f_ans = 0 iff the stage ended without a
parsable answer; f_rec = 0 iff stage 2's answer lacked well-formed markers; every indicator is 0
for a stage without a valid action, issue 31: see ``_expected``).

Valid-but-odd calls (Lucene syntax, unicode text) are not errors: they must return a normal
observation (possibly with zero results) and keep f_tc = 1.

The count and the per-category breakdown are printed (run with ``-s``) and asserted.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from shopping_companion.envs.parsing import MAX_PREFERENCES
from shopping_companion.llm.base import AssistantMessage, StructuredToolCall
from tests.env_support import EnvKit, make_single_tasks

pytestmark = pytest.mark.slow

REMINDER = "Your message contained neither a tool call nor a final answer"
MAX_TURNS = 3
CALL_LIMIT = 16


@dataclass
class Case:
    category: str
    stage: int
    action: Any  # str | AssistantMessage
    n_err: int | None  # error observations expected from `action` (None: a valid call, 0 errors)
    f_tc: float = 1.0
    f_th: float = 1.0
    finish: str = "answer"  # "answer": finish with a valid answer; "repeat": repeat until max_turns; "ends"
    f_ans: float = 1.0
    f_rec: float | None = None  # stage 2 only; None: 1.0 when finished with a valid answer
    pre: list[str] = field(default_factory=list)  # valid actions before `action`
    acts: bool = True  # `action` holds a tool call that parsed (a valid action of a turn without an answer)
    n_obs: int | None = None  # total observations expected (default: n_err, or 1 for valid calls)


def _tc(obj: Any) -> str:
    return "<tool_call>" + (obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)) + "</tool_call>"


def _valid(stage: int, task, rng: random.Random, text: str | None = None) -> dict:
    q = (
        text
        if text is not None
        else f"{rng.choice(['what do I like', 'favourite colour', 'shoes I wear'])} {rng.randrange(10**6)}"
    )
    if stage == 1:
        return {"name": "mem_search", "arguments": {"queries": [q], "top_k": 5}}
    return {"name": "product_search", "arguments": {"query": q, "top_k": 5}}


def _broken_json(valid: str, rng: random.Random) -> list[str]:
    cut = rng.randrange(5, len(valid) - 2)
    return [
        valid[:cut],  # truncated
        valid.replace('"', "'"),  # single quotes
        valid[:-1],  # missing closing brace
        valid[:-1] + ",}",  # trailing comma
        valid.replace('"name"', "name").replace('"arguments"', "arguments"),  # unquoted keys
        valid.replace('"top_k": 5', '"top_k": True'),  # Python literal
        valid + valid,  # two objects back to back
        valid.replace("{", "{/* c */", 1),  # comment
        "",  # empty block
        "[" * 50_000 + "]" * 50_000,  # pathologically deep nesting
        "```json\n" + valid[:cut] + "\n```",  # fenced and truncated
        "{'name': None}",
        "null",  # JSON, but not a call object
        '{"arguments": {}}',  # missing name
        '{"name": "x", "arguments": "{not json"}',  # arguments string not JSON
        '{"name": "x", "arguments": 5}',  # arguments not an object
        '{"name": "x", "arguments": [1, 2]}',
    ]


def _cases(task, rng: random.Random) -> list[Case]:
    ref = task.reference_product_ids[0]
    needle = task.needle_session_ids[0]
    out: list[Case] = []
    for stage in (1, 2):
        valid = json.dumps(_valid(stage, task, rng))
        # -- broken JSON: text blocks
        for body in _broken_json(valid, rng):
            out.append(Case("broken_json", stage, _tc(body), n_err=1, f_tc=0.0))
        # two broken blocks and one good call in one turn
        out.append(
            Case(
                "broken_json",
                stage,
                _tc("{oops") + _tc(_valid(stage, task, rng)) + _tc("}{"),
                n_err=2,
                f_tc=0.0,
                n_obs=3,
            )
        )
        # unclosed and stray tool-call tags
        out.append(Case("broken_json", stage, "<tool_call>" + valid, n_err=1, f_tc=0.0))
        out.append(Case("broken_json", stage, valid + "</tool_call>", n_err=1, f_tc=0.0))
        out.append(Case("broken_json", stage, "<tool_call><tool_call>" + valid + "</tool_call>", n_err=1, f_tc=0.0))
        # -- broken JSON: structured OpenAI tool calls (each error carries the server's call id)
        name = "mem_search" if stage == 1 else "product_search"
        for k, args in enumerate(['{"query": "x"', "{'queries': ['x']}", "[1]", "nul", '"a string"', "{" * 3000]):
            msg = AssistantMessage(
                content="", tool_calls=[StructuredToolCall(id=f"srv-{stage}-{k}", name=name, arguments=args)]
            )
            out.append(Case("broken_json", stage, msg, n_err=1, f_tc=0.0))
        msg = AssistantMessage(
            content="", tool_calls=[StructuredToolCall(id=f"srv-{stage}-noname", name="", arguments="{}")]
        )
        out.append(Case("broken_json", stage, msg, n_err=1, f_tc=0.0))

        # -- wrong argument types (valid JSON, rejected by the tool: f_tc stays 1)
        if stage == 1:
            bad_args = [
                ("mem_search", {"queries": 5}),
                ("mem_search", {"queries": []}),
                ("mem_search", {"queries": [1, 2]}),
                ("mem_search", {"queries": ["a"], "top_k": "ten"}),
                ("mem_search", {"queries": ["a"], "top_k": 0}),
                ("mem_search", {"queries": ["a"], "top_k": 51}),
                ("mem_search", {"queries": ["a"], "top_k": True}),
                ("mem_search", {"queries": ["a"], "top_k": 2.5}),
                ("mem_search", {"queries": None}),
                ("mem_search", {}),
                ("mem_search", {"queries": ["a"], "colour": "red"}),
                ("mem_search", {"queries": [" "]}),
                ("mem_search", {"queries": ["q"] * 11}),
                ("mem_view", {"session_ids": needle}),
                ("mem_view", {"session_ids": []}),
                ("mem_view", {"session_ids": [1]}),
                ("mem_view", {"session_ids": ["nope-1"]}),
                ("mem_view", {"session_ids": [f"s{i}" for i in range(11)]}),
                ("mem_view", {}),
                ("mem_view", {"session_ids": {"a": 1}}),
            ]
        else:
            bad_args = [
                ("product_search", {"query": 5}),
                ("product_search", {"query": ""}),
                ("product_search", {"query": None}),
                ("product_search", {"query": "x", "min_price": -5}),
                ("product_search", {"query": "x", "max_price": []}),
                ("product_search", {"query": "x", "top_k": 1000}),
                ("product_search", {"query": "x", "shop_id": 7}),
                ("product_search", {"query": "x", "colour": "red"}),
                ("product_search", {"query": "x", "min_price": True}),
                ("product_search", {"query": "x", "min_price": 900, "max_price": 10}),
                ("product_search", {}),
                ("product_search", {"query": "x", "top_k": "many"}),
                ("product_search", {"query": ["a", "b"]}),
                ("product_view", {"product_ids": ref}),
                ("product_view", {"product_ids": []}),
                ("product_view", {"product_ids": [None]}),
                ("product_view", {"product_ids": ["x"] * 21}),
                ("product_view", {"product_ids": ["nope:1"]}),
                ("product_view", {"product_ids": {"a": 1}}),
                ("product_view", {}),
            ]
        for n, a in bad_args:
            out.append(Case("wrong_types", stage, _tc({"name": n, "arguments": a}), n_err=1))

        # -- unknown tools
        other = "product_view" if stage == 1 else "mem_view"
        for n in [
            "buy_now",
            "MEM_SEARCH",
            "product search",
            "mem-search",
            "search",
            "\u202emem_search",
            "mem_search\u200b",
            "🛒",
            other,
            "functions.mem_search",
            "x" * 500,
        ]:
            out.append(Case("unknown_tools", stage, _tc({"name": n, "arguments": {}}), n_err=1))
        for n in ["", "   ", 5, None, ["mem_search"]]:
            out.append(Case("unknown_tools", stage, _tc({"name": n, "arguments": {}}), n_err=1, f_tc=0.0))

        # -- missing answer tags (repeated until max_turns: f_ans = 0)
        for a in [
            "I think I have enough information now.",
            "<answer>unclosed",
            "done </answer>",
            "<ANSWER>x</ANSWER>",
            "<answer/>",
            "<think><answer>inside thinking</answer></think>",
            "answer: {}",
            "```json\n{}\n```",
            "<Answer>x</Answer>",
            "＜answer＞fullwidth＜/answer＞",
        ]:
            out.append(
                Case(
                    "missing_answer",
                    stage,
                    a,
                    n_err=1,
                    finish="repeat",
                    f_ans=0.0,
                    f_rec=0.0 if stage == 2 else None,
                    acts=False,
                )
            )
        # answers that end the stage but are not acceptable
        if stage == 1:
            for a in [
                "<answer>not json</answer>",
                '<answer>{"preferences": "x"}</answer>',
                "<answer>[1, 2, 3]</answer>",
                "<answer></answer>",
                '<answer>{"preferences": [{"attribute": "c", "value": "v", "polarity": "maybe"}]}</answer>',
            ]:
                out.append(Case("missing_answer", stage, a, n_err=0, finish="ends", f_ans=0.0))
        else:
            out.append(
                Case("missing_answer", stage, "<answer>   </answer>", n_err=0, finish="ends", f_ans=0.0, f_rec=0.0)
            )
            for a in [
                "<answer>no markers at all</answer>",
                "<answer>@REC:x@ and @rec::y@</answer>",
                f"<answer>@REC::{ref}@ and @REC::@</answer>",
                "<answer>@REC::two words@</answer>",
            ]:
                out.append(Case("missing_answer", stage, a, n_err=0, finish="ends", f_ans=1.0, f_rec=0.0))

        # -- thinking tags
        # the call is inside the unclosed thinking: not a call, so the turn holds no valid action
        out.append(
            Case("think_tags", stage, "<think>unclosed " + _tc(_valid(stage, task, rng)), n_err=1, f_th=0.0, acts=False)
        )
        out.append(
            Case(
                "think_tags",
                stage,
                "<think>a<think>b</think></think>" + _tc(_valid(stage, task, rng)),
                n_err=None,
                f_th=0.0,
            )
        )
        out.append(
            Case("think_tags", stage, "<think>a</think>x</think>" + _tc(_valid(stage, task, rng)), n_err=None, f_th=0.0)
        )
        out.append(Case("think_tags", stage, "leading</think>" + _tc(_valid(stage, task, rng)), n_err=None, f_th=1.0))

        # -- repeated identical calls: within a turn, and across turns
        for k in (2, 3, 6):
            call = _tc(_valid(stage, task, rng))
            out.append(Case("repeated_calls", stage, call * k, n_err=k - 1, n_obs=k))
        call = _tc(_valid(stage, task, rng))
        out.append(Case("repeated_calls", stage, call, n_err=1, pre=[call]))
        view = _tc(
            {"name": "mem_view", "arguments": {"session_ids": [needle]}}
            if stage == 1
            else {"name": "product_view", "arguments": {"product_ids": [ref]}}
        )
        out.append(Case("repeated_calls", stage, view, n_err=1, pre=[view]))
        # same call with the keys in another order is still the same call
        args = _valid(stage, task, rng)["arguments"]
        tool = _valid(stage, task, rng)["name"]
        a1 = '{"name": "%s", "arguments": %s}' % (tool, json.dumps(args))
        a2 = '{"arguments": %s, "name": "%s"}' % (json.dumps(dict(reversed(list(args.items())))), tool)
        out.append(Case("repeated_calls", stage, _tc(a2), n_err=1, pre=[_tc(a1)]))

        # -- enormous outputs
        out.append(Case("enormous", stage, "blah " * 200_000, n_err=1, acts=False))  # 1 MB of prose
        out.append(
            Case(
                "enormous", stage, "<think>" + "hmm " * 250_000 + "</think>" + _tc(_valid(stage, task, rng)), n_err=None
            )
        )
        out.append(Case("enormous", stage, _tc("{broken") * 2000, n_err=CALL_LIMIT + 1, f_tc=0.0))
        distinct = "".join(_tc(_valid(stage, task, rng, text=f"query number {i}")) for i in range(300))
        out.append(Case("enormous", stage, distinct, n_err=1, n_obs=CALL_LIMIT + 1))
        long_q = "shirt " * 20_000
        out.append(Case("enormous", stage, _tc(_valid(stage, task, rng, text=long_q)), n_err=1))
        ids = (
            {"name": "mem_view", "arguments": {"session_ids": [f"s{i}" for i in range(10_000)]}}
            if stage == 1
            else {"name": "product_view", "arguments": {"product_ids": [f"p:{i}" for i in range(10_000)]}}
        )
        out.append(Case("enormous", stage, _tc(ids), n_err=1))
        if stage == 2:
            out.append(
                Case(
                    "enormous",
                    stage,
                    "<answer>" + "great product " * 80_000 + f"@REC::{ref}@</answer>",
                    n_err=0,
                    finish="ends",
                    f_rec=1.0,
                )
            )
        else:
            # more than MAX_PREFERENCES: the answer ends the stage but is not a valid answer (f_ans 0)
            many = [{"attribute": f"a{i}", "value": f"v{i}"} for i in range(10_000)]
            out.append(
                Case(
                    "enormous",
                    stage,
                    "<answer>" + json.dumps({"preferences": many}) + "</answer>",
                    n_err=0,
                    finish="ends",
                    f_ans=0.0,
                )
            )
            few = many[:MAX_PREFERENCES]
            out.append(
                Case(
                    "enormous",
                    stage,
                    "<answer>" + json.dumps({"preferences": few}) + "</answer>",
                    n_err=0,
                    finish="ends",
                )
            )

        # -- Lucene syntax (valid text for both tools: a normal observation, never an error)
        for q in [
            "title:(x AND shirt",
            "*",
            "?",
            "shirt~2",
            '"unterminated',
            "\\",
            "+(-a)",
            "AND OR NOT",
            "brand:nike^10",
            "[1 TO 5]",
            "/regex.*/",
            "(((",
            "&&||!",
            'field:"a b"~3',
            "*:*",
            "a\\ b\\",
        ]:
            out.append(Case("lucene_syntax", stage, _tc(_valid(stage, task, rng, text=q)), n_err=None))

        # -- unicode
        for q in [
            "футболка синяя",
            "白色 T恤",
            "قميص أزرق",
            "👕🔵 shirt",
            "e\u0301te\u0301 dress",
            "zero\u200bwidth\u200djoin",
            "\ufeffbom shirt",
            "nul\x00char",
            "ctrl\x07\x1b[31m",
            "lone \ud800 surrogate",
            "𝔰𝔥𝔦𝔯𝔱",
            "ｓｈｉｒｔ",
        ]:
            out.append(Case("unicode", stage, _tc(_valid(stage, task, rng, text=q)), n_err=None))
        # look-alike tags: not a call
        out.append(Case("unicode", stage, "＜tool_call＞{}＜/tool_call＞", n_err=1, acts=False))
        out.append(Case("unicode", stage, _tc({"name": "mem_search\ud800", "arguments": {}}), n_err=1))
        uid = (
            {"name": "mem_view", "arguments": {"session_ids": ["séssion-☃"]}}
            if stage == 1
            else {"name": "product_view", "arguments": {"product_ids": ["prodüct:☃"]}}
        )
        out.append(Case("unicode", stage, _tc(uid), n_err=1))

        # -- issue 14: deep arguments (refused by EnvConfig.max_tool_arg_depth, or undecodable),
        # lone-surrogate escapes, calls only in the reasoning channel, truncated turns, partly bad ids
        key = "queries" if stage == 1 else "query"
        for depth in (50, 195, 200, 255, 1000, 10000):
            deep = '{"%s": %s"x"%s}' % (key, "[" * depth, "]" * depth)
            f_tc = 1.0 if depth <= 255 else 0.0  # valid JSON over a bound is not a format error
            out.append(
                Case(
                    "enormous",
                    stage,
                    '<tool_call>{"name": "%s", "arguments": %s}</tool_call>' % (name, deep),
                    n_err=1,
                    f_tc=f_tc,
                )
            )
            msg = AssistantMessage(
                content="", tool_calls=[StructuredToolCall(id=f"deep-{stage}-{depth}", name=name, arguments=deep)]
            )
            out.append(Case("enormous", stage, msg, n_err=1, f_tc=f_tc))
        out.append(
            Case(
                "enormous",
                stage,
                AssistantMessage(content=_tc(_valid(stage, task, rng)), finish_reason="length"),
                n_err=1,
            )
        )
        out.append(
            Case(
                "enormous",
                stage,
                AssistantMessage(content="<tool_call>" + valid[: len(valid) // 2], finish_reason="length"),
                n_err=1,
                f_tc=0.0,
            )
        )
        for esc in ("\\ud800", "\\udfff", "\\ud800\\udc00", "x\\udbff"):
            out.append(
                Case(
                    "unicode",
                    stage,
                    _tc(
                        '{"name": "%s", "arguments": {"%s": %s}}'
                        % (name, key, '["a %s"]' % esc if stage == 1 else '"a %s"' % esc)
                    ),
                    n_err=None,
                )
            )
            out.append(
                Case(
                    "unicode",
                    stage,
                    _tc(
                        '{"name": "%s", "arguments": {"%s": %s, "k%s": 1}}'
                        % (name, key, '["a"]' if stage == 1 else '"a"', esc)
                    ),
                    n_err=1,
                )
            )
        reasoning_call = "I will search. " + _tc(_valid(stage, task, rng))
        out.append(Case("think_tags", stage, AssistantMessage(content="", reasoning=reasoning_call), n_err=1, f_tc=0.0))
        out.append(
            Case(
                "think_tags",
                stage,
                AssistantMessage(content="Searching now.", reasoning=reasoning_call + " \ud800"),
                n_err=1,
                f_tc=0.0,
            )
        )
        out.append(
            Case(
                "think_tags",
                stage,
                AssistantMessage(content=_tc(_valid(stage, task, rng)), reasoning=reasoning_call),
                n_err=None,
            )
        )
        partial = (
            {"name": "mem_view", "arguments": {"session_ids": [needle, "", "nope-1"]}}
            if stage == 1
            else {"name": "product_view", "arguments": {"product_ids": [ref, "", "nope:1", 7]}}
        )
        out.append(Case("wrong_types", stage, _tc(partial), n_err=None))  # the known ones are returned
    return out


def _is_error(obs: dict) -> bool:
    if obs["role"] == "user":
        return obs["content"].startswith(REMINDER)
    try:
        return "error" in json.loads(obs["content"])
    except ValueError:
        return False


def _expected(c: Case) -> dict[str, float]:
    """The format indicators of the case's finished stage (issue 31: no credit for inaction).

    A stage that is only the answer turn (``finish="ends"``) made no tool call (f_tc = 0), and an
    answer failing f_ans is no valid action (everything 0). An action with no parsed call
    (``acts=False``) repeated until the turn limit leaves the stage without a valid action
    (everything 0); followed by a valid answer it costs f_tc (a turn without a valid action)."""
    want = {"f_tc": c.f_tc, "f_th": c.f_th, "f_ans": c.f_ans}
    if c.stage == 2:
        want["f_rec"] = c.f_rec if c.f_rec is not None else 1.0
    nothing = {k: 0.0 for k in want}
    if c.finish == "ends":
        return nothing if c.f_ans == 0.0 else {**want, "f_tc": 0.0}
    if not c.acts:
        return nothing if c.finish == "repeat" else {**want, "f_tc": 0.0}
    return want


def _finish(stage: int, task) -> str:
    if stage == 1:
        return "<answer>" + json.dumps({"preferences": [p.model_dump() for p in task.preferences]}) + "</answer>"
    return f"<answer>My pick: @REC::{task.reference_product_ids[0]}@</answer>"


@pytest.fixture(scope="module")
def setup(catalog_products, sgd_sessions, product_search, embedder):
    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=1, seed=99)
    kit = EnvKit(product_search, embedder, pool)
    kit.memory(tasks[0])
    return tasks[0], kit


def test_malformed_outputs_never_crash_and_are_scored(setup):
    task, kit = setup
    cases = _cases(task, random.Random(1234))
    counts = Counter((c.category, c.stage) for c in cases)
    failures: list[str] = []
    n_bad_calls = 0
    for i, c in enumerate(cases):
        env = kit.env(task, max_turns=MAX_TURNS, max_calls_per_turn=CALL_LIMIT)
        try:
            env.reset()
            if c.stage == 2:
                env.step(_finish(1, task))
                assert env.stage == 2
            for a in c.pre:
                env.step(a)
            out = env.step(c.action)
        except Exception as e:  # the point of the test: nothing may raise
            failures.append(f"case {i} ({c.category}, stage {c.stage}): raised {type(e).__name__}: {e}")
            continue
        label = f"case {i} ({c.category}, stage {c.stage}, action {str(getattr(c.action, 'content', c.action))[:60]!r})"
        stage_done = bool(out.info.get("stage_done"))
        if c.finish == "ends":
            if not stage_done:
                failures.append(f"{label}: the answer did not end the stage")
                continue
        else:
            if stage_done:
                failures.append(f"{label}: the stage ended unexpectedly")
                continue
            errs = sum(_is_error(o) for o in out.observations)
            want_err = c.n_err or 0
            want_obs = c.n_obs if c.n_obs is not None else max(want_err, 1)
            n_bad_calls += want_err
            if errs != want_err or len(out.observations) != want_obs:
                failures.append(
                    f"{label}: {errs} error observation(s) of {len(out.observations)}, "
                    f"expected {want_err} of {want_obs}: {[o['content'][:90] for o in out.observations]}"
                )
                continue
            if isinstance(c.action, AssistantMessage) and c.action.tool_calls:
                ids = {o.get("tool_call_id") for o in out.observations}
                if not {t.id for t in c.action.tool_calls} <= ids:
                    failures.append(f"{label}: structured call ids {[t.id for t in c.action.tool_calls]} not answered")
            if c.finish == "repeat":
                while not env.done and env.stage == c.stage:
                    env.step(c.action)
            else:
                env.step(_finish(c.stage, task))
        stage_res = next(r for r in env.results if r.trajectory.stage == c.stage)
        comp = stage_res.reward.components
        want = _expected(c)
        got = {k: comp[k] for k in want}
        if got != want:
            failures.append(f"{label}: format indicators {got}, expected {want}")
        if c.finish == "repeat" and stage_res.trajectory.termination != "max_turns":
            failures.append(f"{label}: expected the stage to end at max_turns")
        try:
            env_done = env.done or env.stage == 2
            assert env_done
            env.episode_result(policy="fuzz").model_dump_json()  # results always serialise
        except Exception as e:
            failures.append(f"{label}: result does not serialise: {type(e).__name__}: {e}")
    by_cat = Counter(c.category for c in cases)
    print(
        f"\nfuzz: {len(cases)} malformed outputs ({sum(1 for c in cases if c.stage == 1)} stage 1, "
        f"{sum(1 for c in cases if c.stage == 2)} stage 2), {n_bad_calls} expected error observations; "
        f"by category: {dict(sorted(by_cat.items()))}"
    )
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures[:40])
    assert len(cases) >= 200
    assert all(counts[(cat, s)] > 0 for cat in by_cat for s in (1, 2))
    assert set(by_cat) == {
        "broken_json",
        "wrong_types",
        "unknown_tools",
        "missing_answer",
        "think_tags",
        "repeated_calls",
        "enormous",
        "lucene_syntax",
        "unicode",
    }
