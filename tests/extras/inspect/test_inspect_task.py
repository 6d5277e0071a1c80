"""The pieces of the Inspect integration: task parameters refused with the parameter's name, the
tools' schemas as the model sees them, the runnable Inspect tools against the environment's
observations (real BM25 index and memory store), and the model reply → action conversion."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.extras.inspect.conftest import require

require("inspect_ai")

from inspect_ai.model import ChatMessageAssistant, ContentReasoning, ContentText, ModelOutput  # noqa: E402
from inspect_ai.tool import ToolCall as InspectToolCall  # noqa: E402

from shopping_companion.envs.tools import ToolBox, tool_schema  # noqa: E402
from shopping_companion.errors import ConfigError  # noqa: E402
from shopping_companion.integrations.inspect import bench, inspect_tools, tool_infos  # noqa: E402
from shopping_companion.integrations.inspect.solvers import action_from_output, inspect_messages  # noqa: E402
from shopping_companion.integrations.inspect.task import strategy_list  # noqa: E402
from shopping_companion.types import ToolCall  # noqa: E402


def test_bad_task_parameters_are_refused_naming_them(tmp_path):
    with pytest.raises(ConfigError, match="bench: the benchmark directory is required"):
        bench()
    with pytest.raises(ConfigError, match="hint: must be one of none, low, high"):
        bench(bench=str(tmp_path), hint="medium")
    with pytest.raises(ConfigError, match="supported: .*two_stage:high"):
        bench(bench=str(tmp_path), strategies="three_stage")
    with pytest.raises(ConfigError, match=r"-T split\): Input should be 'train' or 'test'"):
        bench(bench=str(tmp_path), split="validation")
    with pytest.raises(ConfigError, match=r"unknown task parameter\(s\) limt; allowed: bench, split, limit"):
        bench(bench=str(tmp_path), limt=3)
    with pytest.raises(ConfigError, match="benchmark"):  # what loading raises, as one message
        bench(bench=str(tmp_path / "missing"))


def test_a_bad_parameter_is_one_line_under_inspect_eval(tmp_path):
    """``inspect eval`` prints a bad parameter as its message alone, without a traceback; an
    unknown parameter is an error, not Inspect's warning."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    inspect_cli = Path(sys.executable).parent / "inspect"
    for args, words in [
        (["-T", f"bench={tmp_path / 'missing'}"], "shopping_companion/bench:"),
        (["-T", f"bench={tmp_path}", "-T", "split=validation"], "-T split"),
        (["-T", f"bench={tmp_path}", "-T", "limt=3"], "unknown task parameter(s) limt"),
    ]:
        out = subprocess.run(
            [str(inspect_cli), "eval", "shopping_companion/bench", "--model", "mockllm/model", *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "INSPECT_DISPLAY"},  # as a user runs it
        )
        text = out.stdout + out.stderr
        assert out.returncode != 0 and words in text and "Traceback" not in text, text


def test_openai_provider_uses_chat_completions_off_openai(monkeypatch):
    """``--model openai/<name>`` with a local server's base URL sends Chat Completions (Inspect would
    send a name it does not know to the Responses API, which such servers lack); OpenAI's own
    endpoint is left to Inspect."""
    from inspect_ai.model import get_model

    from shopping_companion.integrations.inspect.solvers import chat_completions_off_openai

    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    local = get_model("openai/my-model", base_url="http://127.0.0.1:8000/v1", memoize=False)
    assert local.api.responses_api and chat_completions_off_openai(local) and not local.api.responses_api
    theirs = get_model("openai/my-model", memoize=False)
    assert not chat_completions_off_openai(theirs) and theirs.api.responses_api
    plain = get_model("openai-api/local/my-model", base_url="http://127.0.0.1:8000/v1", api_key="x", memoize=False)
    assert not chat_completions_off_openai(plain)


def test_hint_applies_to_two_stage_entries_without_one():
    names = [s.name for s in strategy_list("two_stage,oracle,two_stage:low", "high")]
    assert names == ["two_stage:high", "oracle", "two_stage:low"]
    assert [s.name for s in strategy_list(["one_stage"], None)] == ["one_stage"]


def test_tool_schemas_are_ours_less_what_inspect_cannot_hold():
    for info in tool_infos(("mem_search", "mem_view", "product_search", "product_view")):
        ours = tool_schema(info.name)["function"]
        assert info.description == ours["description"]
        shown = info.parameters.model_dump(exclude_none=True)
        assert shown["required"] == ours["parameters"]["required"]
        assert shown["properties"].keys() == ours["parameters"]["properties"].keys()
        for key, prop in ours["parameters"]["properties"].items():
            kept = {k: v for k, v in prop.items() if k not in ("minItems", "maxItems") and v is not None}
            assert {k: v for k, v in shown["properties"][key].items() if k in kept} == kept, (info.name, key)
    with pytest.raises(ValueError, match="unknown tool.*known: mem_search"):
        tool_infos(["web_search"])


def test_inspect_tools_return_the_environments_observations(product_search):
    box = ToolBox(product_search, None)
    tools = {t.name: t for t in inspect_tools(box, ("product_search", "product_view"))}
    args = {"query": "wireless headphones", "top_k": 3}
    got = asyncio.run(tools["product_search"].tool(**args))
    want = box.execute(ToolCall(name="product_search", arguments=args, call_id="c"), ("product_search",)).content
    assert got == want and json.loads(got)["n_results"] == 3
    bad = asyncio.run(tools["product_view"].tool(product_ids=[]))
    assert "error" in json.loads(bad)  # the argument model's bound (1-20 ids), as an observation


def test_replies_become_the_actions_our_backend_makes():
    msg = ChatMessageAssistant(
        content=[ContentReasoning(reasoning="plan", internal="think"), ContentText(text="<answer>x</answer>")],
        tool_calls=[InspectToolCall(id="a", function="mem_view", arguments={"session_ids": ["s1"]})],
    )
    act = action_from_output(ModelOutput.from_message(msg, stop_reason="max_tokens"))
    assert act.content == "<think>plan</think><answer>x</answer>" and act.reasoning is None
    assert act.finish_reason == "length"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in act.tool_calls] == [
        ("a", "mem_view", {"session_ids": ["s1"]})
    ]
    sep = ChatMessageAssistant(
        content=[ContentReasoning(reasoning="r", internal="reasoning_content"), ContentText(text="t")]
    )
    act = action_from_output(ModelOutput.from_message(sep))
    assert (act.content, act.reasoning, act.finish_reason) == ("t", "r", "stop")
    broken = ChatMessageAssistant(
        content="", tool_calls=[InspectToolCall(id="b", function="x", arguments={}, parse_error="bad")]
    )
    assert action_from_output(ModelOutput.from_message(broken)).tool_calls[0].arguments.startswith("unparseable")
    msgs = inspect_messages(
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "i", "function": {"name": "mem_view", "arguments": "{"}}],
            },
            {"role": "tool", "content": "obs", "tool_call_id": "i", "name": "mem_view"},
        ]
    )
    assert msgs[0].tool_calls[0].arguments == {"arguments": "{"} and msgs[1].function == "mem_view"
    with pytest.raises(ValueError, match="message role: must be system, user, assistant or tool"):
        inspect_messages([{"role": "developer", "content": "x"}])
