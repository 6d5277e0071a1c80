"""SFT building blocks without the catalog: keep rules on judged episodes, step-level splitting,
the ShareGPT conversion and its round trip, the paper's training config, decontamination."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from shopping_companion.envs.parsing import format_flags, parse_action
from shopping_companion.errors import ConfigError
from shopping_companion.sft.collect import KeepPolicy, select_kept
from shopping_companion.sft.decontam import ContaminationError, check_decontaminated, find_contamination
from shopping_companion.sft.examples import StepExample, example_stats, step_examples
from shopping_companion.sft.export import paper_train_config, render_target, round_trip_ok, to_sharegpt
from shopping_companion.types import (
    EpisodeResult,
    Message,
    Preference,
    ProductSlot,
    RewardBreakdown,
    SessionRef,
    StageResult,
    Step,
    Task,
    ToolResult,
    Trajectory,
    Verdict,
)

REPO = Path(__file__).resolve().parents[2]


def _step(text: str, results: list[ToolResult] | None = None) -> Step:
    parsed = parse_action(text, call_id_prefix="c")
    return Step(
        assistant_text=text, tool_calls=parsed.tool_calls, tool_results=results or [], format=format_flags(parsed)
    )


def _stage(stage: int, texts: list[str]) -> Trajectory:
    """A stage whose assistant turns are ``texts``; each tool call gets a tool result message."""
    tools = "mem_search" if stage == 1 else "product_search"
    msgs = [Message(role="system", content=f"system {stage}"), Message(role="user", content="Shopping request: shirt")]
    steps = []
    for t in texts:
        s = _step(t)
        msgs.append(Message(role="assistant", content=t))
        if s.tool_calls:
            for c in s.tool_calls:
                r = ToolResult(call_id=c.call_id, name=c.name, content=json.dumps({"results": [c.name]}))
                s.tool_results.append(r)
                msgs.append(Message(role="tool", content=r.content, name=r.name, tool_call_id=r.call_id))
        elif not s.format.has_answer:
            msgs.append(Message(role="user", content="Please call a tool or answer."))
        steps.append(s)
    del tools
    return Trajectory(task_id="t1", stage=stage, messages=msgs, steps=steps, termination="answered")


def _verdict(stage: int, success: bool, m1: float | None = None) -> Verdict:
    return Verdict(judge="rule", stage=stage, F=2, N=1, success=success, m1=m1)


def _episode(trial: int, s1_ok: bool, s2_ok: bool, acc: float, error: str | None = None) -> EpisodeResult:
    rb = RewardBreakdown(total=0.0)
    call1 = '<tool_call>{"name": "mem_search", "arguments": {"queries": ["shirt"]}}</tool_call>'
    call2 = (
        '<think>\nlook\n</think>\n\n<tool_call>{"name": "product_search", "arguments": {"query": "navy"}}</tool_call>'
    )
    return EpisodeResult(
        task_id="t1",
        task_type="single",
        mode="two_stage",
        policy="p",
        trial=trial,
        stages=[
            StageResult(
                trajectory=_stage(1, [call1, '<answer>{"preferences": []}</answer>']),
                verdict=_verdict(1, s1_ok, acc * 2),
                reward=rb,
            ),
            StageResult(
                trajectory=_stage(2, [call2, "oops", "<answer>@REC::a:1@</answer>"]),
                verdict=_verdict(2, s2_ok),
                reward=rb,
            ),
        ],
        acc=acc,
        succ=s2_ok,
        wall_s=1.0,
        error=error,
    )


def test_keep_rules():
    eps = [
        _episode(0, True, True, 1.0),
        _episode(1, True, False, 1.0),
        _episode(2, False, True, 0.5),
        _episode(3, True, True, 1.0, error="backend failed"),
    ]
    succ = select_kept(eps, KeepPolicy(rule="succ"))
    assert [(k.trial, k.stage) for k in succ] == [(0, 1), (0, 2), (2, 1), (2, 2)]
    stage = select_kept(eps, KeepPolicy(rule="stage"))
    assert [(k.trial, k.stage) for k in stage] == [(0, 1), (0, 2), (1, 1), (2, 2)]
    acc = select_kept(eps, KeepPolicy(rule="pref_acc", min_acc=0.5, stages=[1]))
    assert [(k.trial, k.stage) for k in acc] == [(0, 1), (1, 1), (2, 1)]
    assert select_kept(eps, KeepPolicy(rule="pref_acc", min_acc=0.75, stages=[1]))[-1].trial == 1


@pytest.mark.parametrize(
    "args,field",
    [(("best",), "keep"), (("succ", 1.5), "min_acc"), (("succ", 1.0, "3"), "stages"), (("succ", 1.0, "x"), "stages")],
)
def test_keep_policy_errors_name_the_field(args, field):
    with pytest.raises(ConfigError, match=field):
        KeepPolicy.parse(*args)


def test_step_examples_split_every_turn_and_drop_malformed_targets():
    kept = select_kept([_episode(0, True, True, 1.0)], KeepPolicy(rule="succ"))
    ex = step_examples(kept)
    # stage 1: 2 turns; stage 2: 3 turns, of which "oops" is malformed (dropped as a target)
    assert [(e.stage, e.turn, e.target_kind) for e in ex] == [
        (1, 0, "tool_call"),
        (1, 1, "answer"),
        (2, 0, "tool_call"),
        (2, 2, "answer"),
    ]
    last = ex[-1]
    assert [m["role"] for m in last.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert last.messages[2]["tool_calls"][0]["function"]["name"] == "product_search"
    assert len(step_examples(kept, drop_malformed=False)) == 5
    st = example_stats(ex)
    assert st["n"] == 4 and st["by_stage"] == {"1": 2, "2": 2}
    assert st["by_tool"] == {"answer": 2, "mem_search": 1, "product_search": 1}
    assert st["by_turn"] == {"0": 2, "1": 1, "2": 1} and st["trajectories"] == 2


def _example(messages: list[dict], tools: list | None = None) -> StepExample:
    return StepExample(
        example_id="e",
        task_id="t1",
        trial=0,
        stage=2,
        mode="two_stage",
        turn=0,
        n_turns=1,
        target_kind="tool_call",
        tools=tools or [],
        messages=messages,
    )


def test_sharegpt_merges_tool_responses_and_renders_multi_call_turns():
    call = lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}  # noqa: E731
    text = (
        '<think>\nplan: two searches\n</think>\n\nok <tool_call>{"name": "product_search", "arguments": '
        '{"query": "a"}}</tool_call><tool_call>{"name": "product_search", "arguments": {"query": "b é"}}</tool_call>'
    )
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                call("c0", "product_search", {"query": "a"}),
                call("c1", "product_search", {"query": "b é"}),
            ],
        },
        {"role": "tool", "content": "R1"},
        {"role": "tool", "content": "R2"},
        {"role": "assistant", "content": "</think>\n<answer>@REC::x:1@</answer>"},
    ]
    rec = to_sharegpt(_example(msgs, [{"type": "function", "function": {"name": "product_search"}}]))
    assert [c["from"] for c in rec["conversations"]] == ["human", "function_call", "observation", "gpt"]
    assert rec["conversations"][2]["value"] == "R1\n</tool_response>\n<tool_response>\nR2"
    fc = rec["conversations"][1]["value"]
    assert fc.startswith("<think>\nplan: two searches\n</think>\n\n[")
    rendered = render_target(rec["conversations"][1])
    assert rendered.count("<tool_call>\n") == 2 and "b é" in rendered
    got = parse_action(rendered)
    assert [c.arguments for c in got.tool_calls] == [
        {"query": "a"},
        {"query": "b é"},
    ] and got.thinking == "plan: two searches"
    assert rec["system"] == "S" and json.loads(rec["tools"])[0]["function"]["name"] == "product_search"
    assert round_trip_ok(_example(msgs[:3]), to_sharegpt(_example(msgs[:3]))) is None
    # the Qwen3 form with only a closing </think> is normalised to an explicit block
    assert rec["conversations"][3]["value"] == "<answer>@REC::x:1@</answer>"


def test_sharegpt_refuses_broken_alternation():
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    with pytest.raises(ValueError, match="alternation"):
        to_sharegpt(_example(msgs))
    with pytest.raises(ValueError, match="system prompt"):
        to_sharegpt(_example(msgs[1:]))


def test_paper_config_and_repo_yaml_agree():
    cfg = paper_train_config()
    assert (
        cfg["lora_rank"],
        cfg["lora_target"],
        cfg["num_train_epochs"],
        cfg["lr_scheduler_type"],
        cfg["learning_rate"],
        cfg["bf16"],
        cfg["per_device_train_batch_size"],
        cfg["model_name_or_path"],
    ) == (64, "q_proj,k_proj,v_proj,o_proj", 3.0, "cosine", 5e-5, True, 4, "Qwen/Qwen3-4B-Thinking-2507")
    assert yaml.safe_load((REPO / "configs/sft/qwen3_4b_thinking_lora.yaml").read_text()) == cfg
    with pytest.raises(ConfigError, match="template"):
        paper_train_config(template="llama3")


def _task(tid: str, split: str, instruction: str, needle: str, ref: str) -> Task:
    return Task(
        task_id=tid,
        split=split,
        instruction=instruction,
        user_id="u",
        history=[SessionRef(session_id=needle, date="2024-01-01")],
        needle_session_ids=[needle],
        preferences=[Preference(attribute="colour", value="navy")],
        slots=[ProductSlot(product_type="shirt", reference_product_id=ref)],
    )


def test_decontamination_kinds_and_exposure():
    test = _task("T", "test", "Please find me a linen summer shirt for the beach trip", "needle-T", "shop:42")
    train = _task("R", "train", "I want a pair of running shoes for my marathon", "needle-R", "shop:7")
    ok = _example(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": train.instruction},
            {"role": "tool", "content": '{"results": [{"product_id": "shop:42"}]}'},
            {"role": "assistant", "content": "<answer>@REC::shop:7@</answer>"},
        ]
    )
    report = check_decontaminated([ok], [test], train_tasks=[train])
    assert report["violations"] == 0 and report["exposures"] == 1  # seen in an observation only
    with pytest.raises(ContaminationError, match="reference_product"):
        check_decontaminated([ok], [test], products="all")
    leaks = [
        ("instruction", {"role": "user", "content": "  PLEASE find me a linen summer shirt, for the beach trip!"}),
        ("needle_session", {"role": "tool", "content": '{"session_id": "needle-T"}'}),
        ("reference_product", {"role": "assistant", "content": "<answer>@REC::shop:42@</answer>"}),
    ]
    for kind, msg in leaks:
        ex = _example([{"role": "system", "content": "S"}, msg])
        v, _, _ = find_contamination([ex], [test])
        assert [f.kind for f in v] == [kind]
    # an instruction a train task also has is the train task's own text, not a leak
    twin = train.model_copy(update={"task_id": "R2", "instruction": test.instruction})
    v, _, shared = find_contamination(
        [_example([{"role": "user", "content": test.instruction}])], [test], train_tasks=[twin]
    )
    assert v == [] and shared == 1


# --------------------------------------------------------------------------- sft collect's config

REPO = Path(__file__).resolve().parents[2]


def test_collect_config_file_then_flags_then_sets(tmp_path):
    from shopping_companion.cli.sft import load_collect_config

    f = tmp_path / "collect.yaml"
    f.write_text(
        "bench: {path: rel/bench}\ntrials: 3\nbackend: {sampling: {temperature: 0.2}}\n"
        "keep: {rule: stage, stages: '2'}\n"
    )
    cfg = load_collect_config(
        f, ["backend.sampling.temperature=0.9"], {"trials": 5, "backend.sampling.temperature": 0.5}
    )
    assert cfg.trials == 5 and cfg.backend.sampling.temperature == 0.9  # flags over the file, --set over flags
    assert cfg.keep == KeepPolicy(rule="stage", stages=[2])  # "2" parsed as on the command line
    assert cfg.bench.path.is_absolute() and cfg.bench.split == "train"
    ev = cfg
    assert ev.trials == 5 and ev.bench.split == "train" and ev.strategies == ["two_stage:none"]
    other = load_collect_config(f, ["backend.sampling.temperature=0.8"], {})
    assert other.identity() != ev.identity()  # the run identity hashes the sampling


def test_collect_example_config_loads():
    from shopping_companion.cli.sft import load_collect_config

    cfg = load_collect_config(REPO / "configs" / "sft" / "collect_example.yaml", [], {})
    assert cfg.backend.kind == "openai" and cfg.keep.rule == "succ" and cfg.trials == 4
    assert cfg.env.max_turns == 20


@pytest.mark.parametrize(
    "sets,needles",
    [
        (["bogus=1"], ["bogus: unknown field", "allowed: backend, bench"]),
        (["bench.split=test"], ["bench.split", "'train'"]),
        (["keep.rule=best"], ["keep.rule", "'succ'"]),
        (["backend.sampling.tmperature=1"], ["backend.sampling.tmperature: unknown field", "temperature"]),
    ],
)
def test_collect_config_errors_name_the_field_and_the_allowed_values(sets, needles):
    from shopping_companion.cli.sft import load_collect_config

    with pytest.raises(ConfigError) as e:
        load_collect_config(None, sets, {"bench.path": "b"})
    for n in needles:
        assert n in str(e.value), str(e.value)


def test_collect_cli_refuses_a_bad_key_before_touching_anything(tmp_path):
    from typer.testing import CliRunner

    from shopping_companion.cli.sft import app

    out = tmp_path / "c"
    r = CliRunner().invoke(app, ["collect", "--bench", str(tmp_path), "--out", str(out), "--set", "bogus=1"])
    assert r.exit_code == 2 and "bogus: unknown field" in r.output and "allowed:" in r.output, r.output
    assert r.output.count("error:") == 1 and not out.exists()
    r = CliRunner().invoke(app, ["collect", "--out", str(out)])
    assert r.exit_code == 2 and "bench: required" in r.output, r.output


def test_collect_help_reads_well_at_80_columns():
    from typer.testing import CliRunner

    from shopping_companion.cli.sft import app

    for cmd in ("collect", "export", "stats"):
        text = CliRunner().invoke(app, [cmd, "-h"], terminal_width=80, env={"COLUMNS": "80"}).output
        assert "<bool>" not in text and "<str>" not in text and "TEXT" not in text and "INTEGER" not in text, text
        assert all(len(line) <= 80 for line in text.splitlines()), text
    text = CliRunner().invoke(app, ["collect", "-h"], terminal_width=80, env={"COLUMNS": "80"}).output
    for opt in ("--bench DIR", "--base-url URL", "-n, --trials N", "--judge-api-key-env VAR", "--set KEY=VALUE"):
        assert opt in text
