"""The judge cascade (issue 32, item 2) against a local OpenAI-compatible judge server on 127.0.0.1:
the rule judge keeps what it is sure of, only stages with uncertain items cost an LLM request, and
the LLM's reply decides only those items. The same reward spec builds the judge for every consumer
(`RewardSpec.build_judge`: eval, SFT collection, the verl and TRL workers)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


from shopping_companion.judges.cascade import CascadeJudge
from shopping_companion.judges.llm import LLMJudge
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.rewards.rubric import paper_rubric
from shopping_companion.rewards.spec import BoundedJudge, load_reward_spec
from shopping_companion.rewards.total import score_stage

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.judges.test_selective_verdicts import SESSIONS, lookup, s1, s2, task  # noqa: E402


def judge_server(matched: list[int] | None = None, h1: int = 0, q2: int = 1):
    """A local LLM judge: reads the grading prompt and answers its JSON schema, counting the
    annotated features in ``matched`` (1-based; None: all of them)."""

    def reply(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        F = int(re.search(r"Annotated wanted features \(F = (\d+)\)", prompt).group(1))
        got = list(range(1, F + 1)) if matched is None else [i for i in matched if i <= F]
        common = {"matched": got, "reasons": [f"feature {i} is there" for i in got] or ["nothing matches"]}
        if "\nStage 1 of a shopping task" in prompt:
            return json.dumps({"q1": int(h1 == 0), "m1": len(got), "h1": h1, **common})
        return json.dumps({"p2": 1, "q2": q2, "m2": len(got), **common})

    return reply


def cascade(srv: ScriptedOpenAIServer, policy: str = "no_credit") -> CascadeJudge:
    backend = OpenAIBackend("judge", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10)
    llm = LLMJudge(backend, lookup, max_retries=0, backoff_s=0.0)
    return CascadeJudge(RuleJudge(lookup, sessions=SESSIONS, uncertain=policy), llm)


def test_confident_stages_cost_no_request():
    with ScriptedOpenAIServer(judge_server()) as srv:
        j = cascade(srv)
        v1 = j.judge(task(), s1(("colour", "navy"), ("fabric", "cotton")))
        v2 = j.judge(task(), s2("p:navy"))
        assert srv.bodies == []
    for v in (v1, v2):
        assert v.judge == "rule" and v.llm_calls == 0 and v.uncertain == 0 and v.success
    assert j.stats == {"stages": 2, "items": 5, "uncertain_items": 0, "llm_calls": 0, "llm_failures": 0}


def test_uncertain_stage1_items_go_to_the_llm_and_confident_ones_stay():
    t = task()
    traj = s1(("colour", "the colour of the sky at midnight"), ("fabric", "cotton"))
    # the judge says only feature 1 (colour) is there; it would drop fabric, which the rule judge is sure of
    with ScriptedOpenAIServer(judge_server(matched=[1])) as srv:
        j = cascade(srv)
        v = j.judge(t, traj)
        assert len(srv.bodies) == 1 and "Stage 1 of a shopping task" in srv.bodies[0]["messages"][-1]["content"]
    assert v.judge == "rule+llm:judge" and v.llm_calls == 1 and v.uncertain == 2 and v.uncertain_policy is None
    colour, fabric, vague = v.items
    assert (colour["ok"], colour["decided_by"], colour["confident"]) == (True, "llm", False)
    assert (fabric["ok"], fabric["decided_by"], fabric["confident"]) == (True, "rule", True)
    assert (vague["kind"], vague["ok"], vague["decided_by"]) == ("grounding", True, "llm")  # h1 = 0: harmless
    assert (v.m1, v.h1, v.q1, v.success) == (2, 0, 1, True)
    assert any("decided by llm:judge" in r for r in v.reasons)
    assert j.stats["llm_calls"] == 1 and j.stats["uncertain_items"] == 2


def test_llm_h1_beyond_the_rules_confident_count_marks_uncertain_answer_preferences_spurious():
    traj = s1(("colour", "navy"), ("fabric", "cotton"), ("vibe", "something breezy"))
    with ScriptedOpenAIServer(judge_server(h1=1)) as srv:
        v = cascade(srv).judge(task(), traj)
    (g,) = [it for it in v.items if it["kind"] == "grounding"]
    assert (g["ok"], g["decided_by"]) == (False, "llm")
    assert (v.m1, v.h1, v.q1, v.success) == (2, 1, 0, False)


def test_uncertain_stage2_items_and_types():
    t = task()
    with ScriptedOpenAIServer(judge_server()) as srv:  # the LLM reads the product as navy
        v = cascade(srv).judge(t, s2("p:plain"))
        assert len(srv.bodies) == 1
    colour = v.items[1]
    assert (colour["label"], colour["ok"], colour["decided_by"], colour["reason"]) == (
        "colour=navy",
        True,
        "llm",
        "not_stated",
    )
    assert (v.m2, v.success, v.llm_calls) == (2, True, 1)
    shoes = t.model_copy(deep=True)
    shoes.slots[0].product_type, shoes.slots[0].category_path = "casual shoes", ["Footwear", "Shoes", "Casual Shoes"]
    with ScriptedOpenAIServer(judge_server(q2=0)) as srv:  # plain shoes filed as sports shoes: not casual
        v = cascade(srv).judge(shoes, s2("p:shoes"))
    (ty,) = [it for it in v.items if it["kind"] == "type"]
    assert (ty["ok"], ty["decided_by"], ty["reason"]) == (False, "llm", "adjacent_type") and v.q2 == 0 and not v.success


def test_a_failed_llm_reply_is_a_failed_verdict_never_scored():
    with ScriptedOpenAIServer(["not json at all"]) as srv:
        j = cascade(srv)
        verdict, reward, error = score_stage(j, paper_rubric(), task(), s2("p:plain"))
    assert verdict is not None and verdict.failed and verdict.llm_calls == 1
    assert error and error.startswith("judge failed") and reward.components["judge_failed"] == 1.0
    assert j.stats["llm_failures"] == 1


def test_one_spec_builds_the_cascade_for_every_consumer():
    with ScriptedOpenAIServer(judge_server()) as srv:
        spec = load_reward_spec(
            {"rubric": "paper", "judge": {"kind": "llm", "model": "judge", "base_url": srv.base_url}}
        )
        j = spec.build_judge(lookup, SESSIONS, None)
        assert isinstance(j, CascadeJudge) and isinstance(j.llm, BoundedJudge) and j.rule.uncertain == "no_credit"
        assert spec.judge.describe().startswith("rule, uncertain stages to llm: judge")
        v = j.judge(task(), s2("p:plain"))
        assert v.success and len(srv.bodies) == 1
        # cascade off: every stage goes to the LLM (the paper's protocol), confident ones too
        off = load_reward_spec(
            spec.model_copy(update={"judge": spec.judge.model_copy(update={"cascade": False})}).to_json()
        )
        assert off.identity() != spec.identity() and off.identity()["judge"]["cascade"] is False
        j2 = off.build_judge(lookup, SESSIONS, None)
        assert isinstance(j2, BoundedJudge)
        v = j2.judge(task(), s2("p:navy"))
        assert v.judge == "llm:judge" and len(srv.bodies) == 2
    rule = load_reward_spec({"rubric": "paper", "uncertain": "credit"}).build_judge(lookup, SESSIONS, None)
    assert isinstance(rule, RuleJudge) and rule.uncertain == "credit"
