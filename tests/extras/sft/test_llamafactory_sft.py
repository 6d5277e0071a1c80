"""LLaMA-Factory end to end on CPU (run in .venv-sft: `.venv-sft/bin/python -m pytest -q tests/extras/sft`).

Real data throughout: a BM25 index over a slice of the real catalog, a benchmark synthesised from
it and real SGD conversations, a teacher with thinking (the scripted policy served by the local
OpenAI-compatible server) collected with rejection sampling, our export. Then LLaMA-Factory's OWN
code: its data pipeline loads and tokenises the export with its templates (labels must cover
exactly the assistant turns; the environment parser must recover every target's tool calls,
answer and thinking from the tokens LLaMA-Factory trains on); `llamafactory-cli train` runs LoRA
SFT for a few steps on a tiny Qwen3 model built here; the adapter is loaded by our
local-transformers backend and runs an evaluation episode; `llamafactory-cli export` merges it and
the merged checkpoint gives the same logits as base + adapter (the two SFT → RL hand-offs).

Without LLaMA-Factory these tests skip, unless SHOPCOMP_REQUIRE_EXTRAS=1 (CI), where they fail.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

try:
    import llamafactory  # noqa: F401

    _LF_ERROR = None
except Exception as e:  # ImportError, or a broken torchvision/torchaudio (docs/sft.md)
    _LF_ERROR = f"{type(e).__name__}: {e}"

if _LF_ERROR is not None:
    if os.environ.get("SHOPCOMP_REQUIRE_EXTRAS") == "1":
        raise RuntimeError(
            f"LLaMA-Factory is required (SHOPCOMP_REQUIRE_EXTRAS=1) but not importable: {_LF_ERROR}; "
            "install it with scripts/install_sft.sh"
        )
    pytest.skip(f"LLaMA-Factory not importable ({_LF_ERROR}); scripts/install_sft.sh", allow_module_level=True)

from shopping_companion.benchmark.evaluate import EvalSettings, run_episode  # noqa: E402
from shopping_companion.benchmark.synth import SynthConfig, synthesize  # noqa: E402
from shopping_companion.catalog.index import open_or_build  # noqa: E402
from shopping_companion.catalog.loader import load_products  # noqa: E402
from shopping_companion.catalog.search import ProductSearch  # noqa: E402
from shopping_companion.envs.env import EnvConfig  # noqa: E402
from shopping_companion.envs.parsing import parse_action  # noqa: E402
from shopping_companion.judges.rule import RuleJudge  # noqa: E402
from shopping_companion.llm.base import Sampling  # noqa: E402
from shopping_companion.llm.local_transformers import LocalTransformersBackend  # noqa: E402
from shopping_companion.llm.openai_backend import OpenAIBackend  # noqa: E402
from shopping_companion.pipeline import memory_factory  # noqa: E402
from shopping_companion.sft.collect import KeepPolicy, collect, read_kept  # noqa: E402
from shopping_companion.sft.examples import step_examples  # noqa: E402
from shopping_companion.sft.export import export_dataset, render_target  # noqa: E402
from tests.extras.sft.lf_support import llamafactory_cli  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402
from tests.tiny_model import build_tiny_model  # noqa: E402

IGNORE = -100
THINK = '<think>\nThe shopper wants a match; check "quotes" and café.\n</think>\n\n'


@pytest.fixture(scope="module")
def small_catalog(catalog_path, tmp_path_factory):
    """The first 3,000 real Myntra products (enough attribute-rich products for synthesis)."""
    d = tmp_path_factory.mktemp("sftcat")
    out = d / "products.jsonl.gz"
    n = 0
    with gzip.open(catalog_path, "rt", encoding="utf-8") as src, gzip.open(out, "wt", encoding="utf-8") as dst:
        for line in src:
            if '"myntra_styles"' in line:
                dst.write(line)
                n += 1
                if n == 3000:
                    break
    products, _ = load_products(out)
    idx = d / "index"
    open_or_build(out, idx)
    return products, ProductSearch(idx)


@pytest.fixture(scope="module")
def bench(small_catalog, sgd_sessions):
    products, search = small_catalog

    def searcher(q, k):
        return [h["product_id"] for h in search.search(q, top_k=k)]

    cfg = SynthConfig(n_tasks=4, seed=7, sessions_per_user=12, test_fraction=0.25, addon_share=0.0)
    return synthesize(products, sgd_sessions, cfg, searcher=searcher)


@pytest.fixture(scope="module")
def judge(small_catalog):
    search = small_catalog[1]
    return RuleJudge(lambda ids: {p: search.get(p) for p in ids if search.get(p) is not None})


@pytest.fixture(scope="module")
def examples(bench, small_catalog, embedder, judge, tmp_path_factory):
    base = policy_script(bench.tasks, think=False)

    def script(body):
        return THINK + base(body)

    train = [t for t in bench.tasks if t.split == "train"]
    with ScriptedOpenAIServer(script) as srv:
        teacher = OpenAIBackend(model=srv.model, base_url=srv.base_url, api_key_env="SHOPCOMP_TEST_NO_KEY")
        settings = EvalSettings(trials=2, sampling=Sampling(temperature=0.7, seed=1), env=EnvConfig(max_turns=5))
        out = tmp_path_factory.mktemp("collect")
        collect(
            train,
            teacher,
            small_catalog[1],
            memory_factory(bench.sessions, embedder),
            judge,
            out,
            settings,
            policy=KeepPolicy(rule="stage"),
            progress=False,
        )
    ex = step_examples(read_kept(out))
    assert ex, "the scripted teacher produced no kept stage"
    return ex


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen3-tiny")


def _export(examples, bench, out: Path, template: str, tiny: Path, **overrides):
    return export_dataset(
        examples,
        out,
        test_tasks=[t for t in bench.tasks if t.split == "test"],
        train_tasks=bench.tasks,
        sessions=bench.sessions,
        template=template,
        base_model=str(tiny),
        overrides=overrides,
    )


def _lf_dataset(summary, tiny: Path, template: str, mask_history: bool, out: Path):
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    args = {
        "model_name_or_path": str(tiny),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "lora",
        "dataset": "shopcomp_sft",
        "dataset_dir": str(summary.data_file.parent),
        "template": template,
        "cutoff_len": 16384,
        "overwrite_cache": True,
        "output_dir": str(out),
        "mask_history": mask_history,
        "preserve_thinking": True,
        "report_to": "none",
        "use_cpu": True,
    }
    model_args, data_args, training_args, _ft, _gen = get_train_args(args)
    tok_module = load_tokenizer(model_args)
    tpl = get_template_and_fix_tokenizer(tok_module["tokenizer"], data_args)
    ds = get_dataset(tpl, model_args, data_args, training_args, stage="sft", **tok_module)["train_dataset"]
    return ds, tok_module["tokenizer"]


def _spans(labels: list[int]) -> list[list[int]]:
    out, cur = [], []
    for t in labels:
        if t == IGNORE:
            if cur:
                out.append(cur)
                cur = []
        else:
            cur.append(t)
    if cur:
        out.append(cur)
    return out


@pytest.mark.parametrize("template", ["qwen", "qwen3"])
@pytest.mark.parametrize("mask_history", [True, False])
def test_llamafactory_loads_our_export_and_labels_cover_exactly_the_assistant_turns(
    examples, bench, tiny, tmp_path, template, mask_history
):
    summary = _export(examples, bench, tmp_path / "exp", template, tiny)
    records = [json.loads(x) for x in summary.data_file.read_text().splitlines()]
    ds, tok = _lf_dataset(summary, tiny, template, mask_history, tmp_path / "out")
    assert len(ds) == len(records) == summary.examples  # LLaMA-Factory dropped nothing
    for row, rec, ex in zip(ds, records, examples):
        assistant = [c for c in rec["conversations"] if c["from"] in ("gpt", "function_call")]
        expected = assistant[-1:] if mask_history else assistant
        spans = _spans(row["labels"])
        assert len(spans) == len(expected)
        # labelled tokens are also the input tokens at the same positions
        assert all(lab in (IGNORE, i) for i, lab in zip(row["input_ids"], row["labels"]))
        for span, turn in zip(spans, expected):
            text = tok.decode(span, skip_special_tokens=False)
            assert text.endswith("<|im_end|>\n")
            body = text[: -len("<|im_end|>\n")]
            assert body == render_target(turn)  # our render == LLaMA-Factory's template
        # what LLaMA-Factory trains on for the target parses to exactly the teacher's action
        target = tok.decode(spans[-1], skip_special_tokens=False)[: -len("<|im_end|>\n")]
        got, want = parse_action(target), parse_action(ex.messages[-1]["content"])
        assert [(c.name, c.arguments) for c in got.tool_calls] == [(c.name, c.arguments) for c in want.tool_calls]
        assert got.answer == want.answer and got.thinking == want.thinking and "café" in got.thinking
        assert not got.errors
        # the prompt carries the stage's system prompt and every tool schema
        prompt = tok.decode(row["input_ids"], skip_special_tokens=False)
        assert rec["system"] in prompt
        for t in json.loads(rec["tools"]):
            assert json.dumps(t, ensure_ascii=False) in prompt


def test_cpu_sft_adapter_runs_an_episode_and_merge_equals_adapter(
    examples, bench, tiny, small_catalog, embedder, judge, tmp_path
):
    import torch

    summary = _export(
        examples,
        bench,
        tmp_path / "exp",
        "qwen",
        tiny,
        use_cpu=True,
        bf16=False,
        max_steps=4,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        cutoff_len=8192,  # the longest example is ~5,050 tokens: the export refuses a cutoff that cuts many
        lora_rank=8,
        lora_alpha=16,
        logging_steps=1,
        save_steps=1000,
        plot_loss=False,
        preprocessing_num_workers=1,
        dataloader_num_workers=0,
        warmup_ratio=0.0,
    )
    # train, then merge (hand-off 2 below), in one interpreter: LLaMA-Factory's imports paid once
    wall, _logs = llamafactory_cli(
        ["train", str(summary.train_yaml)], ["export", str(summary.merge_yaml)], cwd=tmp_path
    )
    lora = summary.out_dir / "lora"
    assert (lora / "adapter_config.json").is_file() and (lora / "adapter_model.safetensors").is_file()
    cfg = json.loads((lora / "adapter_config.json").read_text())
    assert sorted(cfg["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"] and cfg["r"] == 8
    state = json.loads((lora / "trainer_state.json").read_text())
    assert state["global_step"] == 4

    # hand-off 1: the adapter path, loaded by our local-transformers backend, runs an episode
    policy = LocalTransformersBackend(tiny, adapter_path=lora, merge_adapter=False)
    base = LocalTransformersBackend(tiny)
    assert policy.name.endswith("+lora:lora")
    task = next(t for t in bench.tasks if t.split == "train")
    settings = EvalSettings(sampling=Sampling(temperature=0.0, max_tokens=24), env=EnvConfig(max_turns=1))
    res = run_episode(task, policy, small_catalog[1], memory_factory(bench.sessions, embedder)(task), judge, settings)
    assert res.error is None and [s.trajectory.stage for s in res.stages] == [1, 2]
    assert all(s.trajectory.steps[0].completion_tokens for s in res.stages)

    # hand-off 2: the merge of llamafactory-cli export (run above); merged == base + adapter
    merged = LocalTransformersBackend(summary.out_dir / "merged")
    ids = base.tokenizer(
        "<|im_start|>user\nfind a navy shirt<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
        return_tensors="pt",
    )["input_ids"]
    with torch.inference_mode():
        l_adapter = policy.model(input_ids=ids).logits
        l_merged = merged.model(input_ids=ids).logits
        l_base = base.model(input_ids=ids).logits
    assert torch.allclose(l_adapter, l_merged, atol=1e-4)
    assert not torch.allclose(l_adapter, l_base, atol=1e-4)  # training changed the model
    print(f"\nSFT smoke: train and merge {wall:.1f}s, {summary.examples} examples")
