"""Build a tiny Qwen3-style causal LM with a locally trained tokenizer (no download), for tests.

Recipe from STACK.md ("Tiny models for tests"): a byte-level BPE tokenizer (vocab ~3k) trained
with ``tokenizers`` on our own prompt text; ``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``
are special tokens, ``<tool_call>``, ``</tool_call>``, ``<think>``, ``</think>`` are added
NON-special tokens (they survive ``decode(skip_special_tokens=True)``); a Qwen2.5-style chat
template that renders tools; ``Qwen3Config(hidden_size=64, intermediate_size=128,
num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32)`` with random
weights (seeded). About 1.5 MB on disk; built in ~1 s.
"""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set sys = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}<|im_start|>system\n{{ sys }}\n\n# Tools\n\n<tools>\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}</tools><|im_end|>\n"
    "{%- elif sys %}<|im_start|>system\n{{ sys }}<|im_end|>\n{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- if m.tool_calls %}{%- for tc in m.tool_calls %}\n<tool_call>\n"
    "{{ {'name': tc.function.name, 'arguments': tc.function.arguments} | tojson }}\n</tool_call>"
    "{%- endfor %}{%- endif %}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PROTOCOL = ["<tool_call>", "</tool_call>", "<think>", "</think>"]


def _corpus() -> list[str]:
    from shopping_companion.envs import prompts
    from shopping_companion.envs.tools import ARG_MODELS, tool_schema

    texts = [prompts.STAGE1_SYSTEM, prompts.STAGE2_SYSTEM]
    texts += [json.dumps(tool_schema(n)) for n in ARG_MODELS]
    texts += [
        '{"name": "mem_search", "arguments": {"queries": ["favourite colour"], "top_k": 5}}',
        '{"name": "product_view", "arguments": {"product_ids": ["myntra_styles:10003"]}}',
        '<answer>{"preferences": [{"attribute": "colour", "value": "navy", "polarity": "want", "slot": 0}]}</answer>',
        "I usually wear navy cotton shirts and I avoid polyester. My size is M.",
        "The user prefers leather shoes, black or brown, slim fit, under 50 dollars.",
        "0123456789 results sessions session_id turns role content product_id title price shop_id brand",
    ]
    return texts * 20


def build_tiny_model(out_dir: str | Path, seed: int = 0, vocab_size: int = 3000, max_positions: int = 32768) -> Path:
    """Write a tiny Qwen3 checkpoint + tokenizer + chat template into ``out_dir``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer)
    from tokenizers import AddedToken

    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PROTOCOL])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
        max_position_embeddings=max_positions, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(out)
    return out
