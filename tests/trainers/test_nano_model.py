"""The nano model (trainers/nano.py): its chat template renders what LLaMA-Factory's ``qwen``
template renders (the full check against LLaMA-Factory itself runs in the pipeline and the
extras), stage prompts are single tokens, and decoding round-trips."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from shopping_companion.envs.tools import MEMORY_TOOLS, tool_schema  # noqa: E402
from shopping_companion.trainers.nano import NanoModelConfig, build_nano_model, stage_phrases, tools_section  # noqa: E402


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoTokenizer

    texts = ["Shopping request: I need socks.", '<tool_call>{"name": "mem_search"}</tool_call>', "brown stripes"] * 30
    cfg = NanoModelConfig(vocab_size=500, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    path = build_nano_model(tmp_path_factory.mktemp("nano"), texts, cfg, phrases=stage_phrases(6))
    return AutoTokenizer.from_pretrained(path)


def test_chat_template_is_llamafactory_qwen_rendering(tok) -> None:
    tools = [tool_schema(n) for n in MEMORY_TOOLS]
    call = '<tool_call>\n{"name": "mem_search", "arguments": {"queries": ["socks"], "top_k": 2}}\n</tool_call>'
    msgs = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Shopping request: socks"},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": '{"results": []}'},
        {"role": "tool", "content": '{"more": 1}'},
        {"role": "assistant", "content": "<answer>{}</answer>"},
    ]
    # LLaMA-Factory 0.9.5 `qwen`: format_system(system + QWEN_TOOL_PROMPT), format_user, format_function,
    # format_observation (consecutive tool results joined into one), format_assistant
    lf_tools = "".join(
        "\n" + json.dumps({"type": "function", "function": t["function"]}, ensure_ascii=False) for t in tools
    )
    expected = (
        "<|im_start|>system\nSYS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
        + lf_tools
        + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
        'XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nShopping request: socks<|im_end|>\n<|im_start|>assistant\n"
        + call
        + '<|im_end|>\n<|im_start|>user\n<tool_response>\n{"results": []}\n</tool_response>\n<tool_response>\n'
        '{"more": 1}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<answer>{}</answer><|im_end|>\n'
    )
    assert tok.apply_chat_template(msgs, tools=tools, tokenize=False) == expected
    gen = tok.apply_chat_template(msgs[:2], tools=tools, tokenize=False, add_generation_prompt=True)
    assert gen.endswith("<|im_start|>assistant\n") and expected.startswith(gen)
    assert tools_section(tools) in expected


def test_stage_prompt_is_one_token_and_text_round_trips(tok) -> None:
    from shopping_companion.envs import prompts

    system = stage_phrases(6)[0]
    ids = tok.encode(system, add_special_tokens=False)
    assert len(ids) == 1
    other = prompts.stage1_system(7)  # another turn limit: plain BPE, same text back
    assert len(tok.encode(other, add_special_tokens=False)) > 100
    text = '<tool_call>{"name": "mem_view"}</tool_call> café'
    assert tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=True) == text
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="must divide"):
        NanoModelConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="head_dim"):
        NanoModelConfig(head_dim=16)
    with pytest.raises(ValueError, match="at least one"):
        build_nano_model("/nonexistent-never-created", [""])
