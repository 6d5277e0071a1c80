"""``export_dataset``: token lengths under the target model's tokenizer (the tiny test tokenizer, a
local directory), the refusal when ``cutoff_len`` would cut too many examples, the labelled
estimate when no tokenizer is local, and ``drop_flagged``."""

from __future__ import annotations

import json

import pytest
import yaml

from shopping_companion.envs.tools import MEMORY_TOOLS, tool_schema
from shopping_companion.errors import ConfigError, ContaminationError
from shopping_companion.sft.export import chat_messages, export_dataset, to_sharegpt
from shopping_companion.sft.examples import StepExample
from shopping_companion.types import Preference, ProductSlot, SessionRef, Task
from tests.tiny_model import build_tiny_model

TOOLS = [tool_schema(n) for n in MEMORY_TOOLS]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), vocab_size=600)


def _task(tid: str, split: str, instruction: str) -> Task:
    return Task(
        task_id=tid,
        split=split,
        instruction=instruction,
        user_id="u",
        history=[SessionRef(session_id="n-" + tid, date="2024-01-01")],
        needle_session_ids=["n-" + tid],
        preferences=[Preference(attribute="colour", value="navy")],
        slots=[ProductSlot(product_type="shirt", reference_product_id="shop:" + tid)],
    )


TEST = _task("T", "test", "Please find me a linen summer shirt for the beach trip next month")
TRAIN = _task("R", "train", "I want a pair of running shoes for my marathon in the spring")


def _examples(task_id: str, trial: int, n_obs: list[int], leak: str = "") -> list[StepExample]:
    """One stage-1 trajectory: turn k's context holds observations of ``n_obs[:k]`` sessions each."""
    key = f"{task_id}/t{trial}/two_stage:none/s1"
    msgs = [
        {"role": "system", "content": "You are a shopping assistant with memory tools."},
        {"role": "user", "content": f"Shopping request: {TRAIN.instruction}{leak}"},
    ]
    out = []
    for k, n in enumerate(n_obs + [0]):
        final = k == len(n_obs)
        call = {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": "mem_search", "arguments": '{"queries": ["x"]}'},
        }
        target = (
            {"role": "assistant", "content": '<think>\ndone\n</think>\n\n<answer>{"preferences": []}</answer>'}
            if final
            else {"role": "assistant", "content": "<think>\nlook\n</think>\n\n", "tool_calls": [call]}
        )
        out.append(
            StepExample(
                example_id=f"{key}/turn{k}",
                task_id=task_id,
                trial=trial,
                stage=1,
                mode="two_stage",
                turn=k,
                n_turns=len(n_obs) + 1,
                target_kind="answer" if final else "tool_call",
                target_tools=[] if final else ["mem_search"],
                tools=TOOLS,
                messages=msgs + [target],
            )
        )
        if not final:
            obs = {
                "results": [
                    {"session_id": f"s{j}", "text": "I usually wear navy cotton shirts. " * 4} for j in range(n)
                ]
            }
            msgs = msgs + [target, {"role": "tool", "content": json.dumps(obs)}]
    return out


def _export(examples, out, **kw):
    return export_dataset(examples, out, test_tasks=[TEST], train_tasks=[TRAIN], **kw)


def test_lengths_are_the_chat_template_token_counts_and_land_in_export_json(tok_dir, tmp_path):
    from transformers import AutoTokenizer

    examples = _examples("R", 0, [1, 3, 6])
    tok = AutoTokenizer.from_pretrained(tok_dir)
    want = []
    for ex in examples:
        rec = to_sharegpt(ex)
        text = tok.apply_chat_template(chat_messages(rec), tools=json.loads(rec["tools"]), tokenize=False)
        assert "<tool_call>" in text or "<answer>" in text  # targets rendered as the model writes them
        want.append(len(tok(text, add_special_tokens=False)["input_ids"]))
    assert want == sorted(want) and want[0] < want[-1]
    s = _export(examples, tmp_path / "e", tokenizer=str(tok_dir), overrides={"cutoff_len": str(want[-1])})
    lg = s.lengths
    assert lg["method"] == "chat_template" and lg["tokenizer"] == str(tok_dir) and lg["n"] == 4
    assert (lg["min"], lg["max"], lg["over_cutoff"], lg["cutoff_len"]) == (want[0], want[-1], 0, want[-1])
    assert lg["min"] <= lg["median"] <= lg["p90"] <= lg["p99"] <= lg["max"]
    manifest = json.loads((tmp_path / "e" / "export.json").read_text())
    assert manifest["lengths"] == lg and manifest["dropped"] == []
    # the model of the training YAML is the default tokenizer
    s2 = _export(examples, tmp_path / "e2", base_model=str(tok_dir), overrides={"cutoff_len": "100000"})
    assert s2.lengths["method"] == "chat_template" and s2.lengths["max"] == want[-1]


