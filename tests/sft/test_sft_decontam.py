"""Decontamination against train-owned text: a templated line of a test needle that a train task's
own session contains (inside a longer turn) is not leakage; a test needle turn or sentence that no
train text contains is. The texts are the benchmark generator's own templates."""

from __future__ import annotations

import json

import pytest

from shopping_companion.benchmark import templates as T
from shopping_companion.errors import ConfigError
from shopping_companion.sentences import split_sentences
from shopping_companion.sft.decontam import find_contamination
from shopping_companion.sft.examples import StepExample
from shopping_companion.types import Preference, ProductSlot, Session, SessionRef, Task, Turn

CLOSER = "Okay, I think I have a plan now."
assert any(u == CLOSER for u, _ in T.NEEDLE_CLOSERS)  # the template line of the issue
OPENER = next(u for u, _ in T.OPENERS["generic"] if u.startswith("Can I think out loud"))
TEST_STATEMENT = "I only buy shirts in a slim fit, loose ones make me look sloppy."
TRAIN_STATEMENT = "For running shoes I always want a cushioned sole, my knees complain otherwise."


def _session(sid: str, users: list[str]) -> Session:
    turns = []
    for u in users:
        turns += [Turn(role="user", content=u), Turn(role="assistant", content="Noted, thanks for telling me.")]
    return Session(session_id=sid, turns=turns)


def _task(tid: str, split: str, instruction: str, needle: str, ref: str) -> Task:
    return Task(
        task_id=tid,
        split=split,
        instruction=instruction,
        user_id="u-" + tid,
        history=[SessionRef(session_id=needle, date="2024-03-01")],
        needle_session_ids=[needle],
        preferences=[Preference(attribute="fit", value="slim")],
        slots=[ProductSlot(product_type="shirt", reference_product_id=ref)],
    )


@pytest.fixture()
def world():
    # the test needle: an opener of two template sentences, its statement, and the closer as a whole turn
    test_needle = _session("sess-test-needle", [OPENER, TEST_STATEMENT, CLOSER])
    # the train needle: the same closer, but inside a longer user turn
    train_needle = _session("sess-train-needle", [TRAIN_STATEMENT + " " + CLOSER])
    sessions = {s.session_id: s for s in (test_needle, train_needle)}
    test = _task(
        "task-test",
        "test",
        "Help me choose a men's shirt; keep in mind what I like.",
        test_needle.session_id,
        "myntra_styles:1",
    )
    train = _task(
        "task-train",
        "train",
        "I'm after running shoes. Surprise me with one that fits.",
        train_needle.session_id,
        "adidas_us:9",
    )
    return test, train, sessions


def _mem_view_example(example_id: str, session: Session, extra_user: str | None = None) -> StepExample:
    """A stage-1 example of the train task: the mem_view observation shows its needle session."""
    obs = json.dumps(
        {"sessions": [{"session_id": session.session_id, "turns": [t.model_dump() for t in session.turns]}]}
    )
    msgs = [
        {"role": "system", "content": "You are a shopping assistant with memory tools."},
        {"role": "user", "content": "Shopping request: I'm after running shoes. Surprise me with one that fits."},
        {
            "role": "assistant",
            "content": "<think>read</think>",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "mem_view", "arguments": '{"session_ids": ["x"]}'},
                }
            ],
        },
        {"role": "tool", "content": obs},
    ]
    if extra_user is not None:
        msgs.append({"role": "user", "content": extra_user})
    msgs.append({"role": "assistant", "content": '<answer>{"preferences": []}</answer>'})
    return StepExample(
        example_id=example_id,
        task_id="task-train",
        trial=0,
        stage=1,
        mode="two_stage",
        turn=1,
        n_turns=2,
        target_kind="answer",
        tools=[],
        messages=msgs,
    )


def test_a_test_needle_line_inside_a_train_needle_turn_is_not_a_finding(world):
    test, train, sessions = world
    ex = _mem_view_example("task-train/t0/two_stage:none/s1/turn1", sessions["sess-train-needle"])
    # the earlier rule (whole turns only) flags the closer: the false alarm of the issue
    old, _, _ = find_contamination([ex], [test], sessions, train_tasks=[train], train_match="whole_turn")
    assert [(f.kind, f.test_task_id) for f in old] == [("needle_session", "task-test")]
    assert "sess-test-needle turn 4" in old[0].detail  # the closer is the test needle's third user turn
    v, exposures, shared = find_contamination([ex], [test], sessions, train_tasks=[train])
    assert v == [] and exposures == []
    assert shared == 1  # the closer, owned by the train task (counted, so a leaky benchmark shows)


