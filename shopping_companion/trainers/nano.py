"""A small causal LM built from a config, with a tokenizer trained here on local text: the policy of
the CPU pipeline (docs/pipeline.md) and of tests. Nothing is downloaded.

:func:`build_nano_model` writes a Hugging Face checkpoint directory: a byte-level BPE tokenizer
trained with ``tokenizers`` on the texts it is given, a chat template (:data:`CHAT_TEMPLATE`) and a
``Qwen3ForCausalLM`` with seeded random weights sized by :class:`NanoModelConfig`.

The chat template renders exactly what LLaMA-Factory's ``qwen`` template renders for SFT (system
prompt, the ``# Tools`` section with one JSON schema a line, user turns, consecutive tool results in
one ``<tool_response>`` user turn, assistant turns as ``content<|im_end|>\\n``) and
``<|im_start|>assistant\\n`` as the generation prompt, so a rendered assistant turn is the
generation prompt followed by the generated text: SFT, GRPO rollouts (token in, token out) and
evaluation see the same token sequences. Assistant turns are rendered from ``content`` only: in
this project's protocol the tool calls are written in the content as Hermes ``<tool_call>`` blocks.

Tokens: ``<|endoftext|>`` (padding), ``<|im_start|>``, ``<|im_end|>`` (end of turn, EOS) are special;
the protocol tags (``<tool_call>``, ``<answer>``, ``<think>``, ``<tool_response>`` and their closing
tags) are added NON-special tokens, so they survive ``decode(skip_special_tokens=True)``.
``phrases`` (e.g. the stages' fixed system prompts with their tools section) become single
non-special added tokens: a small model then spends its context and capacity on the task, not on
reading the same instructions every turn. A text that differs from a phrase (another turn limit, a
changed prompt) is simply tokenized by BPE, so phrases never change what the model is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CHAT_TEMPLATE",
    "NanoModelConfig",
    "PROTOCOL_TOKENS",
    "SPECIAL_TOKENS",
    "build_nano_model",
    "stage_phrases",
    "tools_section",
    "train_bpe_tokenizer",
]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PROTOCOL_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<tool_response>",
    "</tool_response>",
)

#: LLaMA-Factory 0.9.5's ``qwen`` tool prompt (``QWEN_TOOL_PROMPT``), which is Qwen2.5's own.
_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)

CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}{%- set sys = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set sys = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}{{ '<|im_start|>system\\n' + sys + " + json.dumps(_TOOLS_HEAD) + " }}"
    "{%- for tool in tools %}{{ '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{ " + json.dumps(_TOOLS_TAIL + "<|im_end|>\n") + " }}"
    "{%- elif sys %}{{ '<|im_start|>system\\n' + sys + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tools_section(tools: Sequence[dict[str, Any]]) -> str:
    """The ``# Tools`` text :data:`CHAT_TEMPLATE` appends to the system prompt for ``tools``
    (OpenAI function schemas), one compact-separator JSON object a line as Jinja's ``tojson`` of
    transformers writes it (``ensure_ascii=False``, keys in order)."""
    lines = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return _TOOLS_HEAD + lines + _TOOLS_TAIL


def stage_phrases(max_turns: int) -> list[str]:
    """The fixed system blocks of the two stages of a ``two_stage`` episode with ``max_turns``
    turns, as the chat template renders them (system prompt + tools section): good ``phrases``."""
    from shopping_companion.envs import prompts
    from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema

    return [
        prompts.stage1_system(max_turns) + tools_section([tool_schema(n) for n in MEMORY_TOOLS]),
        prompts.stage2_system(max_turns) + tools_section([tool_schema(n) for n in PRODUCT_TOOLS]),
    ]


class NanoModelConfig(BaseModel):
    """Size of the nano model and its tokenizer.

    ``vocab_size``: BPE vocabulary trained on the corpus (special, protocol and phrase tokens come
    on top), 300..65,536. ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads`` (divides the heads), ``head_dim`` (>= 32:
    vLLM's CPU attention refuses less), ``max_position_embeddings`` (the context, tokens):
    ``Qwen3Config`` fields. ``tie_word_embeddings``: output layer shares the input embeddings.
    ``seed``: weight initialisation. ``min_frequency``: BPE merges seen fewer times are not made.
    """

    model_config = ConfigDict(extra="forbid")
    vocab_size: int = Field(default=4096, ge=300, le=65_536)
    hidden_size: int = Field(default=128, ge=16)
    intermediate_size: int = Field(default=384, ge=16)
    num_hidden_layers: int = Field(default=3, ge=1)
    num_attention_heads: int = Field(default=4, ge=1)
    num_key_value_heads: int = Field(default=2, ge=1)
    head_dim: int = Field(default=32, ge=32)
    max_position_embeddings: int = Field(default=4096, ge=128)
    tie_word_embeddings: bool = True
    seed: int = 0
    min_frequency: int = Field(default=2, ge=1)

    @model_validator(mode="after")
    def _heads(self) -> NanoModelConfig:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads ({self.num_key_value_heads}) must divide num_attention_heads "
                f"({self.num_attention_heads})"
            )
        return self


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, added: Sequence[str] = (), *, min_frequency: int = 0
) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` with :data:`SPECIAL_TOKENS`
    as special tokens and ``added`` as non-special added tokens (matched before BPE, kept by
    ``decode(skip_special_tokens=True)``)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    return tok


def build_nano_model(
    out_dir: str | Path, texts: Iterable[str], config: NanoModelConfig | None = None, phrases: Sequence[str] = ()
) -> Path:
    """Train the tokenizer on ``texts``, build the model, save both (and the chat template) into
    ``out_dir``; return it. ``phrases`` become single added tokens (module docstring).

    Raises ``ValueError`` when ``texts`` is empty."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    cfg = config or NanoModelConfig()
    corpus = [t for t in texts if t]
    if not corpus:
        raise ValueError("texts: the tokenizer needs at least one non-empty text to train on")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = list(PROTOCOL_TOKENS) + [p for p in dict.fromkeys(phrases) if p]
    tok = train_bpe_tokenizer(corpus, cfg.vocab_size, extra, min_frequency=cfg.min_frequency)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=cfg.max_position_embeddings,
    )
    fast.save_pretrained(out)
    torch.manual_seed(cfg.seed)
    model_cfg = Qwen3Config(
        vocab_size=len(fast),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        tie_word_embeddings=cfg.tie_word_embeddings,
        max_position_embeddings=cfg.max_position_embeddings,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )
    Qwen3ForCausalLM(model_cfg).save_pretrained(out)
    return out
