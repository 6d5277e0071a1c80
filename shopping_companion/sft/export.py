"""LLaMA-Factory export: ShareGPT-with-tools data, ``dataset_info.json`` and LoRA configs
(Shopping Companion §6.1, App. D).

Data format (LLaMA-Factory ``formatting: sharegpt``), one JSON object per line::

    {"conversations": [{"from": "human", "value": ...}, {"from": "function_call", "value": ...},
                       {"from": "observation", "value": ...}, ..., {"from": "gpt", "value": ...}],
     "system": "<the stage's system prompt>",
     "tools": "<JSON list of the stage's OpenAI function schemas>",
     "id": "<example id>"}

Roles: user → ``human``; an assistant turn that called tools → ``function_call`` whose value is
``<think>\\n…\\n</think>\\n\\n`` (when the turn had thinking) followed by the JSON list of
``{"name", "arguments"}`` objects; any other assistant turn (the ``<answer>`` turn) → ``gpt``
with its text (thinking normalised to the same ``<think>\\n…\\n</think>\\n\\n`` prefix; a reasoning model's
separate reasoning, ``reasoning_content``, is that thinking: LLaMA-Factory's format has no
reasoning field, its ``qwen3`` template reads the ``<think>`` block); the
tool responses of one turn → ONE ``observation`` (LLaMA-Factory needs strict alternation), joined
as Qwen's template joins consecutive tool messages (``…\\n</tool_response>\\n<tool_response>\\n…``).
Each example ends with its target assistant turn; with ``mask_history: true`` (the default in
the YAML) LLaMA-Factory puts loss on that last turn only: one step-level example, one target.

Round trip. For the Hermes/Qwen tool format (templates in :data:`SUPPORTED_TEMPLATES`)
LLaMA-Factory renders a ``function_call`` value as the thinking prefix followed by
``<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>`` blocks joined by newlines, and a
``gpt`` value verbatim. :func:`render_target` writes that text and :func:`export_dataset`
checks, for every example, that :func:`~shopping_companion.envs.parsing.parse_action` recovers from
it exactly the teacher's tool calls, answer and thinking; an example that does not round-trip is
left out and counted. (The extras tests check :func:`render_target` against LLaMA-Factory's own
template code.)

Lengths. LLaMA-Factory cuts an example longer than ``cutoff_len`` tokens silently, so the export
measures every record (:func:`token_lengths`: the target model's tokenizer and chat template on
:func:`chat_messages` with the record's tools — close to, not exactly, LLaMA-Factory's own
template rendering; a labelled character estimate when no tokenizer is local), reports the
distribution (:func:`length_report`) and refuses a config that would cut more than
``max_truncated_share`` of the examples.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from shopping_companion.envs.parsing import parse_action
from shopping_companion.errors import ConfigError
from shopping_companion.errors import ContaminationError
from shopping_companion.llm.model_files import looks_like_path, model_config
from shopping_companion.runs import file_sha256, write_lines_atomic
from shopping_companion.sft.decontam import Contamination, ProductsRule, decontamination_report, find_contamination
from shopping_companion.sft.examples import StepExample, example_stats, with_reasoning
from shopping_companion.types import Session, Task

__all__ = [
    "SUPPORTED_TEMPLATES",
    "DEFAULT_BASE_MODEL",
    "DATASET_INFO_COLUMNS",
    "to_sharegpt",
    "render_target",
    "round_trip_ok",
    "paper_train_config",
    "merge_config",
    "dataset_info",
    "ExportSummary",
    "export_dataset",
    "drop_flagged_trajectories",
    "chat_messages",
    "render_chatml",
    "load_tokenizer",
    "token_lengths",
    "length_report",
    "LLAMAFACTORY_DEFAULT_CUTOFF",
    "CHARS_PER_TOKEN",
    "DEFAULT_MAX_TRUNCATED_SHARE",
    "EMBEDDING_MODULES",
    "model_config",
    "tied_embeddings_report",
]

#: LLaMA-Factory templates whose tool format is Qwen/Hermes ``<tool_call>`` blocks, i.e. what our
#: environment parses. ``qwen3``: Qwen3 thinking models (the paper's Qwen3-4B-Thinking-2507);
#: ``qwen3_nothink``: Qwen3 instruct (no reasoning template); ``qwen``: Qwen2.5-style chat.
SUPPORTED_TEMPLATES = ("qwen3", "qwen3_nothink", "qwen")
DEFAULT_BASE_MODEL = "Qwen/Qwen3-4B-Thinking-2507"
DEFAULT_DATASET = "shopcomp_sft"
TOOL_RESPONSE_JOIN = "\n</tool_response>\n<tool_response>\n"
DATASET_INFO_COLUMNS = {"messages": "conversations", "system": "system", "tools": "tools"}
_THINK_SPAN = re.compile(r"<think>.*?</think>", re.DOTALL)


def _split_thinking(text: str) -> tuple[str, str]:
    """(thinking, rest): the environment parser's thinking, and the text outside thinking."""
    thinking = parse_action(text).thinking
    rest = _THINK_SPAN.sub("", text)
    if "</think>" in rest:  # Qwen3 form: <think> was in the prompt, only </think> in the text
        rest = rest.split("</think>", 1)[1]
    return thinking, rest.strip()


