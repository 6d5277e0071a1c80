"""Defects a hostile break test found after the robustness work (issue 14), one regression each:
absurd ``usage`` numbers from a server crashed the report on every resume; an LLM judge whose
endpoint was down did not stop the run (each episode still ran its policy, then failed); a results
file deleted during a run silently swallowed every later line; a body nested deeper than Python's
recursion limit was an episode error instead of a retried backend error; a key echoed into the
reply's content was written to the results; ``timeout_s=1e308`` passed validation and failed every
episode; ``sys.exit()`` in a reward plug-in ended the run with status 0 and nothing written; a valid
last line without its newline was cut as torn; an identity file ``{}`` or a directory could not be
adopted with ``force``."""

from __future__ import annotations

import json
import os

import pytest

from shopping_companion.benchmark.evaluate import (
    EvalSettings,
    RunFileReplacedError,
    RunIdentityError,
    identity_path,
    run_evaluation,
)
from shopping_companion.benchmark.report import read_results
from shopping_companion.envs.env import EnvConfig
from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import BackendError, CircuitOpenError, Sampling
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.types import Step
from tests.benchmark.test_run_files import AnswerAtOnce, embedder, kit, make_tasks, run  # noqa: F401
from tests.openai_server import ScriptedOpenAIServer

KEY = "sk-SECRETKEY1234567890abcdef"
MSGS = [{"role": "user", "content": "hi"}]


def _backend(srv, **kw):
    return OpenAIBackend(
        "m", base_url=srv.base_url, api_key=KEY, timeout_s=2, max_retries=1, backoff_s=0, breaker_threshold=50, **kw
    )


def test_absurd_usage_numbers_are_unknown_not_stored(tmp_path):
    usage = {"prompt_tokens": -5, "completion_tokens": 1e308, "total_tokens": "x"}
    with ScriptedOpenAIServer(
        [
            {"content": "ok", "usage": usage},
            {
                "raw": '{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],'
                ' "usage": {"prompt_tokens": 1' + "0" * 400 + ', "completion_tokens": 7}}'
            },
        ]
    ) as srv:
        b = _backend(srv)
        m1, m2 = b.chat(MSGS, None, Sampling()), b.chat(MSGS, None, Sampling())
    assert (m1.prompt_tokens, m1.completion_tokens) == (None, None)
    assert (m2.prompt_tokens, m2.completion_tokens) == (None, 7)
    # results written before the check load with the count unknown (the report step averaged them)
    st = Step.model_validate({"assistant_text": "x", "prompt_tokens": 10**309, "completion_tokens": -5})
    assert st.prompt_tokens is None and st.completion_tokens is None


def test_a_body_nested_too_deep_is_a_retried_backend_error():
    deep = '{"choices": ' + "[" * 100_000
    with ScriptedOpenAIServer([{"raw": deep}, {"raw": deep}]) as srv:
        with pytest.raises(BackendError, match="nested too deep") as e:
            _backend(srv).chat(MSGS, None, Sampling())
        assert len(srv.chat_requests) == 2  # retried
    assert not isinstance(e.value, CircuitOpenError)


def test_a_key_echoed_into_the_reply_is_scrubbed():
    reply = {
        "content": f"your key is {KEY} and its start {KEY[:12]}",
        "reasoning_content": f"Bearer {KEY}",
        "tool_calls": [{"name": "mem_search", "arguments": {"queries": [KEY[3:20]]}}],
    }
    with ScriptedOpenAIServer([reply]) as srv:
        m = _backend(srv).chat(MSGS, None, Sampling())
    blob = m.model_dump_json()
    for k in range(0, len(KEY) - 8):
        assert KEY[k : k + 8] not in blob
    assert m.content.startswith("your key is ***") and m.tool_calls[0].name == "mem_search"


@pytest.mark.parametrize("value", [1e308, 1e7])
def test_absurd_time_limits_are_configuration_errors(value):
    with pytest.raises(ConfigError, match="timeout_s: must be at most"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout_s=value)
    with pytest.raises(ConfigError, match="deadline_s: must be at most"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="k", deadline_s=value)


class _DownJudge:
    """An LLM judge whose endpoint's breaker is open (what LLMJudge raises then)."""

    def __init__(self):
        self.calls = 0

    def judge(self, task, traj):
        self.calls += 1
        raise CircuitOpenError("5 consecutive connection failures or timeouts to http://127.0.0.1:9/v1")


