"""The local-transformers backend with a tiny Qwen3-style model built in the test (STACK.md recipe):
real prompts rendered by the tokenizer's chat template with tools, real generation on CPU, real
environment steps. A random model writes junk: the environment must turn it into error / no-action
observations and end each stage at max_turns, with token counts recorded."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.evaluate import EvalSettings, run_episode
from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from shopping_companion.envs.env import EnvConfig
from shopping_companion.envs.tools import tool_schema
from shopping_companion.errors import ConfigError
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.base import BackendError, Sampling
from shopping_companion.llm.local_transformers import LocalTransformersBackend
from shopping_companion.memory.store import MemoryStore
from tests.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen3-tiny")


@pytest.fixture(scope="module")
def backend(tiny):
    return LocalTransformersBackend(tiny, device="cpu")


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(1, seed=31, sessions_per_user=40)


def test_chat_renders_tools_counts_tokens_and_is_seeded(backend):
    tools = [tool_schema("mem_search"), tool_schema("mem_view")]
    msgs = [
        {"role": "system", "content": "You are a memory specialist."},
        {"role": "user", "content": "Shopping request: a navy shirt"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "mem_search", "arguments": '{"queries": ["navy"]}'},
                }
            ],
        },
        {"role": "tool", "content": '{"results": []}', "name": "mem_search", "tool_call_id": "c1"},
    ]
    prompt = backend.render(msgs, tools)
    assert '"name": "mem_view"' in prompt and "<tool_response>" in prompt
    assert (
        '{"name": "mem_search", "arguments": {"queries": ["navy"]}}' in prompt
    )  # string args decoded for the template
    a = backend.chat(msgs, tools, Sampling(temperature=0.8, max_tokens=12, seed=5))
    b = backend.chat(msgs, tools, Sampling(temperature=0.8, max_tokens=12, seed=5))
    c = backend.chat(msgs, tools, Sampling(temperature=0.0, max_tokens=12))
    assert a.content == b.content  # same seed, same request → same text
    assert a.prompt_tokens == len(backend.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert 1 <= a.completion_tokens <= 12 and a.finish_reason in ("stop", "length")
    assert a.latency_s is not None and a.latency_s > 0
    assert c.completion_tokens <= 12
    # protocol tags are non-special tokens: they survive decoding
    ids = backend.tokenizer("<tool_call>x</tool_call><think>y</think>", add_special_tokens=False)["input_ids"]
    assert backend.tokenizer.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call><think>y</think>"


def test_context_overflow_is_a_backend_error(tiny):
    small = LocalTransformersBackend(tiny)
    small.max_context = 64
    with pytest.raises(BackendError, match="context is 64"):
        small.chat([{"role": "user", "content": "word " * 200}], None, Sampling(max_tokens=4))


def test_bad_configuration_is_refused(tiny, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        LocalTransformersBackend(tmp_path / "nope")
    with pytest.raises(ConfigError, match="dtype"):
        LocalTransformersBackend(tiny, dtype="int3")
    with pytest.raises(ConfigError, match="adapter_path"):
        LocalTransformersBackend(tiny, adapter_path=tmp_path / "no-adapter")


def test_junk_model_runs_real_episode_steps(bench, backend, product_search, embedder):
    task = bench.tasks[0]
    judge = RuleJudge(lambda ids: {p: product_search.get(p) for p in ids if product_search.get(p)})
    memory = MemoryStore.from_pool(bench.sessions, task.history, embedder)
    settings = EvalSettings(sampling=Sampling(temperature=1.0, max_tokens=16, seed=1), env=EnvConfig(max_turns=2))
    res = run_episode(task, backend, product_search, memory, judge, settings)
    assert res.error is None and len(res.stages) == 2 and res.policy == "local:qwen3-tiny"
    for st in res.stages:
        t = st.trajectory
        assert t.termination == "max_turns" and len(t.steps) == 2
        for s in t.steps:
            assert s.prompt_tokens and s.prompt_tokens > 100  # system prompt + tool schemas
            assert 1 <= s.completion_tokens <= 16
        # junk never answers; every turn got an observation (error or a no-action reminder)
        after = [m for m in t.messages[2:] if m.role != "assistant"]
        assert len(after) >= 2
        assert st.reward.components["f_ans"] == 0.0
    assert not res.succ and res.acc == 0.0
    # the prompt of the 2nd turn is longer than the first's: the observation was appended
    s1 = res.stages[0].trajectory.steps
    assert s1[1].prompt_tokens > s1[0].prompt_tokens


def test_cli_eval_with_a_local_checkpoint(bench, tiny, catalog_index_dir, tmp_path):
    bench_dir = write_benchmark(bench, tmp_path / "bench")
    out = CliRunner().invoke(
        app,
        [
            "eval",
            "--bench",
            str(bench_dir),
            "--name",
            "tiny",
            "--backend",
            "local",
            "--model-path",
            str(tiny),
            "--index-dir",
            str(catalog_index_dir),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--max-turns",
            "2",
            "--max-tokens",
            "8",
            "--concurrency",
            "2",
        ],
    )
    assert out.exit_code == 0, out.output
    run = tmp_path / "runs" / "tiny"
    (res,) = read_results(run / "results.jsonl")
    assert res.policy == "local:qwen3-tiny" and res.error is None
    assert all(s.completion_tokens for st in res.stages for s in st.trajectory.steps)
    report = (run / "report.md").read_text()
    assert f"| local checkpoint | {tiny} |" in report
    ident = json.loads((run / "results.identity.json").read_text())
    assert ident["config"]["backend"]["model_path"] == str(tiny) and ident["policy"] == "local:qwen3-tiny"


def test_lora_adapter_is_applied(tiny, tmp_path):
    peft = pytest.importorskip("peft")
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny)
    cfg = peft.LoraConfig(
        r=4, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    torch.manual_seed(0)
    lora = peft.get_peft_model(base, cfg)
    for n, p in lora.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)  # a visible change
    lora.save_pretrained(tmp_path / "adapter")
    msgs = [{"role": "user", "content": "Shopping request: a navy shirt"}]
    greedy = Sampling(temperature=0.0, max_tokens=12)
    plain = LocalTransformersBackend(tiny)
    adapted = LocalTransformersBackend(tiny, adapter_path=tmp_path / "adapter")
    unmerged = LocalTransformersBackend(tiny, adapter_path=tmp_path / "adapter", merge_adapter=False)
    assert adapted.name == "local:qwen3-tiny+lora:adapter"
    a, b, c = (x.chat(msgs, None, greedy) for x in (plain, adapted, unmerged))
    assert a.content != b.content  # the adapter changes the model
    assert b.content == c.content  # merged and unmerged adapters agree


def _eval_local(bench_dir, model_path, name: str, runs_dir, index_dir):
    return CliRunner().invoke(
        app,
        ["eval", "--bench", str(bench_dir), "--name", name, "--backend", "local", "--model-path", str(model_path)]
        + ["--index-dir", str(index_dir), "--runs-dir", str(runs_dir), "--max-turns", "2", "--max-tokens", "8"],
    )


def test_checkpoints_of_two_runs_are_named_apart_and_viewed_apart(bench, tiny, catalog_index_dir, tmp_path):
    """Two TRL checkpoints of step 60 of different GRPO runs, evaluated by the real ``shopcomp
    eval --backend local``, get two policy names (run and step), and the real ``shopcomp view``
    server shows them apart on the runs and compare pages. A run started before the names carried
    the run (its identity holds ``local:checkpoint-60``) is refused on resume, naming the change."""
    import httpx

    from shopping_companion.config import config_hash
    from tests.viewer.test_viewer_server import Server

    bench_dir = write_benchmark(bench, tmp_path / "bench")
    runs_dir = tmp_path / "runs"
    for run in ("outcome_only", "outcome_tool"):
        ckpt = tmp_path / "grpo" / run / "checkpoint-60"  # TRL's layout; the weights are the tiny model's
        ckpt.parent.mkdir(parents=True)
        ckpt.symlink_to(tiny, target_is_directory=True)
        out = _eval_local(bench_dir, ckpt, f"eval-{run}", runs_dir, catalog_index_dir)
        assert out.exit_code == 0, out.output
        (res,) = read_results(runs_dir / f"eval-{run}" / "results.jsonl")
        assert res.policy == f"local:{run}/checkpoint-60" and res.error is None
        ident = json.loads((runs_dir / f"eval-{run}" / "results.identity.json").read_text())
        assert ident["policy"] == res.policy and ident["config"]["backend"]["model_path"] == str(ckpt)

    server = Server([str(runs_dir), "--port", "0"], cwd=tmp_path)
    try:
        runs = httpx.get(server.base + "api/runs", timeout=30).json()["runs"]
        assert sorted((s["policy"], s["step"]) for s in runs) == [
            ("local:outcome_only/checkpoint-60", 60),
            ("local:outcome_tool/checkpoint-60", 60),
        ]
        home = httpx.get(server.base, timeout=30).text.replace("<wbr>", "")
        cells = re.findall(r'<td class="policy">(.*?)</td>', home, re.S)
        assert len(cells) == 2 and "local:outcome_only/checkpoint-60" in cells[0] + cells[1]
        assert "local:outcome_tool/checkpoint-60" in cells[0] + cells[1] and all("step 60" in c for c in cells)
        page = httpx.get(server.base + "compare?a=eval-outcome_only&b=eval-outcome_tool", timeout=60)
        text = page.text.replace("<wbr>", "")
        assert page.status_code == 200 and "Metric deltas" in text
        assert (
            "(local:outcome_only/checkpoint-60 · step 60)" in text
            and "(local:outcome_tool/checkpoint-60 · step 60)" in text
        )
    finally:
        server.stop()

    # a run of the old release: the same results, its identity made with the old name
    old = runs_dir / "eval-outcome_only"
    ident = json.loads((old / "results.identity.json").read_text())
    body = {k: v for k, v in ident.items() if k != "config_sha256"} | {"policy": "local:checkpoint-60"}
    (old / "results.identity.json").write_text(json.dumps({"config_sha256": config_hash(body), **body}))
    out = _eval_local(
        bench_dir,
        tmp_path / "grpo" / "outcome_only" / "checkpoint-60",
        "eval-outcome_only",
        runs_dir,
        catalog_index_dir,
    )
    assert out.exit_code == 2, out.output
    flat = " ".join(out.output.split())
    assert "local:checkpoint-60" in flat and "local:outcome_only/checkpoint-60" in flat and "--name" in flat
