"""Issue 14, the episode protocol, end to end: a real OpenAI client (``OpenAIBackend``) talks to a
scripted OpenAI-compatible server on 127.0.0.1, the real environment runs real tools (a BM25 index
of real catalog products, a MiniLM memory store of real conversations), the rule judge and Eq. 12
score every stage, and every result must serialise and load back.

Each test reproduces a defect first seen with the old code: 200-level arguments made the result
writer fail (the run exited, every resume crashed again) and 195–255 levels gave a line that could
not be read back; ``"\\ud800"`` escapes crashed the next request or the writer; calls written only
in the reasoning channel were silently ignored and the reasoning was lost; a truncated
(finish_reason ``length``) tool call was run and a model stuck on invalid output looped to
max_turns; an HTTP 400 "maximum context length" threw the whole episode away as a backend error.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from shopping_companion.benchmark.evaluate import EvalSettings, arun_episode, run_episode, run_evaluation
from shopping_companion.benchmark.report import read_results
from shopping_companion.catalog.index import build_index
from shopping_companion.catalog.search import ProductSearch
from shopping_companion.envs.env import EnvConfig
from shopping_companion.llm.base import AssistantMessage
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.sft.collect import KeptStage
from shopping_companion.sft.examples import step_examples
from shopping_companion.sft.export import round_trip_ok, to_sharegpt
from shopping_companion.types import EpisodeResult
from tests.env_support import EnvKit, make_single_tasks
from tests.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.slow

DEPTHS = (50, 195, 200, 255, 1000, 10000)
CTX_MSG = (
    "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens "
    "(8000 in the messages, 1000 in the completion). Please reduce the length of the messages."
)


@pytest.fixture(scope="module")
def world(catalog_products, sgd_sessions, embedder, tmp_path_factory):
    """One real task, a BM25 index of 1,500 real products holding its reference product, and a
    kit of real environments (memory store over the task's real sessions, rule judge)."""
    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=1, seed=14)
    task = tasks[0]
    by_id = {p.product_id: p for p in catalog_products}
    subset = [p for p in catalog_products if p.source == "myntra_styles"][:1500]
    if task.slots[0].reference_product_id not in {p.product_id for p in subset}:
        subset.append(by_id[task.slots[0].reference_product_id])
    d = tmp_path_factory.mktemp("robustness-bm25")
    build_index(subset, d, threads=1)
    products = ProductSearch(d)
    kit = EnvKit(products, embedder, pool)
    kit.memory(task)
    yield task, kit
    products.close()


def backend(srv: ScriptedOpenAIServer) -> OpenAIBackend:
    return OpenAIBackend(model="scripted", base_url=srv.base_url, api_key="sk-test", backoff_s=0.01, max_retries=1)


def stage_of(body: dict) -> int:
    return 1 if "mem_search" in {t["function"]["name"] for t in body.get("tools") or []} else 2


def n_assistant(body: dict) -> int:
    return sum(m["role"] == "assistant" for m in body["messages"])


def answer(stage: int, task) -> str:
    if stage == 1:
        return "<answer>" + json.dumps({"preferences": [p.model_dump() for p in task.preferences]}) + "</answer>"
    return f"<answer>My pick: @REC::{task.reference_product_ids[0]}@</answer>"


def episode(task, kit, script, *, asynchronous: bool = False, **cfg) -> tuple[EpisodeResult, list[dict]]:
    """Run one episode over HTTP; return the result (checked to round-trip) and the request bodies."""
    settings = EvalSettings(env=EnvConfig(**cfg))
    with ScriptedOpenAIServer(script) as srv:
        args = (task, backend(srv), kit.products, kit.memory(task), kit.judge, settings)
        res = asyncio.run(arun_episode(*args)) if asynchronous else run_episode(*args)
        bodies = list(srv.bodies)
    assert_round_trips(res)
    return res, bodies