def test_refuses_a_cutoff_len_that_cuts_too_many_unless_allowed(tok_dir, tmp_path):
    examples = _examples("R", 0, [1, 3, 6])
    s = _export(examples, tmp_path / "probe", tokenizer=str(tok_dir))
    cutoff = s.lengths["max"] - 1  # cuts exactly the longest of 4 examples: 25%
    with pytest.raises(ConfigError, match="cutoff_len") as e:
        _export(examples, tmp_path / "x", tokenizer=str(tok_dir), overrides={"cutoff_len": cutoff})
    msg = str(e.value)
    assert (
        "1 of 4" in msg
        and "--max-truncated-share" in msg
        and "--allow-truncation" in msg
        and "--set cutoff_len=" in msg
    )
    assert not (tmp_path / "x").exists()  # nothing written
    ok = _export(
        examples, tmp_path / "y", tokenizer=str(tok_dir), overrides={"cutoff_len": cutoff}, max_truncated_share=0.25
    )
    assert ok.lengths["over_cutoff"] == 1 and ok.lengths["over_cutoff_share"] == 0.25
    forced = _export(
        examples, tmp_path / "z", tokenizer=str(tok_dir), overrides={"cutoff_len": 8}, allow_truncation=True
    )
    assert forced.lengths["over_cutoff"] == 4 and yaml.safe_load(forced.train_yaml.read_text())["cutoff_len"] == 8
    with pytest.raises(ConfigError, match="max_truncated_share"):
        _export(examples, tmp_path / "w", tokenizer=str(tok_dir), max_truncated_share=1.5)
    with pytest.raises(ConfigError, match="cutoff_len: must be a positive integer"):
        _export(examples, tmp_path / "w", tokenizer=str(tok_dir), overrides={"cutoff_len": "lots"})


def test_no_local_tokenizer_gives_a_labelled_estimate_and_an_explicit_bad_one_fails(tmp_path):
    examples = _examples("R", 0, [2])
    s = _export(examples, tmp_path / "e", base_model=str(tmp_path / "no-such-model"))
    assert s.lengths["method"] == "estimate" and "ESTIMATE" in s.lengths["note"] and "--tokenizer" in s.lengths["note"]
    assert s.lengths["min"] > 0
    with pytest.raises(ConfigError, match="--tokenizer"):
        _export(examples, tmp_path / "f", tokenizer=str(tmp_path / "nope"))
    assert not (tmp_path / "f").exists()
    # a base YAML without cutoff_len: LLaMA-Factory's default applies, and the report says so
    s3 = _export(examples, tmp_path / "g", base_config={"lora_rank": 8}, base_model=str(tmp_path / "m"))
    assert s3.lengths["cutoff_len"] == 2048 and "default 2048" in s3.lengths["note"]


def test_drop_flagged_drops_whole_trajectories_and_lists_them(tmp_path):
    clean = _examples("R", 0, [1, 2])
    leaky = _examples("R", 1, [1, 2], leak="\n\nAlso: " + TEST.instruction)
    with pytest.raises(ContaminationError, match="instruction"):
        _export(clean + leaky, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    s = _export(clean + leaky, tmp_path / "e", drop_flagged=True)
    assert s.examples == len(clean)
    assert [d["trajectory"] for d in s.dropped] == ["R/t1/two_stage:none/s1"]
    d = s.dropped[0]
    assert (d["task_id"], d["trial"], d["stage"], d["examples"]) == ("R", 1, 1, len(leaky))
    assert d["kinds"] == {"instruction": len(leaky)} and d["test_tasks"] == ["T"] and "instruction of T" in d["first"]
    assert s.decontamination["dropped_trajectories"] == 1 and s.decontamination["dropped_examples"] == len(leaky)
    ids = [json.loads(x)["id"] for x in s.data_file.read_text().splitlines()]
    assert ids == [e.example_id for e in clean]
    with pytest.raises(ConfigError, match="no example"):
        _export(leaky, tmp_path / "only-leaks", drop_flagged=True)
