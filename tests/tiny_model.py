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
from typing import Any
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
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from shopping_companion.trainers.nano import train_bpe_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_bpe_tokenizer(_corpus(), vocab_size, PROTOCOL)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
        max_position_embeddings=max_positions,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(out)
    return out


# --------------------------------------------------------------------------- tool-calling variant
# A random tiny model never calls tools. ``build_tool_calling_model`` overfits it (plain torch,
# loss on assistant tokens only) on a few two-stage conversations written with OUR prompts and
# tool schemas, so it emits well-formed Hermes ``<tool_call>`` blocks and ``<answer>`` blocks in
# the environment's protocol (STACK.md: ~150 steps, ~2 min on 2 cores). The result is cached on
# disk under ``shopping_companion.paths.cache_dir()`` keyed by a hash of the recipe.

TOOL_RECIPE_VERSION = 2

#: Qwen2.5's layout exactly where it matters for token-level RL: ``<|im_end|>\n`` after every
#: message and ``<|im_start|>assistant\n`` as the generation prompt, so a rendered assistant turn
#: is the generation prompt followed by the generated text. (CHAT_TEMPLATE above drops those
#: newlines through Jinja's whitespace control; SFT tests rely on it as it is.)
TOOL_CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set sys = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}{{ '<|im_start|>system\n' + sys + '\n\n# Tools\n\n<tools>' }}"
    "{%- for tool in tools %}{{ '\n' + (tool | tojson) }}{%- endfor %}{{ '\n</tools><|im_end|>\n' }}"
    "{%- elif sys %}{{ '<|im_start|>system\n' + sys + '<|im_end|>\n' }}{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'tool' %}{{ '<|im_start|>user\n<tool_response>\n' + m.content + '\n</tool_response><|im_end|>\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}"
)

_REQUESTS = [
    ("I need a new shirt for the office.", "shirt", "base_colour", "Navy Blue"),
    ("Could you find me a pair of sports shoes?", "sports shoes", "usage", "Sports"),
    ("Looking for a cotton kurta I would like.", "kurta", "Fabric", "Cotton"),
    ("I want a new watch, something in my style.", "watch", "base_colour", "Black"),
]


def _obs(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False)


def tool_calling_conversations(max_turns: int = 20) -> list[tuple[list[dict], list[dict]]]:
    """``(messages, tools)`` pairs: a stage-1 and a stage-2 conversation per request, each ending
    with an ``<answer>``; tool observations are short hand-written JSON (no real data)."""
    from shopping_companion.envs import prompts
    from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema

    def call(name: str, args: dict) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"

    convs = []
    for k, (req, ptype, attr, val) in enumerate(_REQUESTS):
        sid = f"session-{k}"
        pid = f"myntra_styles:{10003 + k}"
        pref = {"slot": 0, "attribute": attr, "value": val, "polarity": "want"}
        s1 = [
            {"role": "system", "content": prompts.stage1_system(max_turns)},
            {
                "role": "user",
                "content": f"Shopping request: {req}\n\nIdentify my relevant preferences from our past conversations.",
            },
            {
                "role": "assistant",
                "content": "<think>Search my memory first.</think>\n"
                + call("mem_search", {"queries": [req], "top_k": 5}),
            },
            {
                "role": "tool",
                "name": "mem_search",
                "content": _obs(
                    {
                        "results": [
                            {
                                "session_id": sid,
                                "turn": 2,
                                "date": "2024-01-02",
                                "score": 0.61,
                                "text": f"I like {val.lower()} {ptype}s.",
                            }
                        ]
                    }
                ),
            },
            {
                "role": "assistant",
                "content": "<think>Read the session.</think>\n" + call("mem_view", {"session_ids": [sid]}),
            },
            {
                "role": "tool",
                "name": "mem_view",
                "content": _obs(
                    {
                        "sessions": [
                            {
                                "session_id": sid,
                                "turns": [{"role": "user", "content": f"I like {val.lower()} {ptype}s."}],
                            }
                        ]
                    }
                ),
            },
            {
                "role": "assistant",
                "content": "<think>I found the preference.</think>\n<answer>"
                + json.dumps({"preferences": [pref]})
                + "</answer>",
            },
        ]
        s2 = [
            {"role": "system", "content": prompts.stage2_system(max_turns)},
            {
                "role": "user",
                "content": f"Shopping request: {req}\n\nPreferences identified from my past conversations:\n"
                + json.dumps({"preferences": [pref]}),
            },
            {
                "role": "assistant",
                "content": "<think>Search the catalog.</think>\n"
                + call("product_search", {"query": f"{val} {ptype}", "top_k": 5}),
            },
            {
                "role": "tool",
                "name": "product_search",
                "content": _obs({"results": [{"product_id": pid, "title": f"{val} {ptype}", "price": 999}]}),
            },
            {
                "role": "assistant",
                "content": "<think>Check the product.</think>\n" + call("product_view", {"product_ids": [pid]}),
            },
            {
                "role": "tool",
                "name": "product_view",
                "content": _obs(
                    {"products": [{"product_id": pid, "title": f"{val} {ptype}", "attributes": {attr: val}}]}
                ),
            },
            {
                "role": "assistant",
                "content": f"<think>It matches.</think>\n<answer>I recommend @REC::{pid}@ because it is {val.lower()}.</answer>",
            },
        ]
        convs.append((s1, [tool_schema(n) for n in MEMORY_TOOLS]))
        convs.append((s2, [tool_schema(n) for n in PRODUCT_TOOLS]))
    return convs


