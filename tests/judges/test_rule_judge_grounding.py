"""Stage-1 q1 requires identified preferences to be grounded in the user's own words (when the
judge knows the sessions), so a list of guessed values cannot earn the relevance point."""

from __future__ import annotations

import json

from shopping_companion.judges.rule import RuleJudge
from shopping_companion.rewards import stage1_reward
from shopping_companion.types import Preference, ProductSlot, Session, SessionRef, Task, Trajectory, Turn


def _task() -> Task:
    return Task(
        task_id="t1",
        instruction="Find me a t-shirt.",
        user_id="u",
        history=[SessionRef(session_id="s1", date="2023-01-01"), SessionRef(session_id="s2", date="2023-01-03")],
        needle_session_ids=["s2"],
        preferences=[Preference(attribute="colour", value="Navy Blue"), Preference(attribute="fabric", value="Cotton")],
        slots=[ProductSlot(product_type="t-shirt", reference_product_id="p1")],
    )


SESSIONS = {
    "s1": Session(
        session_id="s1",
        turns=[
            Turn(role="user", content="Book a table in San Jose."),
            Turn(role="assistant", content="Sure, black tie dress code."),
        ],
    ),
    "s2": Session(
        session_id="s2",
        turns=[
            Turn(role="user", content="I'm always in navy blue, and only cotton works."),
            Turn(role="assistant", content="Noted."),
        ],
    ),
}


def _traj(values: list[str]) -> Trajectory:
    prefs = [{"attribute": "x", "value": v} for v in values]
    return Trajectory(
        task_id="t1",
        stage=1,
        final_answer=json.dumps({"preferences": prefs}),
        identified_preferences=[Preference(attribute="x", value=v) for v in values],
        termination="answered",
    )


def test_grounded_answer_keeps_q1():
    v = RuleJudge(lambda ids: {}, sessions=SESSIONS).judge(_task(), _traj(["navy blue", "cotton"]))
    assert (v.q1, v.m1, v.success) == (1, 2, True)


def test_spammed_values_lose_q1_and_reward():
    spam = ["navy blue", "cotton", "red", "silk", "slim fit", "v-neck", "black"]  # "black" only said by the assistant
    v = RuleJudge(lambda ids: {}, sessions=SESSIONS).judge(_task(), _traj(spam))
    # recall is unchanged (m1 = 2), but every other value piled on the colour / material of the
    # request, or never said by the user, is spurious: q1 = 0, R1 drops, no stage-1 success
    assert v.q1 == 0 and v.m1 == 2 and v.h1 == 5 and not v.success
    assert any("spurious: x=black" in r for r in v.reasons)
    assert stage1_reward(v) < stage1_reward(
        RuleJudge(lambda ids: {}, sessions=SESSIONS).judge(_task(), _traj(["navy blue", "cotton"]))
    )


def test_ungrounded_extra_on_another_attribute_is_spurious_only_with_sessions():
    # "slim fit" is on an attribute the user has no preference about; it is said in no user turn,
    # which the judge can only know when it has the sessions
    assert (
        RuleJudge(lambda ids: {}, sessions=SESSIONS).judge(_task(), _traj(["navy blue", "cotton", "slim fit"])).h1 == 1
    )
    v = RuleJudge(lambda ids: {}).judge(_task(), _traj(["navy blue", "cotton", "slim fit"]))
    assert (v.q1, v.h1, v.success) == (1, 0, True)