def test_a_test_needle_turn_no_train_text_contains_is_still_caught(world):
    test, train, sessions = world
    # the whole statement copied into a train example
    ex = _mem_view_example("e-whole", sessions["sess-train-needle"], extra_user="btw: " + TEST_STATEMENT.upper())
    v, _, _ = find_contamination([ex], [test], sessions, train_tasks=[train])
    assert [(f.kind, f.test_task_id) for f in v] == [("needle_session", "task-test")]
    assert "sess-test-needle turn 2" in v[0].detail and "(user)" in v[0].detail
    # one sentence of a two-sentence needle turn is test text too (the earlier rule missed it)
    two = _session("sess-test-needle", [OPENER, TEST_STATEMENT + " Also, navy is my favourite colour for shirts."])
    s2 = {**sessions, two.session_id: two}
    part = _mem_view_example("e-part", sessions["sess-train-needle"], extra_user=f"I recall: {TEST_STATEMENT}")
    old, _, _ = find_contamination([part], [test], s2, train_tasks=[train], train_match="whole_turn")
    assert old == []
    v, _, _ = find_contamination([part], [test], s2, train_tasks=[train])
    assert [f.kind for f in v] == ["needle_session"] and "turn 2" in v[0].detail


def test_a_template_sentence_of_a_longer_test_turn_owned_by_train_is_not_a_finding(world):
    test, train, sessions = world
    first, second = split_sentences(OPENER)
    assert first.endswith("?") and second.endswith(".")
    # a train needle holds the opener's second sentence inside its own longer turn
    train_needle = _session("sess-train-needle", [TRAIN_STATEMENT + " " + second])
    s2 = {**sessions, train_needle.session_id: train_needle}
    ex = _mem_view_example("e", train_needle)
    v, _, shared = find_contamination([ex], [test], s2, train_tasks=[train])
    assert v == [] and shared >= 1
    # the opener's first sentence is not train text: copied alone into the example, it is caught
    leak = _mem_view_example("e2", train_needle, extra_user=first)
    v, _, _ = find_contamination([leak], [test], s2, train_tasks=[train])
    assert [f.kind for f in v] == ["needle_session"] and "sess-test-needle turn 0" in v[0].detail


def test_without_train_tasks_nothing_is_owned(world):
    test, _train, sessions = world
    ex = _mem_view_example("e", sessions["sess-train-needle"])
    v, _, shared = find_contamination([ex], [test], sessions)
    assert [f.kind for f in v] == ["needle_session"] and shared == 0
    with pytest.raises(ConfigError, match="train_match"):
        find_contamination([ex], [test], sessions, train_match="prefix")  # type: ignore[arg-type]


def test_containment_check_scales_linearly():
    """1,000 train histories of 20 sessions x 5 user turns, 200 test tasks, 2,000 examples: seconds."""
    import random
    import time

    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]

    def sent(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n)) + "."

    sessions, train, tests = {}, [], []
    for i in range(1000):
        refs = []
        for j in range(20):
            s = _session(f"s{i}-{j}", [sent(12) + " " + CLOSER for _ in range(5)])
            sessions[s.session_id] = s
            refs.append(SessionRef(session_id=s.session_id, date="2024-01-01"))
        train.append(_task(f"r{i}", "train", sent(10), refs[0].session_id, "x:1").model_copy(update={"history": refs}))
    for i in range(200):
        s = _session(f"n{i}", [sent(12), CLOSER, OPENER])
        sessions[s.session_id] = s
        tests.append(_task(f"t{i}", "test", sent(10), s.session_id, f"x:{i + 2}"))
    ex = _mem_view_example("e", sessions["s0-0"])
    examples = [ex.model_copy(update={"example_id": f"e{k}"}) for k in range(2000)]
    for k, e in enumerate(examples):
        e.messages[3] = {"role": "tool", "content": json.dumps({"turns": [sent(40) for _ in range(3)], "k": k})}
    t0 = time.perf_counter()
    v, _, shared = find_contamination(examples, tests, sessions, train_tasks=train)
    assert v == [] and shared == 200  # each test needle's closer is train text
    dt = time.perf_counter() - t0
    print(f"find_contamination: {dt:.2f}s")
    assert dt < 30