def test_a_judge_endpoint_that_is_down_stops_the_run(kit, tmp_path):  # noqa: F811
    make_memory, _ = kit
    tasks = make_tasks(6)
    policy, judge = AnswerAtOnce(), _DownJudge()
    path = tmp_path / "results.jsonl"
    with pytest.raises(CircuitOpenError):
        run_evaluation(
            tasks,
            policy,
            None,
            make_memory,
            judge,
            path,
            EvalSettings(env=EnvConfig(max_turns=3)),
            concurrency=1,
            progress=False,
        )
    assert judge.calls == 1 and policy.calls == 1  # nothing started after the judge's endpoint went down
    assert not path.exists() or read_results(path) == []


def test_a_results_file_deleted_during_the_run_stops_it_loudly(kit, tmp_path):  # noqa: F811
    tasks = make_tasks(5)
    path = tmp_path / "results.jsonl"

    class DeletesTheFile(AnswerAtOnce):
        def chat(self, messages, tools=None, sampling=None):
            if self.calls == 4 and path.exists():  # after two episodes were written
                os.unlink(path)
            return super().chat(messages, tools, sampling)

    with pytest.raises(RunFileReplacedError, match="was deleted while this run was writing it"):
        run(tasks, path, kit, policy=DeletesTheFile(), concurrency=1)


def test_sys_exit_in_a_reward_plug_in_is_an_episode_error(kit, tmp_path):  # noqa: F811
    tasks = make_tasks(3)

    def reward(task, traj, verdict):
        if task.task_id == tasks[1].task_id:
            raise SystemExit(0)
        from shopping_companion.rewards.total import compute_reward

        return compute_reward(task, traj, verdict)

    path = tmp_path / "results.jsonl"
    res = run(tasks, path, kit, settings=EvalSettings(env=EnvConfig(max_turns=3), reward_fn=reward))
    by_id = {r.task_id: r for r in res}
    assert len(res) == 3 and by_id[tasks[1].task_id].error.startswith("episode error: SystemExit")
    assert by_id[tasks[0].task_id].error is None and len(read_results(path)) == 3


def test_a_valid_last_line_without_newline_is_kept_and_a_torn_one_kept_aside(kit, tmp_path):  # noqa: F811
    tasks = make_tasks(3)
    path = tmp_path / "results.jsonl"
    run(tasks, path, kit)
    full = path.read_bytes()
    path.write_bytes(full[:-1])  # an editor dropped the final newline
    policy = AnswerAtOnce()
    run(tasks, path, kit, policy=policy)
    assert policy.calls == 0 and path.read_bytes() == full
    path.write_bytes(full[:-40])  # a torn write
    run(tasks, path, kit)
    assert len(read_results(path)) == 3
    assert path.with_name("results.jsonl.torn").read_bytes().startswith(full[full.rfind(b"\n", 0, -1) + 1 : -40])


def test_an_empty_identity_can_be_adopted_and_a_directory_is_refused_clearly(kit, tmp_path):  # noqa: F811
    tasks = make_tasks(2)
    path = tmp_path / "results.jsonl"
    run(tasks, path, kit, identity={"policy": "p"})
    identity_path(path).write_text("{}")
    with pytest.raises(RunIdentityError, match="is empty"):
        run(tasks, path, kit, identity={"policy": "p"})
    run(tasks, path, kit, identity={"policy": "p"}, force=True)
    assert json.loads(identity_path(path).read_text()) == {"policy": "p"}
    identity_path(path).unlink()
    identity_path(path).mkdir()
    with pytest.raises(RunIdentityError, match="is a directory"):
        run(tasks, path, kit, identity={"policy": "p"}, force=True)


def test_a_short_placeholder_key_does_not_mangle_the_reply():
    """Scrubbing reply text replaced every "k" of the content when the key was the placeholder "k"."""
    with ScriptedOpenAIServer(["<think>keep thinking</think> bad_luck, kk"]) as srv:
        m = OpenAIBackend("m", base_url=srv.base_url, api_key="k", max_retries=0).chat(MSGS, None, Sampling())
    assert m.content == "<think>keep thinking</think> bad_luck, kk"