def _recipe_key(steps: int, seed: int, lr: float) -> str:
    import hashlib
    import inspect

    blob = json.dumps(
        {
            "version": TOOL_RECIPE_VERSION,
            "steps": steps,
            "seed": seed,
            "lr": lr,
            "template": TOOL_CHAT_TEMPLATE,
            "convs": tool_calling_conversations(),
            "corpus": _corpus(),
            "src": inspect.getsource(build_tiny_model) + inspect.getsource(build_tool_calling_model),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_tool_calling_model(
    steps: int = 150, seed: int = 0, lr: float = 3e-3, cache: str | Path | None = None
) -> Path:
    """The tiny model overfit on :func:`tool_calling_conversations`; cached (returns the cached
    directory when the recipe hash matches). ~2 min on 2 CPU cores the first time."""
    import os
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopping_companion.paths import cache_dir

    root = Path(cache) if cache is not None else cache_dir() / "tiny-models"
    out = root / f"tool-calling-{_recipe_key(steps, seed, lr)}"
    if (out / "DONE").is_file():
        return out
    tmp = root / f".tmp-{os.getpid()}-{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    build_tiny_model(tmp, seed=seed)
    tok = AutoTokenizer.from_pretrained(tmp)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    tok.save_pretrained(tmp)
    model = AutoModelForCausalLM.from_pretrained(tmp)
    examples = []
    for msgs, tools in tool_calling_conversations():
        full = tok.apply_chat_template(msgs, tools=tools, tokenize=False)
        ids = tok.encode(full, add_special_tokens=False)
        labels = [-100] * len(ids)
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            a = len(
                tok.encode(
                    tok.apply_chat_template(msgs[:i], tools=tools, tokenize=False, add_generation_prompt=True),
                    add_special_tokens=False,
                )
            )
            b = len(
                tok.encode(
                    tok.apply_chat_template(msgs[: i + 1], tools=tools, tokenize=False), add_special_tokens=False
                )
            )
            labels[a:b] = ids[a:b]
        examples.append((torch.tensor([ids]), torch.tensor([labels])))
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        x, y = examples[step % len(examples)]
        loss = model(input_ids=x, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    model.save_pretrained(tmp)
    (tmp / "DONE").write_text(f"final loss {loss.item():.4f}\n")
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


#: Qwen2 / Qwen2.5 / Qwen3's pre-tokenizer regex (their tokenizer.json: a Split, then ByteLevel
#: without its own regex, after an NFC normalizer)
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_qwen_like_tokenizer(texts: list[str], vocab_size: int = 2000) -> Any:
    """A byte-level BPE laid out as Qwen2/Qwen3's tokenizer (NFC normalizer, Qwen2's Split regex,
    regex-free ByteLevel, Qwen's special and protocol tokens), trained on ``texts`` so that it
    learns merges across the regex's pieces (``}\\n``, ``\\n\\n``, `` {"``); a
    ``PreTrainedTokenizerFast`` with :data:`TOOL_CHAT_TEMPLATE`. No download."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in PROTOCOL + ["<tool_response>", "</tool_response>"]]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=TOOL_CHAT_TEMPLATE,
    )
