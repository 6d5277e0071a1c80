"""SFT data pipeline end to end on real data: a synthesised benchmark over the real catalog and
real SGD conversations, teachers (the reference policy through ``shopcomp sft collect``, and an
LLM-style teacher with thinking served by the local scripted OpenAI-compatible server), the rule
judge, step-level examples, LLaMA-Factory export and decontamination against the test split."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from shopping_companion.benchmark.evaluate import EvalSettings
from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import SynthConfig, synthesize, write_benchmark
from shopping_companion.envs.env import EnvConfig
from shopping_companion.envs.parsing import parse_action
from shopping_companion.errors import ConfigError
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.base import Sampling
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.pipeline import memory_factory
from shopping_companion.cli.sft import app
from shopping_companion.sft.collect import KeepPolicy, collect, read_kept, select_kept
from shopping_companion.sft.decontam import ContaminationError
from shopping_companion.sft.examples import step_examples
from shopping_companion.sft.export import export_dataset, render_target
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import policy_script

pytestmark = pytest.mark.slow

THINK = '<think>\nThe user wants something specific.\nCheck "quotes", unicode café and a brace {.\n</think>\n\n'


@pytest.fixture(scope="module")
def bench(catalog_products, sgd_sessions, product_search):
    def searcher(q, k):
        return [h["product_id"] for h in product_search.search(q, top_k=k)]

    cfg = SynthConfig(n_tasks=6, seed=41, sessions_per_user=30, test_fraction=0.34, addon_share=0.0)
    return synthesize(catalog_products, sgd_sessions, cfg, searcher=searcher)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("sftbench") / "bench")


@pytest.fixture(scope="module")
def judge(product_search):
    return RuleJudge(lambda ids: {p: product_search.get(p) for p in ids if product_search.get(p) is not None})


def thinking_script(tasks):
    """The scripted teacher with real multi-line thinking and free text before each tool call."""
    base = policy_script(tasks, think=False)

    def script(body):
        text = base(body)
        return THINK + ("Let me look that up.\n" if "<tool_call>" in text else "") + text

    return script


@pytest.fixture(scope="module")
def thinking_collect(bench, product_search, embedder, judge, tmp_path_factory):
    train = [t for t in bench.tasks if t.split == "train"]
    out = tmp_path_factory.mktemp("collect-think")
    with ScriptedOpenAIServer(thinking_script(bench.tasks)) as srv:
        teacher = OpenAIBackend(model=srv.model, base_url=srv.base_url, api_key_env="SHOPCOMP_TEST_NO_KEY")
        settings = EvalSettings(trials=3, sampling=Sampling(temperature=0.7, seed=3), env=EnvConfig(max_turns=6))
        summary = collect(
            train,
            teacher,
            product_search,
            memory_factory(bench.sessions, embedder),
            judge,
            out,
            settings,
            policy=KeepPolicy(rule="stage"),
            concurrency=2,
            progress=False,
        )
    return out, summary


def test_bench_has_both_splits(bench):
    splits = {t.split for t in bench.tasks}
    assert splits == {"train", "test"}


def test_collect_keeps_only_judged_successes_and_records_settings(thinking_collect, bench):
    out, summary = thinking_collect
    n_train = sum(t.split == "train" for t in bench.tasks)
    results = read_results(out / "rollouts.jsonl")
    assert len(results) == summary.episodes == 3 * n_train and summary.new_episodes == 3 * n_train
    assert {r.task_id for r in results} <= {t.task_id for t in bench.tasks if t.split == "train"}
    kept = read_kept(out)
    assert summary.kept == len(kept) > 0
    by_key = {(r.task_id, r.trial): r for r in results}
    for k in kept:
        r = by_key[(k.task_id, k.trial)]
        v = next(s.verdict for s in r.stages if s.trajectory.stage == k.stage)
        assert v.success and not v.failed  # rule "stage": each stage on its own verdict
    # every successful stage was kept (nothing dropped silently)
    n_success = sum(s.verdict.success for r in results for s in r.stages if r.error is None)
    assert n_success == len(kept)
    # the scripted teacher fails some stages on purpose (seed-dependent), so rejection happened
    assert len(kept) < sum(len(r.stages) for r in results)
    manifest = json.loads((out / "collect.json").read_text())
    ident = manifest["identity"]
    assert ident["teacher"].startswith("openai:") or "scripted" in ident["teacher"]
    assert ident["judge"] and ident["settings"]["sampling"]["temperature"] == 0.7
    assert ident["settings"]["trials"] == 3 and manifest["keep"]["rule"] == "stage"
    # keep rules differ as documented: episode Succ keeps whole episodes
    succ = select_kept(results, KeepPolicy(rule="succ"))
    assert all(by_key[(k.task_id, k.trial)].succ for k in succ)
    assert {(k.task_id, k.trial) for k in succ} == {(r.task_id, r.trial) for r in results if r.succ and r.error is None}
    strict = select_kept(results, KeepPolicy(rule="pref_acc", min_acc=1.0, stages=[1]))
    assert all(k.stage == 1 and k.acc == 1.0 for k in strict)


def test_step_examples_cover_every_assistant_turn_with_full_context(thinking_collect):
    out, _ = thinking_collect
    kept = read_kept(out)
    examples = step_examples(kept)
    n_turns = sum(len(k.trajectory.steps) for k in kept)
    assert len(examples) == n_turns  # the scripted teacher never emits a malformed turn
    for ex in examples:
        k = next(k for k in kept if ex.example_id.startswith(k.key + "/"))
        a_idx = [i for i, m in enumerate(k.trajectory.messages) if m.role == "assistant"]
        cut = a_idx[ex.turn]
        assert len(ex.messages) == cut + 1
        assert [m["role"] for m in ex.messages] == [m.role for m in k.trajectory.messages[: cut + 1]]
        assert ex.messages[0]["role"] == "system" and ex.messages[-1]["role"] == "assistant"
        assert ex.messages[-1]["content"] == k.trajectory.messages[cut].content
        assert {t["function"]["name"] for t in ex.tools} == (
            {"mem_search", "mem_view"} if ex.stage == 1 else {"product_search", "product_view"}
        )


def test_export_writes_llamafactory_data_that_round_trips(thinking_collect, bench, tmp_path):
    out, _ = thinking_collect
    examples = step_examples(read_kept(out))
    tests = [t for t in bench.tasks if t.split == "test"]
    summary = export_dataset(
        examples,
        tmp_path / "export",
        test_tasks=tests,
        sessions=bench.sessions,
        train_tasks=bench.tasks,
        overrides={"cutoff_len": "4096"},
    )
    assert summary.examples == len(examples) and not summary.skipped
    records = [json.loads(x) for x in summary.data_file.read_text().splitlines()]
    info = json.loads((summary.data_file.parent / "dataset_info.json").read_text())
    assert info["shopcomp_sft"]["file_name"] == summary.data_file.name
    assert info["shopcomp_sft"]["formatting"] == "sharegpt"
    assert info["shopcomp_sft"]["columns"] == {"messages": "conversations", "system": "system", "tools": "tools"}
    roles = set()
    for rec, ex in zip(records, examples):
        conv = rec["conversations"]
        roles |= {c["from"] for c in conv}
        assert [c["from"] in ("human", "observation") for c in conv] == [i % 2 == 0 for i in range(len(conv))]
        assert rec["system"] == ex.messages[0]["content"] and json.loads(rec["tools"]) == ex.tools
        target = render_target(conv[-1])
        want, got = parse_action(ex.messages[-1]["content"]), parse_action(target)
        assert [(c.name, c.arguments) for c in got.tool_calls] == [(c.name, c.arguments) for c in want.tool_calls]
        assert got.answer == want.answer and got.thinking == want.thinking != ""
        assert "café" in target  # thinking content survives verbatim
    assert roles == {"human", "gpt", "function_call", "observation"}
    cfg = yaml.safe_load(summary.train_yaml.read_text())
    assert cfg["cutoff_len"] == 4096 and cfg["lora_rank"] == 64 and cfg["learning_rate"] == 5e-5
    assert cfg["dataset_dir"] == str(summary.data_file.parent) and cfg["template"] == "qwen3"
    merge = yaml.safe_load(summary.merge_yaml.read_text())
    assert merge["adapter_name_or_path"] == cfg["output_dir"]
    st = summary.stats
    assert st["n"] == len(examples) and sum(int(v) for v in st["by_stage"].values()) == st["n"]
    assert sum(st["by_turn"].values()) == st["n"]
    assert st["by_tool"].get("answer", 0) == sum(e.target_kind == "answer" for e in examples)


def test_export_fails_when_a_test_task_leaks(thinking_collect, bench, tmp_path):
    out, _ = thinking_collect
    examples = step_examples(read_kept(out))
    tests = [t for t in bench.tasks if t.split == "test"]
    leak = tests[0]
    bad = examples[0].model_copy(deep=True)
    bad.messages[1]["content"] += "\n\nShopping request: " + leak.instruction
    with pytest.raises(ContaminationError, match=leak.task_id) as e:
        export_dataset(
            examples + [bad], tmp_path / "x", test_tasks=tests, sessions=bench.sessions, train_tasks=bench.tasks
        )
    assert {f.kind for f in e.value.findings} == {"instruction"}
    assert not (tmp_path / "x").exists()  # nothing written
    # a needle session's text in an observation, and a reference product in an assistant call
    values = [p.value.lower() for p in leak.preferences]
    user_turn = next(
        t.content
        for sid in leak.needle_session_ids
        for t in bench.sessions[sid].turns
        if t.role == "user" and any(v in t.content.lower() for v in values)
    )
    bad2 = examples[0].model_copy(deep=True)
    bad2.messages.insert(-1, {"role": "user", "content": "earlier: " + user_turn.upper()})
    with pytest.raises(ContaminationError) as e2:
        export_dataset([bad2], tmp_path / "y", test_tasks=tests, sessions=bench.sessions, train_tasks=bench.tasks)
    assert {f.kind for f in e2.value.findings} == {"needle_session"}
    bad3 = examples[-1].model_copy(deep=True)
    bad3.messages[-1]["content"] = f"<answer>Buy @REC::{leak.reference_product_ids[0]}@</answer>"
    with pytest.raises(ContaminationError) as e3:
        export_dataset([bad3], tmp_path / "z", test_tasks=tests, sessions=bench.sessions, train_tasks=bench.tasks)
    assert {f.kind for f in e3.value.findings} == {"reference_product"}


def test_collect_refuses_test_tasks(bench, product_search, embedder, judge, tmp_path):
    test_task = next(t for t in bench.tasks if t.split == "test")
    from shopping_companion.llm.reference import ReferencePolicy

    with pytest.raises(ConfigError, match="train split only"):
        collect(
            [test_task],
            ReferencePolicy({"navy": "base_colour"}),
            product_search,
            memory_factory(bench.sessions, embedder),
            judge,
            tmp_path,
            progress=False,
        )


def test_cli_collect_with_reference_policy_resumes_and_exports(bench_dir, catalog_index_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "collect"
    args = [
        "collect",
        "--bench",
        str(bench_dir),
        "--out",
        str(out),
        "--backend",
        "reference",
        "--trials",
        "2",
        "--temperature",
        "0.6",
        "--concurrency",
        "2",
        "--index-dir",
        str(catalog_index_dir),
        "--keep",
        "stage",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    n1 = len(read_results(out / "rollouts.jsonl"))
    manifest = json.loads((out / "collect.json").read_text())
    assert manifest["summary"]["new_episodes"] == n1 > 0
    ident = manifest["identity"]
    assert ident["config"]["backend"]["kind"] == "reference" and len(ident["config_sha256"]) == 16
    saved = yaml.safe_load((out / "config.yaml").read_text())  # the resolved config, beside the rollouts
    assert saved["backend"]["sampling"]["temperature"] == 0.6 and saved["trials"] == 2
    assert saved["keep"]["rule"] == "stage" and saved["bench"]["path"] == str(bench_dir.resolve())
    assert ident["config_sha256"] in (out / "config.yaml").read_text()
    r2 = runner.invoke(app, args)  # resume: nothing new to run
    assert r2.exit_code == 0, r2.output
    assert len(read_results(out / "rollouts.jsonl")) == n1
    assert json.loads((out / "collect.json").read_text())["summary"]["new_episodes"] == 0
    r_cfg = runner.invoke(app, ["collect", "--config", str(out / "config.yaml")])  # the written config resumes
    assert r_cfg.exit_code == 0, r_cfg.output
    assert json.loads((out / "collect.json").read_text())["summary"]["new_episodes"] == 0
    r_set = runner.invoke(app, ["collect", "--config", str(out / "config.yaml"), "--set", "env.max_turns=5"])
    assert r_set.exit_code == 2, r_set.output  # a changed config value is another run: refused, named
    assert "different run configuration" in r_set.output and "config_sha256" in r_set.output
    assert "another --out" in r_set.output and len(read_results(out / "rollouts.jsonl")) == n1
    assert yaml.safe_load((out / "config.yaml").read_text()) == saved  # the record of what ran is kept
    kept_before = (out / "kept.jsonl").read_text()
    r_lim = runner.invoke(app, args + ["--limit", "1"])  # a rerun on fewer tasks drops nothing collected
    assert r_lim.exit_code == 0, r_lim.output
    assert (out / "kept.jsonl").read_text() == kept_before and len(read_results(out / "rollouts.jsonl")) == n1
    r3 = runner.invoke(app, args[:-6] + ["--temperature", "0.9", "--index-dir", str(catalog_index_dir)])
    assert r3.exit_code == 2 and "different run configuration" in r3.output  # other sampling refused
    r4 = runner.invoke(app, ["collect", "--bench", str(bench_dir), "--out", str(out), "--split", "test"])
    assert r4.exit_code == 2 and "bench.split" in r4.output and "'train'" in r4.output, r4.output
    r5 = runner.invoke(app, ["stats", "--collect", str(out)])
    assert r5.exit_code == 0, r5.output
    stats = json.loads(r5.stdout)
    kept = read_kept(out)
    if not kept:
        pytest.skip("the reference policy kept no stage on these tasks")
    assert stats["examples"]["n"] == len(step_examples(kept))
    exp = tmp_path / "export"
    r6 = runner.invoke(
        app,
        [
            "export",
            "--collect",
            str(out),
            "--out",
            str(exp),
            "--base-model",
            "/models/x",
            "--set",
            "use_cpu=true",
            "--set",
            "max_steps=4",
        ],
    )
    assert r6.exit_code == 0, r6.output
    cfg = yaml.safe_load((exp / "train_lora.yaml").read_text())
    assert cfg["use_cpu"] is True and cfg["max_steps"] == 4 and cfg["model_name_or_path"] == "/models/x"
    assert json.loads((exp / "export.json").read_text())["examples"] == stats["examples"]["n"]
    r7 = runner.invoke(app, ["export", "--collect", str(out), "--out", str(exp), "--template", "llama3"])
    assert r7.exit_code == 2 and "template" in r7.output


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long error lines


def test_cli_read_only_stats_and_export_input_errors(thinking_collect, bench_dir, catalog_index_dir, tmp_path):
    """Regressions found by adversarial testing: `stats --keep` rewrote kept.jsonl (a later export
    then shipped another rule's data while export.json claimed collect's rule); bad export inputs
    gave tracebacks or half-written exports; a bad --backend printed a second, empty error."""
    runner = CliRunner()
    out, _ = thinking_collect
    before = (out / "kept.jsonl").read_bytes()
    r = runner.invoke(app, ["stats", "--collect", str(out), "--keep", "succ", "--stages", "2"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kept_stages"] != len(before.splitlines())  # another selection was printed ...
    assert (out / "kept.jsonl").read_bytes() == before  # ... and the collect directory is unchanged
    exp = tmp_path / "exp"
    r = runner.invoke(
        app,
        [
            "export",
            "--collect",
            str(out),
            "--bench",
            str(bench_dir),
            "--out",
            str(exp),
            "--keep",
            "succ",
            "--stages",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    assert (out / "kept.jsonl").read_bytes() == before
    assert json.loads((exp / "export.json").read_text())["provenance"]["keep"]["rule"] == "succ"

    base = ["export", "--collect", str(out), "--bench", str(bench_dir)]
    for extra, needle in ((["--set", "template=llama3"], "template"), (["--set", "dataset=other"], "dataset")):
        bad = tmp_path / f"bad-{needle}"
        r = runner.invoke(app, base + ["--out", str(bad)] + extra)
        assert r.exit_code == 2 and needle in _flat(r.output) and not bad.exists(), r.output
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    r = runner.invoke(app, base + ["--out", str(a_file)])
    assert r.exit_code == 2 and "--out" in _flat(r.output) and not isinstance(r.exception, OSError), r.output
    r = runner.invoke(app, ["export", "--collect", str(tmp_path / "nope"), "--out", str(tmp_path / "e")])
    assert r.exit_code == 2 and "no such directory" in _flat(r.output)
    partial = tmp_path / "partial.yaml"
    partial.write_text("lora_rank: 8\n")  # a base YAML without model/template: the arguments fill them in
    args = base + ["--out", str(tmp_path / "p"), "--config", str(partial), "--base-model", "/m/x"]
    r = runner.invoke(app, args)  # ... but not cutoff_len: LLaMA-Factory's 2048 is checked, and may cut too much
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        assert "cutoff_len: 2048" in _flat(r.output) and not (tmp_path / "p").exists(), r.output
        r = runner.invoke(app, args + ["--allow-truncation"])
    assert r.exit_code == 0, r.output
    merge = yaml.safe_load((tmp_path / "p" / "merge_lora.yaml").read_text())
    assert merge["model_name_or_path"] == "/m/x" and merge["template"] == "qwen3"
    # training the embeddings of a model that ties them: a warning naming the keys (not an error)
    from tests.tiny_model import build_tiny_model

    tied = build_tiny_model(tmp_path / "tied", vocab_size=600)
    args = base + ["--out", str(tmp_path / "t"), "--base-model", str(tied), "--set", "additional_target=embed_tokens"]
    r = runner.invoke(app, args + ["--allow-truncation"])
    assert r.exit_code == 0, r.output
    text = _flat(r.output)
    assert "warning: finetuning_type: lora, additional_target: embed_tokens trains embed_tokens" in text, r.output
    assert "tie_word_embeddings: true" in text
    assert json.loads((tmp_path / "t" / "export.json").read_text())["warnings"][0].startswith("finetuning_type: lora")

    r = runner.invoke(
        app,
        [
            "collect",
            "--bench",
            str(bench_dir),
            "--out",
            str(tmp_path / "c"),
            "--backend",
            "bogus",
            "--index-dir",
            str(catalog_index_dir),
        ],
    )
    assert r.exit_code == 2 and "backend.kind" in _flat(r.output) and "'reference'" in r.output, r.output
    assert r.output.count("error:") == 1, r.output


def test_cli_export_drop_flagged_and_cutoff_len_refusal(thinking_collect, bench, bench_dir, tmp_path):
    """A leaked test instruction in one kept trajectory: export fails naming --drop-flagged; with
    it, that trajectory (all its examples) is left out and listed. A cutoff_len that cuts most
    examples is refused (exit 2, naming cutoff_len) unless --allow-truncation."""
    import shutil

    from tests.tiny_model import build_tiny_model

    src, _ = thinking_collect
    out = tmp_path / "collect"
    shutil.copytree(src, out)
    lines = (out / "kept.jsonl").read_text().splitlines()
    leak = next(t for t in bench.tasks if t.split == "test")
    first = json.loads(lines[0])
    user = next(m for m in first["trajectory"]["messages"] if m["role"] == "user")
    user["content"] += "\n\nAlso: " + leak.instruction
    (out / "kept.jsonl").write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    key = f"{first['task_id']}/t{first['trial']}/{first['mode']}:{first['hint']}/s{first['stage']}"
    n_leaky = sum(1 for e in step_examples(read_kept(out)) if e.example_id.startswith(key + "/"))
    runner = CliRunner()
    base = ["export", "--collect", str(out), "--bench", str(bench_dir)]
    r = runner.invoke(app, base + ["--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--drop-flagged" in _flat(r.output) and leak.task_id in r.output, r.output
    assert not (tmp_path / "x").exists()
    exp = tmp_path / "e"
    r = runner.invoke(app, base + ["--out", str(exp), "--drop-flagged"])
    assert r.exit_code == 0, r.output
    flat = _flat(r.output)
    assert f"dropped trajectory {key}" in flat and leak.task_id in flat and "ESTIMATED lengths" in flat
    manifest = json.loads((exp / "export.json").read_text())
    assert [d["trajectory"] for d in manifest["dropped"]] == [key] and manifest["dropped"][0]["examples"] == n_leaky
    assert manifest["examples"] == len(step_examples(read_kept(out))) - n_leaky
    assert manifest["lengths"]["method"] == "estimate"
    tok = build_tiny_model(tmp_path / "tok", vocab_size=600)
    cut = base + ["--drop-flagged", "--tokenizer", str(tok), "--set", "cutoff_len=64"]
    r = runner.invoke(app, cut + ["--out", str(tmp_path / "y")])
    assert r.exit_code == 2 and "cutoff_len" in _flat(r.output) and "--allow-truncation" in _flat(r.output), r.output
    assert not (tmp_path / "y").exists()
    r = runner.invoke(app, cut + ["--out", str(tmp_path / "z"), "--allow-truncation"])
    assert r.exit_code == 0, r.output
    lg = json.loads((tmp_path / "z" / "export.json").read_text())["lengths"]
    assert (
        lg["method"] == "chat_template"
        and lg["over_cutoff"] == lg["n"] > 0
        and "exceed cutoff_len 64" in _flat(r.output)
    )