def _think_prefix(thinking: str) -> str:
    return f"<think>\n{thinking}\n</think>\n\n" if thinking else ""


def _assistant_turn(m: dict[str, Any]) -> dict[str, str]:
    # separate reasoning (``reasoning_content``) is the turn's thinking (sft.examples.with_reasoning)
    thinking, rest = _split_thinking(with_reasoning(str(m.get("content") or ""), m.get("reasoning_content")))
    calls = m.get("tool_calls") or []
    if calls:
        objs = [
            {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"] or "{}")} for c in calls
        ]
        return {"from": "function_call", "value": _think_prefix(thinking) + json.dumps(objs, ensure_ascii=False)}
    return {"from": "gpt", "value": _think_prefix(thinking) + rest}


def to_sharegpt(example: StepExample) -> dict[str, Any]:
    """One :class:`StepExample` → one LLaMA-Factory ShareGPT record (module docstring).

    Raises ``ValueError`` when the messages cannot alternate as LLaMA-Factory requires (no
    system prompt first, two assistant turns in a row, or not ending with the target turn).
    """
    msgs = example.messages
    if not msgs or msgs[0]["role"] != "system":
        raise ValueError(f"{example.example_id}: messages must start with the system prompt")
    conv: list[dict[str, str]] = []
    for m in msgs[1:]:
        role = m["role"]
        if role == "tool":
            if conv and conv[-1]["from"] == "observation":
                conv[-1]["value"] += TOOL_RESPONSE_JOIN + str(m.get("content") or "")
            else:
                conv.append({"from": "observation", "value": str(m.get("content") or "")})
        elif role == "user":
            conv.append({"from": "human", "value": str(m.get("content") or "")})
        elif role == "assistant":
            conv.append(_assistant_turn(m))
        else:
            raise ValueError(f"{example.example_id}: unexpected role {role!r} after the system prompt")
    for k, turn in enumerate(conv):
        prompt_side = turn["from"] in ("human", "observation")
        if prompt_side != (k % 2 == 0):
            raise ValueError(f"{example.example_id}: turn {k} ({turn['from']}) breaks human/assistant alternation")
    if not conv or conv[-1]["from"] not in ("gpt", "function_call"):
        raise ValueError(f"{example.example_id}: must end with the target assistant turn")
    return {
        "conversations": conv,
        "system": msgs[0]["content"],
        "tools": json.dumps(example.tools, ensure_ascii=False),
        "id": example.example_id,
    }


def render_target(turn: dict[str, str]) -> str:
    """The assistant text LLaMA-Factory's Qwen templates train on for a ``gpt`` or
    ``function_call`` turn (before the ``<|im_end|>`` stop token). Raises ``ValueError`` for
    another role or a ``function_call`` value that is not thinking + JSON."""
    if turn["from"] == "gpt":
        return turn["value"]
    if turn["from"] != "function_call":
        raise ValueError(f"from: must be gpt or function_call, got {turn['from']!r}")
    value = turn["value"]
    m = re.search(r"<think>\n(.*?)\n</think>\n\n", value, re.DOTALL)
    prefix = m.group(0) if m else ""
    calls = json.loads(value.replace(prefix, "") if prefix else value)
    calls = calls if isinstance(calls, list) else [calls]
    blocks = [json.dumps({"name": c["name"], "arguments": c["arguments"]}, ensure_ascii=False) for c in calls]
    return prefix + "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)


def _calls_of(m: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (c["function"]["name"], json.dumps(json.loads(c["function"]["arguments"] or "{}"), sort_keys=True))
        for c in m.get("tool_calls") or []
    ]


def round_trip_ok(example: StepExample, record: dict[str, Any]) -> str | None:
    """None when the environment parser recovers the target's tool calls, answer and thinking
    from :func:`render_target` of the record's last turn; otherwise the reason."""
    target = example.messages[-1]
    orig = parse_action(str(target.get("content") or ""))
    try:
        text = render_target(record["conversations"][-1])
    except (ValueError, KeyError, TypeError) as e:
        return f"unrenderable target: {e}"
    got = parse_action(text)
    want_calls = _calls_of(target)
    got_calls = [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in got.tool_calls]
    if got.has_answer:
        if orig.answer != got.answer:
            return "answer changed"
    elif want_calls != got_calls:
        return "tool calls changed"
    if got.errors:
        return "rendered target has format errors: " + "; ".join(got.errors[:2])
    if orig.thinking.strip() != got.thinking.strip():
        return "thinking changed"
    return None


# --------------------------------------------------------------------------- configs


def paper_train_config(
    *,
    base_model: str = DEFAULT_BASE_MODEL,
    dataset: str = DEFAULT_DATASET,
    dataset_dir: str = "data",
    template: str = "qwen3",
    output_dir: str = "saves/shopcomp-sft-lora",
) -> dict[str, Any]:
    """The LLaMA-Factory LoRA SFT config with the paper's settings (App. D): LoRA rank 64 on
    q_proj, k_proj, v_proj, o_proj; 3 epochs; cosine schedule; peak lr 5e-5; bf16; per-device
    batch 4 (gradient accumulation 1, so "effective batch size 4 per device").
    Settings the paper does not state are LLaMA-Factory's usual choices, marked in
    ``configs/sft/qwen3_4b_thinking_lora.yaml``. Raises :class:`ConfigError` for an unsupported
    ``template``."""
    if template not in SUPPORTED_TEMPLATES:
        raise ConfigError(
            f"template: must be one of {', '.join(SUPPORTED_TEMPLATES)} "
            f"(Hermes <tool_call> format, what the environment parses); got {template!r}"
        )
    return {
        # model
        "model_name_or_path": base_model,
        "trust_remote_code": True,
        # method
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "lora",
        "lora_rank": 64,
        "lora_alpha": 128,
        "lora_dropout": 0.0,
        "lora_target": "q_proj,k_proj,v_proj,o_proj",
        # dataset
        "dataset": dataset,
        "dataset_dir": dataset_dir,
        "template": template,
        "enable_thinking": True,
        "preserve_thinking": True,
        "mask_history": True,
        "cutoff_len": 32768,
        "overwrite_cache": True,
        "preprocessing_num_workers": 16,
        "dataloader_num_workers": 4,
        # output
        "output_dir": output_dir,
        "logging_steps": 10,
        "save_steps": 500,
        "plot_loss": True,
        "overwrite_output_dir": True,
        "save_only_model": False,
        "report_to": "none",
        # train
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5.0e-5,
        "num_train_epochs": 3.0,
        "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.1,
        "bf16": True,
        "ddp_timeout": 180000000,
    }


def merge_config(*, base_model: str, adapter_dir: str, export_dir: str, template: str = "qwen3") -> dict[str, Any]:
    """``llamafactory-cli export`` config that merges a LoRA adapter into the base weights
    (the SFT → RL hand-off by merging; docs/sft.md)."""
    if template not in SUPPORTED_TEMPLATES:
        raise ConfigError(f"template: must be one of {', '.join(SUPPORTED_TEMPLATES)}; got {template!r}")
    return {
        "model_name_or_path": base_model,
        "adapter_name_or_path": adapter_dir,
        "template": template,
        "finetuning_type": "lora",
        "trust_remote_code": True,
        "export_dir": export_dir,
        "export_size": 5,
        "export_device": "cpu",
        "export_legacy_format": False,
    }


def dataset_info(dataset: str, file_name: str) -> dict[str, Any]:
    """``dataset_info.json`` entry for the ShareGPT-with-tools file (default role tags)."""
    return {
        dataset: {
            "file_name": file_name,
            "formatting": "sharegpt",
            "columns": dict(DATASET_INFO_COLUMNS),
            "tags": {
                "role_tag": "from",
                "content_tag": "value",
                "user_tag": "human",
                "assistant_tag": "gpt",
                "observation_tag": "observation",
                "function_tag": "function_call",
                "system_tag": "system",
            },
        }
    }


def _parse_override(value: Any) -> Any:
    return yaml.safe_load(value) if isinstance(value, str) else value


def _write_yaml(path: Path, cfg: dict[str, Any], header: str) -> None:
    path.write_text(header + yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")


# --------------------------------------------------------------------------- token lengths

#: LLaMA-Factory's ``cutoff_len`` when the training YAML does not set it.
LLAMAFACTORY_DEFAULT_CUTOFF = 2048
#: Characters per token of the estimate used when no tokenizer can be loaded (Qwen's BPE on our
#: English, JSON-heavy chats: about 3-4; the lower end, so the estimate errs towards too long).
CHARS_PER_TOKEN = 3.0
#: Default of ``max_truncated_share``: refuse a config that cuts more than 5% of the examples.
DEFAULT_MAX_TRUNCATED_SHARE = 0.05


def chat_messages(record: Mapping[str, Any]) -> list[dict[str, str]]:
    """A ShareGPT record as the chat its training sequence is: ``system``, then ``human`` → user,
    ``observation`` → tool (one message: the turn's responses are joined already), ``gpt`` and
    ``function_call`` → assistant with :func:`render_target`'s text (tool calls as Hermes blocks)."""
    roles = {"human": "user", "observation": "tool", "gpt": "assistant", "function_call": "assistant"}
    out = [{"role": "system", "content": str(record.get("system") or "")}]
    for turn in record["conversations"]:
        text = render_target(turn) if turn["from"] in ("gpt", "function_call") else turn["value"]
        out.append({"role": roles[turn["from"]], "content": text})
    return out


def render_chatml(record: Mapping[str, Any]) -> str:
    """The record in Qwen's ChatML layout (tools in the system prompt, tool responses in
    ``<tool_response>`` blocks of a user turn): the text the estimate counts."""
    msgs = chat_messages(record)
    tools = json.loads(record.get("tools") or "[]")
    system = msgs[0]["content"]
    if tools:
        system += "\n\n# Tools\n\n<tools>\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        system += "\n</tools>"
    parts = [f"<|im_start|>system\n{system}<|im_end|>"]
    for m in msgs[1:]:
        if m["role"] == "tool":
            parts.append(f"<|im_start|>user\n<tool_response>\n{m['content']}\n</tool_response><|im_end|>")
        else:
            parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>")
    return "\n".join(parts) + "\n"


#: Files of which a tokenizer directory holds at least one (fast and slow tokenizers).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def load_tokenizer(name_or_path: str) -> Any:
    """``transformers.AutoTokenizer`` of a local directory or a hub id already in the local cache
    (never downloads: ``local_files_only``). A name that is a path (starts with ``/``, ``./``,
    ``../`` or ``~``, has more than one ``/``, or exists) must be a directory holding tokenizer
    files. Raises :class:`ConfigError` naming the path when it cannot be loaded (transformers
    missing, not a directory, no tokenizer files in it, not cached)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:  # pragma: no cover - transformers is a core dependency
        raise ConfigError(f"tokenizer {name_or_path!r}: transformers is not installed ({e})") from None
    name = str(name_or_path)
    p = Path(name).expanduser()
    if looks_like_path(name) and not p.is_dir():
        raise ConfigError(
            f"tokenizer {name!r}: not a directory"
            + (" (it is a file)" if p.exists() else " (no such path)")
            + "; give a local directory with tokenizer files (--tokenizer PATH)"
        )
    if p.is_dir() and not any((p / f).is_file() for f in _TOKENIZER_FILES):
        raise ConfigError(
            f"tokenizer {name!r}: no tokenizer files (tokenizer.json, tokenizer_config.json) in {p}; give a local "
            "directory with tokenizer files (--tokenizer PATH)"
        )
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError, HF errors, ...
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"tokenizer {name_or_path!r}: cannot be loaded offline ({first}); give a local directory "
            "with tokenizer files (--tokenizer PATH)"
        ) from None


# --------------------------------------------------------------------------- tied embeddings

#: module names of a causal LM's input embeddings and output head (Llama/Qwen/Mistral
#: ``embed_tokens`` / ``lm_head``; GPT-2 ``wte``; GPT-NeoX ``embed_in`` / ``embed_out``; BLOOM
#: ``word_embeddings``; InternLM ``tok_embeddings``): what a tie couples
EMBEDDING_MODULES = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_in", "embed_out", "tok_embeddings")
_HEAD_MODULES = ("lm_head", "embed_out")


def _names(value: Any) -> list[str]:
    """A LLaMA-Factory module list (a comma-separated string, as it splits it, or a list)."""
    if value is None or value is False:
        return []
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
    return [str(x).strip() for x in items if str(x).strip()]


def _embedding_names(names: list[str]) -> list[str]:
    """The names among ``names`` that denote an embedding or output-head module (PEFT matches a
    module name by its last component)."""
    return [n for n in names if n.split(".")[-1] in EMBEDDING_MODULES]


def tied_embeddings_report(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What the LLaMA-Factory training config ``cfg`` does to the embeddings of its model when the
    model ties them (``tie_word_embeddings: true`` in the ``config.json`` of ``model_name_or_path``,
    a local directory or the local Hugging Face cache; its ``text_config`` for a composite model).

    As LLaMA-Factory 0.9.5 (with PEFT 0.18 and transformers 5.6) behaves, measured on a tied tiny
    Qwen3 (``tests/extras/sft``):

    - ``finetuning_type: lora`` / ``oft`` with ``additional_target`` naming ``embed_tokens`` or
      ``lm_head`` (or ``resize_vocab: true`` without ``additional_target``: LLaMA-Factory then adds
      both itself): they become PEFT ``modules_to_save`` without ``ensure_weight_tying``, so each
      named module gets its own trained copy and the other keeps the original matrix. The merged
      model stores ``embed_tokens`` and ``lm_head`` as two different matrices while its config still
      says ``tie_word_embeddings: true``: transformers loads them untied with a warning that the
      ties were broken; a runtime that follows the config (vLLM ties ``lm_head`` to
      ``embed_tokens``) runs another model than the one trained. A warning.
    - ``lora_target`` naming ``embed_tokens`` or ``lm_head``: the merge adds the adapter's delta
      into the one matrix both share, so the merged model's input embeddings (or output head)
      change too and the merged model is not base + adapter. A warning.
    - ``finetuning_type: freeze`` with ``freeze_extra_modules`` naming ``lm_head``: LLaMA-Factory
      refuses to start (the tied head is the same parameter as ``embed_tokens``, so it is not
      among the modules it offers). A warning.
    - ``finetuning_type: full``, or ``freeze`` with ``freeze_extra_modules`` naming
      ``embed_tokens``: the one shared matrix is trained for both roles and stays tied (the
      checkpoint stores it once). A note.

    Returns ``{model, config, tie_word_embeddings, warnings, notes, findings}``:
    ``tie_word_embeddings`` is True/False, or None when the config could not be read or does not
    say (then a config that trains embeddings gets a note saying the tie could not be checked);
    each finding is ``{severity, keys, message}`` with the training-config keys it is about."""
    model = str(cfg.get("model_name_or_path", DEFAULT_BASE_MODEL))
    data, where = model_config(model)
    tied: bool | None = None
    if data is not None:
        for d in (data, data.get("text_config")):
            if isinstance(d, dict) and isinstance(d.get("tie_word_embeddings"), bool):
                tied = d["tie_word_embeddings"]
                break
    ft = str(cfg.get("finetuning_type") or "lora")  # LLaMA-Factory's default
    trains: list[tuple[str, dict[str, Any], list[str]]] = []  # (kind, keys, embedding modules)
    if ft in ("lora", "oft"):
        extra = _embedding_names(_names(cfg.get("additional_target")))
        if extra:
            trains.append(
                ("modules_to_save", {"finetuning_type": ft, "additional_target": cfg["additional_target"]}, extra)
            )
        elif cfg.get("resize_vocab") is True and not _names(cfg.get("additional_target")):
            trains.append(
                ("modules_to_save", {"finetuning_type": ft, "resize_vocab": True}, ["embed_tokens", "lm_head"])
            )
        target = _embedding_names(_names(cfg.get("lora_target" if ft == "lora" else "oft_target")))
        if target:
            key = "lora_target" if ft == "lora" else "oft_target"
            trains.append(("adapter", {"finetuning_type": ft, key: cfg[key]}, target))
    elif ft == "full":
        trains.append(("shared", {"finetuning_type": "full"}, ["embed_tokens", "lm_head"]))
    elif ft == "freeze":
        extra = _embedding_names(_names(cfg.get("freeze_extra_modules")))
        if extra:
            kind = "refused" if any(n.split(".")[-1] in _HEAD_MODULES for n in extra) else "shared"
            trains.append(
                (kind, {"finetuning_type": "freeze", "freeze_extra_modules": cfg["freeze_extra_modules"]}, extra)
            )
    out: dict[str, Any] = {
        "model": model,
        "config": where if data is not None else None,
        "tie_word_embeddings": tied,
        "findings": [],
        "warnings": [],
        "notes": [],
    }
    if not trains or tied is False:
        return out
    src = f"tie_word_embeddings: true in {where}"
    for kind, keys, mods in trains:
        named = ", ".join(f"{k}: {v}" for k, v in keys.items())
        if tied is None and kind == "shared":
            continue  # trained as one matrix if tied, plainly if not: nothing to say
        if tied is None:
            why = (
                where if data is None else f"{where} does not set tie_word_embeddings (the model class default applies)"
            )
            severity, msg = (
                "note",
                (
                    f"{named} trains {', '.join(mods)}; whether {model} ties its embeddings could not be checked ({why}). "
                    "If it does, read docs/sft.md ('Tied embeddings') before merging"
                ),
            )
        elif kind == "modules_to_save":
            how = (
                "LLaMA-Factory adds the embedding and output modules to additional_target itself, so it "
                if "resize_vocab" in keys
                else "LLaMA-Factory 0.9.5 "
            )
            severity, msg = (
                "warning",
                (
                    f"{named} trains {', '.join(mods)} of {model}, whose embeddings are tied ({src}). {how}passes them "
                    "to PEFT as modules_to_save without ensure_weight_tying: each gets its own trained copy (the other of "
                    "the pair keeps the original matrix), so the adapter and the merged model (merge_lora.yaml) hold "
                    "embed_tokens and lm_head as two different matrices while config.json still says "
                    "tie_word_embeddings: true. transformers loads the merged model untied with a warning that the ties "
                    "were broken; runtimes that follow the config (vLLM ties lm_head to embed_tokens) run another model "
                    "than the one trained. Drop them from the training config, or set tie_word_embeddings: false in the "
                    "merged model's config.json"
                ),
            )
        elif kind == "adapter":
            severity, msg = (
                "warning",
                (
                    f"{named} puts LoRA on {', '.join(mods)} of {model}, whose embeddings are tied ({src}): embed_tokens "
                    "and lm_head are one matrix, so the merge (merge_lora.yaml) adds the adapter's delta to both roles "
                    "and the merged model is not base + adapter. Leave them out of the target modules"
                ),
            )
        elif kind == "refused":
            severity, msg = (
                "warning",
                (
                    f"{named} names the output head of {model}, whose embeddings are tied ({src}): LLaMA-Factory 0.9.5 "
                    "refuses to start (Module lm_head is not found, please choose from embed_tokens, ...) because the "
                    "tied head is the same parameter as embed_tokens. Name embed_tokens, which trains both"
                ),
            )
        else:
            severity, msg = (
                "note",
                (
                    f"{named} trains the matrix embed_tokens and lm_head of {model} share ({src}): both roles change "
                    "together and the tie is kept (the checkpoint stores the matrix once)"
                ),
            )
        out["findings"].append({"severity": severity, "keys": keys, "modules": mods, "message": msg})
        out["warnings" if severity == "warning" else "notes"].append(msg)
    return out


def _percentile(xs: list[int], q: float) -> int:
    """Nearest-rank percentile of sorted ``xs`` (q in [0, 100])."""
    k = max(0, min(len(xs) - 1, int(-(-q * len(xs) // 100)) - 1))
    return xs[k]


def token_lengths(records: list[dict[str, Any]], tokenizer: Any | None, *, batch: int = 64) -> tuple[list[int], str]:
    """Length in tokens of each record's whole training sequence (prompt and target), and how it
    was measured. With a ``tokenizer`` that has a chat template: the template applied to
    :func:`chat_messages` with the record's tools (``method`` "chat_template"); with one without:
    :func:`render_chatml` tokenised ("chatml"); with none: ``ceil(len(render_chatml) /
    CHARS_PER_TOKEN)`` ("estimate")."""
    if tokenizer is None:
        return [int(-(-len(render_chatml(r)) // CHARS_PER_TOKEN)) for r in records], "estimate"
    texts, method = [], "chat_template" if getattr(tokenizer, "chat_template", None) else "chatml"
    for r in records:
        if method == "chat_template":
            texts.append(
                tokenizer.apply_chat_template(
                    chat_messages(r), tools=json.loads(r.get("tools") or "[]"), tokenize=False
                )
            )
        else:
            texts.append(render_chatml(r))
    out: list[int] = []
    for i in range(0, len(texts), batch):
        enc = tokenizer(texts[i : i + batch], add_special_tokens=False)["input_ids"]
        out += [len(x) for x in enc]
    return out, method


def length_report(
    lengths: list[int], cutoff_len: int, *, method: str, tokenizer: str, note: str = ""
) -> dict[str, Any]:
    """The distribution of example lengths (tokens): ``min``, ``median``, ``p90``, ``p99``,
    ``max``; ``over_cutoff`` (examples longer than ``cutoff_len``, which LLaMA-Factory cuts) and
    ``over_cutoff_share`` in [0, 1]; ``method`` and ``tokenizer`` say how lengths were measured."""
    xs = sorted(lengths)
    over = sum(x > cutoff_len for x in xs)
    dist = {k: _percentile(xs, q) for k, q in (("min", 0), ("median", 50), ("p90", 90), ("p99", 99), ("max", 100))}
    return {
        "method": method,
        "tokenizer": tokenizer,
        "note": note,
        "n": len(xs),
        **(dist if xs else dict.fromkeys(dist)),
        "cutoff_len": cutoff_len,
        "over_cutoff": over,
        "over_cutoff_share": round(over / len(xs), 4) if xs else 0.0,
    }


# --------------------------------------------------------------------------- export


@dataclass
class ExportSummary:
    """What :func:`export_dataset` wrote. ``examples``: records written; ``skipped``: examples
    left out, by reason; ``stats``: :func:`~shopping_companion.sft.examples.example_stats` of the
    written examples; ``decontamination``: the check's report; ``wall_s``: export time (s);
    ``lengths``: :func:`length_report` of the written examples; ``dropped``: the trajectories left
    out by ``drop_flagged`` (:func:`drop_flagged_trajectories`); ``tied_embeddings``:
    :func:`tied_embeddings_report` of ``train_lora.yaml``; ``warnings``: its warnings."""

    out_dir: Path
    data_file: Path
    train_yaml: Path
    merge_yaml: Path
    examples: int
    skipped: dict[str, int]
    stats: dict[str, Any]
    decontamination: dict[str, Any]
    sha256: str
    wall_s: float
    lengths: dict[str, Any] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    #: :func:`tied_embeddings_report` of the written training config
    tied_embeddings: dict[str, Any] = field(default_factory=dict)
    #: warnings about the written configs (printed by the CLI; also in ``tied_embeddings``)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for k in ("out_dir", "data_file", "train_yaml", "merge_yaml"):
            d[k] = str(d[k])
        return d


def _round_up(n: int, step: int = 1024) -> int:
    return int(-(-n // step) * step)


def _measure(records: list[dict[str, Any]], cfg: Mapping[str, Any], tokenizer: str | Path | None) -> dict[str, Any]:
    """:func:`length_report` of ``records`` against ``cfg``'s ``cutoff_len`` (export_dataset)."""
    raw = cfg.get("cutoff_len", LLAMAFACTORY_DEFAULT_CUTOFF)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ConfigError(f"cutoff_len: must be a positive integer (tokens); got {raw!r}")
    name = str(tokenizer if tokenizer is not None else cfg.get("model_name_or_path", DEFAULT_BASE_MODEL))
    note = "" if "cutoff_len" in cfg else f"cutoff_len not set: LLaMA-Factory's default {LLAMAFACTORY_DEFAULT_CUTOFF}"
    try:
        tok = load_tokenizer(name)
    except ConfigError as e:
        if tokenizer is not None:
            raise
        tok = None
        note = (note + "; " if note else "") + (
            f"ESTIMATE: {str(e).split('; give a local', 1)[0]}; lengths are rendered characters / {CHARS_PER_TOKEN}, "
            "not tokens "
            "(give --tokenizer PATH for exact counts)"
        )
    lengths, method = token_lengths(records, tok)
    return length_report(lengths, raw, method=method, tokenizer=name, note=note)


def _trajectory_of(example_id: str) -> str:
    return example_id.rsplit("/turn", 1)[0]


def drop_flagged_trajectories(
    examples: list[StepExample], violations: list[Contamination]
) -> tuple[list[StepExample], list[dict[str, Any]]]:
    """Leave out every example of each kept stage trajectory that has a violation (all its step
    examples: they share the context that leaked). Returns the remaining examples and one record
    per dropped trajectory: ``trajectory`` (``task_id/t<trial>/<mode>:<hint>/s<stage>``),
    ``task_id``, ``trial``, ``stage``, ``mode``, ``examples`` (how many were dropped),
    ``findings`` (count), ``kinds`` ({kind: count}), ``test_tasks`` and ``first`` (one finding's
    example id and detail)."""
    flagged: dict[str, list[Contamination]] = {}
    for v in violations:
        flagged.setdefault(_trajectory_of(v.example_id), []).append(v)
    keep, dropped_n = [], Counter()
    meta: dict[str, StepExample] = {}
    for ex in examples:
        key = _trajectory_of(ex.example_id)
        if key in flagged:
            dropped_n[key] += 1
            meta.setdefault(key, ex)
        else:
            keep.append(ex)
    dropped = []
    for key, found in flagged.items():
        ex = meta.get(key)
        dropped.append(
            {
                "trajectory": key,
                "task_id": ex.task_id if ex else found[0].example_id.split("/", 1)[0],
                "trial": ex.trial if ex else None,
                "stage": ex.stage if ex else None,
                "mode": ex.mode if ex else None,
                "examples": dropped_n[key],
                "findings": len(found),
                "kinds": dict(Counter(f.kind for f in found)),
                "test_tasks": sorted({f.test_task_id for f in found}),
                "first": f"{found[0].example_id}: {found[0].kind} of {found[0].test_task_id} ({found[0].detail})",
            }
        )
    return keep, dropped


def _decontaminate(
    examples: list[StepExample],
    test_tasks: Iterable[Task],
    train_tasks: Iterable[Task],
    sessions: Mapping[str, Session] | None,
    products: ProductsRule,
    drop_flagged: bool,
) -> tuple[list[StepExample], list[dict[str, Any]], dict[str, Any]]:
    """``(examples kept, trajectories dropped, decontamination report)``. Raises
    ContaminationError on a test task in the data unless ``drop_flagged`` (:func:`export_dataset`)."""
    tests = [t for t in test_tasks if t.split == "test"]
    violations, exposures, shared = find_contamination(
        examples, tests, sessions, products=products, train_tasks=list(train_tasks)
    )
    dropped: list[dict[str, Any]] = []
    if violations and not drop_flagged:
        raise ContaminationError(violations)
    if violations:
        examples, dropped = drop_flagged_trajectories(examples, violations)
        left = {e.example_id for e in examples}
        exposures = [e for e in exposures if e.example_id in left]
    report = decontamination_report(tests, len(examples), products, exposures, shared)
    report["dropped_trajectories"] = len(dropped)
    report["dropped_examples"] = sum(d["examples"] for d in dropped)
    report["dropped_findings"] = len(violations)
    return examples, dropped, report


def _sharegpt_records(examples: list[StepExample]) -> tuple[list[dict[str, Any]], list[StepExample], Counter[str]]:
    """``(ShareGPT records, their examples, skipped counts by reason)``: an example that does not
    alternate or does not read back the same is skipped. Raises ConfigError when none is left."""
    records, kept, skipped = [], [], Counter()
    for ex in examples:
        try:
            rec = to_sharegpt(ex)
        except ValueError:
            skipped["bad_alternation"] += 1
            continue
        reason = round_trip_ok(ex, rec)
        if reason is not None:
            skipped["no_round_trip: " + reason.split(":")[0]] += 1
            continue
        records.append(rec)
        kept.append(ex)
    if not records:
        raise ConfigError(
            f"no example to export ({sum(skipped.values())} skipped: {dict(skipped)}); "
            "collect more successful trajectories first"
        )
    return records, kept, skipped


def _write_data(data_dir: Path, dataset: str, records: list[dict[str, Any]]) -> tuple[Path, str]:
    """Write ``<dataset>.jsonl`` (atomically) and ``dataset_info.json`` into ``data_dir``; returns
    the data file and its SHA-256."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data_file = data_dir / f"{dataset}.jsonl"
    write_lines_atomic(data_file, (json.dumps(rec, ensure_ascii=False) for rec in records))
    (data_dir / "dataset_info.json").write_text(
        json.dumps(dataset_info(dataset, data_file.name), indent=2), encoding="utf-8"
    )
    return data_file, file_sha256(data_file)


def export_dataset(
    examples: Iterable[StepExample],
    out_dir: str | Path,
    *,
    test_tasks: Iterable[Task],
    train_tasks: Iterable[Task] = (),
    sessions: Mapping[str, Session] | None = None,
    template: str = "qwen3",
    base_model: str = DEFAULT_BASE_MODEL,
    dataset: str = DEFAULT_DATASET,
    products: ProductsRule = "assistant",
    overrides: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    base_config: Mapping[str, Any] | None = None,
    drop_flagged: bool = False,
    tokenizer: str | Path | None = None,
    max_truncated_share: float = DEFAULT_MAX_TRUNCATED_SHARE,
    allow_truncation: bool = False,
) -> ExportSummary:
    """Write LLaMA-Factory data and configs for ``examples`` into ``out_dir``.

    Files: ``data/<dataset>.jsonl`` (ShareGPT with tools), ``data/dataset_info.json``,
    ``train_lora.yaml`` (:func:`paper_train_config` with ``dataset_dir`` pointing at ``data/``,
    or ``base_config`` when given (e.g. a YAML of ``configs/sft/``; its ``template`` and
    ``model_name_or_path`` win over the arguments), then ``overrides`` — any LLaMA-Factory key, e.g. ``cutoff_len`` or ``use_cpu``),
    ``merge_lora.yaml`` (:func:`merge_config` for the trained adapter) and ``export.json``
    (counts, stats, decontamination report, provenance, sha256 of the data file).

    Decontamination runs first (:func:`~shopping_companion.sft.decontam.find_contamination`
    against ``test_tasks``; texts owned by ``train_tasks`` are not findings): it raises
    :class:`~shopping_companion.sft.decontam.ContaminationError` and nothing is written when a
    test task appears — unless ``drop_flagged``: then every trajectory with a violation is left
    out (:func:`drop_flagged_trajectories`, listed in ``summary.dropped``) and the rest written.

    Lengths: each record's training sequence is measured in tokens (:func:`token_lengths`) with
    the tokenizer ``tokenizer`` (default: the config's ``model_name_or_path``; a local directory or
    a hub id in the local cache). When the default cannot be loaded offline, lengths are a
    clearly labelled estimate (``lengths.method == "estimate"``); an explicit ``tokenizer`` that
    cannot be loaded raises :class:`ConfigError`. When more than ``max_truncated_share`` (in
    [0, 1]) of the examples are longer than the config's ``cutoff_len`` (LLaMA-Factory's default
    2048 when unset), :class:`ConfigError` is raised and nothing written, unless
    ``allow_truncation``.

    Raises :class:`ConfigError` for an unsupported template, an empty dataset name, a bad
    ``cutoff_len`` or ``max_truncated_share``, or no example left to write.

    Tied embeddings: when ``train_lora.yaml`` trains the embeddings or the output head of a model
    whose ``config.json`` (local, or in the local Hugging Face cache) has
    ``tie_word_embeddings: true``, :func:`tied_embeddings_report` says what LLaMA-Factory does with
    them; its warnings are in ``summary.warnings`` and ``export.json`` (``tied_embeddings``,
    ``warnings``). Never an error.
    """
    t0 = time.perf_counter()
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", dataset or ""):
        raise ConfigError(f"dataset: letters, digits, '_', '.', '-' only; got {dataset!r}")
    if base_config is not None:
        template = str(base_config.get("template", template))
        base_model = str(base_config.get("model_name_or_path", base_model))
    cfg = paper_train_config(base_model=base_model, dataset=dataset, template=template)  # validates template
    if base_config is not None:  # keys it lacks come from the arguments (a partial YAML is fine)
        cfg = {"model_name_or_path": base_model, "template": template, **dict(base_config), "dataset": dataset}
    parsed = {k: _parse_override(v) for k, v in (overrides or {}).items()}
    if "dataset" in parsed and parsed["dataset"] != dataset:
        raise ConfigError(f"overrides: dataset is set by the export (--dataset), got dataset={parsed['dataset']!r}")
    final_template = parsed.get("template", cfg.get("template", template))
    if final_template not in SUPPORTED_TEMPLATES:
        raise ConfigError(
            f"template: must be one of {', '.join(SUPPORTED_TEMPLATES)} (Hermes <tool_call> format, "
            f"what the environment parses); got {final_template!r}"
        )
    if not 0.0 <= float(max_truncated_share) <= 1.0:
        raise ConfigError(f"max_truncated_share (--max-truncated-share): must be in [0, 1]; got {max_truncated_share}")
    examples = list(examples)
    examples, dropped, report = _decontaminate(examples, test_tasks, train_tasks, sessions, products, drop_flagged)
    records, kept, skipped = _sharegpt_records(examples)
    out = Path(out_dir).resolve()
    data_dir = out / "data"
    final = {**cfg, **parsed}
    lengths = _measure(records, final, tokenizer)
    over, share = lengths["over_cutoff"], lengths["over_cutoff_share"]
    if share > max_truncated_share and not allow_truncation:
        p99, mx = lengths["p99"], lengths["max"]
        raise ConfigError(
            f"cutoff_len: {lengths['cutoff_len']} would cut {over} of {len(records)} examples ({share:.1%}, more than "
            f"--max-truncated-share {max_truncated_share:.1%}); lengths by {lengths['method']} ({lengths['tokenizer']}): "
            f"p99 {p99}, max {mx} tokens. Raise it (--set cutoff_len={_round_up(mx)}), or pass --allow-truncation "
            "to write the config anyway (nothing was written)"
        )
    data_file, sha256 = _write_data(data_dir, dataset, records)
    cfg["dataset_dir"] = str(data_dir)
    cfg["output_dir"] = str(out / "lora")
    cfg.update(parsed)
    train_yaml = out / "train_lora.yaml"
    _write_yaml(
        train_yaml,
        cfg,
        "# LLaMA-Factory LoRA SFT (Shopping Companion §6.1, App. D); "
        "written by `shopcomp sft export`.\n# Run: scripts/run_sft.sh "
        f"{train_yaml}\n",
    )
    merge_yaml = out / "merge_lora.yaml"
    _write_yaml(
        merge_yaml,
        merge_config(
            base_model=str(cfg["model_name_or_path"]),
            adapter_dir=str(cfg["output_dir"]),
            export_dir=str(out / "merged"),
            template=str(cfg["template"]),
        ),
        f"# Merge the trained adapter into the base weights: llamafactory-cli export {out / 'merge_lora.yaml'}\n",
    )
    stats = example_stats(kept)
    tied = tied_embeddings_report(cfg)
    summary = ExportSummary(
        out_dir=out,
        data_file=data_file,
        train_yaml=train_yaml,
        merge_yaml=merge_yaml,
        examples=len(records),
        skipped=dict(skipped),
        stats=stats,
        decontamination=report,
        sha256=sha256,
        wall_s=0.0,
        lengths=lengths,
        dropped=dropped,
        tied_embeddings=tied,
        warnings=list(tied["warnings"]),
    )
    summary.wall_s = round(time.perf_counter() - t0, 3)
    manifest = {
        **summary.to_dict(),
        "template": cfg["template"],
        "base_model": cfg["model_name_or_path"],
        "dataset": dataset,
        "provenance": dict(provenance or {}),
    }
    (out / "export.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str), encoding="utf-8")
    return summary