def assert_round_trips(res: EpisodeResult) -> None:
    """What the result writer and reader do: JSON text, UTF-8 bytes, json.loads, pydantic reload;
    and every stage's messages encode as the next request would."""
    line = res.model_dump_json()
    line.encode("utf-8")
    json.loads(line)
    assert EpisodeResult.model_validate_json(line) == res
    for s in res.stages:
        msgs = [m.model_dump(exclude_none=True) for m in s.trajectory.messages]
        json.dumps(msgs, ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("channel", ["text", "structured"])
def test_deeply_nested_arguments_are_refused_and_the_result_round_trips(world, depth, channel):
    task, kit = world
    nested = '{"queries": ' + "[" * depth + '"x"' + "]" * depth + "}"

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1 and k == 0:
            if channel == "text":
                return '<tool_call>{"name": "mem_search", "arguments": %s}</tool_call>' % nested
            return {"tool_calls": [{"id": "deep-1", "name": "mem_search", "arguments": nested}]}
        return answer(stage, task)

    res, bodies = episode(task, kit, script)
    assert res.error is None and [s.trajectory.termination for s in res.stages] == ["answered", "answered"]
    (result,) = res.stages[0].trajectory.steps[0].tool_results
    assert result.error is not None and result.returned_ids == []
    if depth <= 255:
        assert "max_tool_arg_depth = 16" in result.error
        assert res.stages[0].reward.components["f_tc"] == 1.0  # valid JSON, refused like a bad value
    else:
        assert "nested too deeply" in result.error
    # the observation reached the model in the next request, with the server's call id
    tool_msgs = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and "error" in json.loads(tool_msgs[0]["content"])
    if channel == "structured":
        assert tool_msgs[0]["tool_call_id"] == "deep-1"


def test_the_results_file_of_a_deep_call_reads_back_and_resumes(world, tmp_path):
    """Through run_evaluation: the line is written, read back, and a second run has nothing to do."""
    task, kit = world
    nested = '{"queries": ' + "[" * 200 + '"x"' + "]" * 200 + "}"

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1 and k == 0:
            return '<tool_call>{"name": "mem_search", "arguments": %s}</tool_call>' % nested
        return answer(stage, task)

    path = tmp_path / "results.jsonl"
    with ScriptedOpenAIServer(script) as srv:
        b = backend(srv)
        run_evaluation([task], b, kit.products, kit.memory, kit.judge, path, progress=False)
        n = len(srv.bodies)
        run_evaluation([task], b, kit.products, kit.memory, kit.judge, path, progress=False)
        assert len(srv.bodies) == n  # resumed: the episode is not run again
    rows = read_results(path)
    assert len(rows) == 1 and rows[0].error is None
    assert len(path.read_text().splitlines()) == 1


# --------------------------------------------------------------------------- surrogates


SURROGATE_PATHS = [
    "text_args",
    "structured_args",
    "keys",
    "answer_fields",
    "answer_text",
    "assistant_text",
    "reasoning",
]


@pytest.mark.parametrize("path", SURROGATE_PATHS)
def test_lone_surrogates_never_break_the_next_request_or_the_writer(world, path):
    task, kit = world
    esc = "\\ud800 and \\udfff"  # JSON escapes the model wrote
    real = "\ud800 real \udfff"  # real lone surrogates (the server's JSON escapes, decoded by the client)

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1 and k == 0:
            if path == "text_args":
                return '<tool_call>{"name": "mem_search", "arguments": {"queries": ["colour %s"]}}</tool_call>' % esc
            if path == "structured_args":
                return {
                    "tool_calls": [{"id": "s1", "name": "mem_search", "arguments": '{"queries": ["colour %s"]}' % esc}]
                }
            if path == "keys":
                return '<tool_call>{"name": "mem_search", "arguments": {"queries": ["x"], "k%s": 1}}</tool_call>' % esc
            if path == "assistant_text":
                return f"thinking out loud {real}"
            if path == "reasoning":
                return {"content": "", "reasoning_content": f"let me think {real}"}
        if stage == 1 and path == "answer_fields":
            return '<answer>{"preferences": [{"attribute": "colour %s", "value": "navy %s"}]}</answer>' % (esc, esc)
        if stage == 2 and path == "answer_text":
            return f"<answer>{real} @REC::{task.reference_product_ids[0]}@</answer>"
        return answer(stage, task)

    res, bodies = episode(task, kit, script)
    assert res.error is None and len(res.stages) == 2
    dumped = res.model_dump_json()
    assert "\ufffd" in dumped  # the surrogate was replaced, not dropped
    json.dumps(json.loads(dumped), ensure_ascii=False).encode("utf-8")  # no surrogate survives a reload
    # every request after the bad turn was sent (the client encoded it) and is clean
    assert len(bodies) >= 2
    for b in bodies:
        json.dumps(b, ensure_ascii=False).encode("utf-8")
    if path == "answer_fields":  # stage 2 opens with the cleaned preferences
        assert "colour \ufffd and \ufffd" in bodies[-1]["messages"][1]["content"]
    if path == "reasoning":
        assert res.stages[0].trajectory.steps[0].reasoning == "let me think \ufffd real \ufffd"


# --------------------------------------------------------------------------- </tool_call> in a string


def test_close_tag_inside_a_json_string_argument_is_run_as_one_call(world):
    task, kit = world

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 2 and k == 0:
            return (
                '<tool_call>{"name": "product_search", "arguments": {"query": "shirt </tool_call> cotton"}}</tool_call>'
            )
        return answer(stage, task)

    res, _ = episode(task, kit, script)
    step = res.stages[1].trajectory.steps[0]
    assert [c.arguments for c in step.tool_calls] == [{"query": "shirt </tool_call> cotton"}]
    assert step.tool_results[0].error is None and step.format.errors == []


# --------------------------------------------------------------------------- reasoning channel


def test_calls_only_in_the_reasoning_are_not_run_and_the_reasoning_is_kept(world):
    task, kit = world
    call = '<tool_call>{"name": "mem_search", "arguments": {"queries": ["favourite colour"]}}</tool_call>'

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1 and k == 0:
            return {"content": "", "reasoning_content": "I will search. " + call}
        if stage == 1 and k == 1:
            return {"content": call, "reasoning_content": "Right, in the content this time."}
        if stage == 1:
            return {"content": answer(1, task), "reasoning_content": "Found them."}
        return answer(2, task)

    res, bodies = episode(task, kit, script)
    s1 = res.stages[0].trajectory
    first, second = s1.steps[0], s1.steps[1]
    assert first.tool_calls == [] and first.tool_results == []
    assert first.reasoning == "I will search. " + call
    assert first.format.errors[0].startswith("tool_call_in_reasoning") and not first.format.tool_json_ok
    assert res.stages[0].reward.components["f_tc"] == 0.0
    # the agent was told, in a user-role reminder
    reminder = bodies[1]["messages"][-1]
    assert reminder["role"] == "user" and "tool_call_in_reasoning" in reminder["content"]
    # the reasoning is on the trajectory's assistant message, but is not sent back to the server
    assistant = [m for m in s1.messages if m.role == "assistant"]
    assert assistant[0].model_dump()["reasoning_content"] == first.reasoning
    assert all("reasoning_content" not in m for b in bodies for m in b["messages"])
    assert second.tool_results and second.tool_results[0].error is None and second.format.errors == []
    # SFT: the reasoning is the think block of the examples (targets and context)
    kept = KeptStage(
        task_id=task.task_id,
        trial=0,
        mode="two_stage",
        hint="none",
        stage=1,
        policy="p",
        reason="test",
        acc=res.acc,
        succ=res.succ,
        trajectory=s1,
        verdict=res.stages[0].verdict,
    )
    examples = step_examples([kept])
    assert [e.turn for e in examples] == [1, 2]  # the reasoning-only turn is not a target
    assert examples[0].messages[-1]["content"].startswith("<think>\nRight, in the content this time.\n</think>")
    assert examples[1].messages[2]["content"].startswith("<think>\nI will search.")
    for ex in examples:  # the export's round trip (parse of the rendered target) holds
        assert round_trip_ok(ex, to_sharegpt(ex)) is None
    record = to_sharegpt(examples[1])
    assert record["conversations"][-1]["value"].startswith("<think>\nFound them.\n</think>\n\n<answer>")


# --------------------------------------------------------------------------- truncation and invalid turns


def test_a_truncated_tool_call_is_not_run_and_three_end_the_stage_as_length(world):
    task, kit = world
    call = '<tool_call>{"name": "mem_search", "arguments": {"queries": ["colour"]}}</tool_call>'

    def script(body):
        if stage_of(body) == 1:
            return {"content": call, "finish_reason": "length"}
        return answer(2, task)

    res, bodies = episode(task, kit, script)
    s1 = res.stages[0]
    assert s1.trajectory.termination == "length" and len(s1.trajectory.steps) == 3  # not 20 (max_turns)
    for st in s1.trajectory.steps:
        assert st.finish_reason == "length"
        assert [r.error is not None and "cut off" in r.error for r in st.tool_results] == [True]
        assert st.tool_results[0].returned_ids == []
        assert any(e.startswith("output_truncated") for e in st.format.errors)
    assert not s1.verdict.failed and "R_z" in s1.reward.components  # judged and scored
    assert res.error is None and res.stages[1].trajectory.termination == "answered"
    assert res.stages[1].trajectory.steps[0].finish_reason == "stop"


def test_invalid_turns_end_the_stage_and_a_valid_call_resets_the_count(world):
    task, kit = world
    call = '<tool_call>{"name": "product_search", "arguments": {"query": "shirt"}}</tool_call>'
    stage2 = ["no idea", "<tool_call>{oops</tool_call>", call, "hmm", "still thinking", "nothing"]

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1:
            return answer(1, task)
        return stage2[k]

    res, bodies = episode(task, kit, script, max_invalid_turns=3)
    s2 = res.stages[1].trajectory
    assert s2.termination == "invalid_output" and len(s2.steps) == 6
    assert len(bodies) == 1 + 6
    assert res.error is None and not res.stages[1].verdict.failed


def test_the_turn_limit_wins_when_it_coincides_with_the_invalid_limit(world):
    task, kit = world
    res, _ = episode(task, kit, lambda body: "prose only", max_turns=3, max_invalid_turns=3)
    assert [s.trajectory.termination for s in res.stages] == ["max_turns", "max_turns"]
    res, _ = episode(task, kit, lambda body: "prose only", max_turns=5, max_invalid_turns=2)
    assert [s.trajectory.termination for s in res.stages] == ["invalid_output", "invalid_output"]
    assert [len(s.trajectory.steps) for s in res.stages] == [2, 2]


# --------------------------------------------------------------------------- context length


@pytest.mark.parametrize("asynchronous", [False, True])
def test_context_length_refusal_ends_the_stage_as_a_scored_model_failure(world, asynchronous):
    task, kit = world
    needle = task.needle_session_ids[0]

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1 and k == 0:
            return f'<tool_call>{{"name": "mem_view", "arguments": {{"session_ids": ["{needle}"]}}}}</tool_call>'
        if stage == 1:
            return {"status": 400, "message": CTX_MSG}
        return answer(2, task)

    res, bodies = episode(task, kit, script, asynchronous=asynchronous)
    s1, s2 = res.stages
    assert res.error is None  # not a backend error: the episode is scored
    assert s1.trajectory.termination == "context_length" and len(s1.trajectory.steps) == 1
    assert s1.trajectory.steps[0].tool_results[0].returned_ids == [needle]  # the stage so far is kept
    assert not s1.verdict.failed and s1.reward.per_tool_call == [1.0]  # scored: the needle view counts
    assert s2.trajectory.termination == "answered" and not s2.verdict.failed
    assert len(bodies) == 3  # not retried


def test_context_length_on_the_first_request_scores_an_empty_stage(world):
    task, kit = world

    def script(body):
        return {"status": 400, "message": CTX_MSG} if stage_of(body) == 1 else answer(2, task)

    res, _ = episode(task, kit, script)
    assert res.error is None and res.stages[0].trajectory.termination == "context_length"
    assert res.stages[0].trajectory.steps == [] and res.stages[0].reward.components["R_fmt"] == 0.0


def test_a_prompt_token_budget_clips_old_observations_before_the_prompt_exceeds_it(world):
    task, kit = world
    sessions = [r.session_id for r in task.history]
    budget = 4000

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 1 and k < 4:
            ids = json.dumps(sessions[3 * k : 3 * k + 3])
            return f'<tool_call>{{"name": "mem_view", "arguments": {{"session_ids": {ids}}}}}</tool_call>'
        return answer(stage, task)

    res, bodies = episode(task, kit, script, max_prompt_tokens=budget, max_observation_chars=12_000)
    s1 = res.stages[0].trajectory
    tool_msgs = [m for m in s1.messages if m.role == "tool"]
    clipped = [m for m in tool_msgs if "[clipped " in m.content]
    assert clipped and clipped[0] is tool_msgs[0]  # the oldest first
    for body in bodies[1:4]:  # what the server got stays within the budget (the same estimate)
        chars = sum(len(m["content"]) for m in body["messages"]) + len(json.dumps(body["tools"], ensure_ascii=False))
        assert chars / 3.0 + 4 * len(body["messages"]) <= budget
    # the steps keep the full observation and the ids the agent was shown
    first = s1.steps[0].tool_results[0]
    assert "[clipped " not in first.content and first.returned_ids == sessions[:3]


# --------------------------------------------------------------------------- product_view


def test_product_view_with_some_unknown_or_empty_ids_returns_the_known_products(world):
    task, kit = world
    ref = task.reference_product_ids[0]

    def script(body):
        stage, k = stage_of(body), n_assistant(body)
        if stage == 2 and k == 0:
            return {
                "tool_calls": [
                    {"id": "v1", "name": "product_view", "arguments": {"product_ids": [ref, "", "nope:1", 7]}}
                ]
            }
        return answer(stage, task)

    res, _ = episode(task, kit, script)
    r = res.stages[1].trajectory.steps[0].tool_results[0]
    assert r.error is None and r.returned_ids == [ref]
    body = json.loads(r.content)
    assert [p["product_id"] for p in body["products"]] == [ref] and len(body["errors"]) == 3
    assert res.stages[1].reward.per_tool_call == [1.0]  # the reference counts (Eq. 9)


def test_env_step_accepts_a_message_with_finish_reason_and_reasoning(world):
    """The environment API on its own: nothing it records fails to encode after any step."""
    task, kit = world
    env = kit.env(task)
    env.reset()
    rng = random.Random(0)
    for _ in range(5):
        r = env.step(
            AssistantMessage(
                content=rng.choice(["x \ud800", '<tool_call>{"a\\udfff": 1}</tool_call>']),
                reasoning="r \udfff",
                finish_reason=rng.choice(["length", "stop", None]),
            )
        )
        json.dumps(env.messages, ensure_ascii=False).encode("utf-8")
        json.dumps(r.observations, ensure_ascii=False).encode("utf-8")
        if env.stage == 2:
            break
    assert env.results and env.results[0].trajectory.termination in ("invalid_output", "length")
    env.results[0].model_dump_json().encode("utf-8")


# --------------------------------------------------------------------------- GRPO episodes


def test_grpo_rows_end_invalid_stages_early_and_never_run_a_cut_off_call(world, tmp_path_factory):
    """Token-level rows (trainers/episode.py) give the environment each turn's finish reason."""
    from transformers import AutoTokenizer

    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.trainers.chat_tokens import ChatTokens
    from shopping_companion.trainers.episode import Generation, run_row_episode
    from shopping_companion.trainers.resources import EnvResources
    from tests.tiny_model import TOOL_CHAT_TEMPLATE, build_tiny_model

    task, kit = world
    res = EnvResources(
        tasks={task.task_id: task},
        sessions=kit.pool,
        products=kit.products,
        embedder=kit.embedder,
        judge=kit.judge,
        reward_fn=load_rubric("paper", resources={"lookup": kit.lookup}),
    )
    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tok")))
    tok.chat_template = TOOL_CHAT_TEMPLATE

    async def prose(ids, sp):  # a model that never acts, ending each turn properly
        return Generation(
            tok.encode("I am not sure what to do.", add_special_tokens=False)[: sp["max_tokens"]] + [tok.eos_token_id]
        )

    ep = asyncio.run(run_row_episode(res.make_env(task), 1, ChatTokens(tok), prose, {}, 32768))
    assert ep.termination == "invalid_output" and ep.n_generations == 3  # not 20 (max_turns)
    assert ep.result is not None and [s.finish_reason for s in ep.result.trajectory.steps] == ["stop"] * 3

    call = '<tool_call>{"name": "mem_search", "arguments": {"queries": ["what colour do I like best"]}}</tool_call>'

    async def long_call(ids, sp):  # a call cut off by the response budget (no EOS)
        return Generation(tok.encode(call, add_special_tokens=False)[: sp["max_tokens"]])

    n_call = len(tok.encode(call, add_special_tokens=False))
    ep = asyncio.run(run_row_episode(res.make_env(task), 1, ChatTokens(tok), long_call, {}, n_call - 3))
    assert ep.termination == "token_budget"
    (step,) = ep.result.trajectory.steps
    assert step.finish_reason == "length"
    assert len(step.tool_results) == 1 and "cut off" in step.tool_results[0].error  # nothing was run
    assert step.tool_results[0].returned_ids == []
