"""A local Hugging Face checkpoint as a :class:`~shopping_companion.llm.base.ChatBackend` (docs/architecture.md, backends).

:class:`LocalTransformersBackend` loads a causal LM and its tokenizer with ``transformers`` (CPU or
GPU), optionally with a LoRA adapter through ``peft``, and produces one assistant turn per
:meth:`~LocalTransformersBackend.chat` call:

1. **Prompt.** The tokenizer's own chat template renders ``messages`` with ``tools`` (OpenAI
   function schemas, passed as ``tools=``) and ``add_generation_prompt=True``; extra template
   variables (e.g. ``{"enable_thinking": False}`` for Qwen3) come from ``chat_template_kwargs``.
   Structured assistant ``tool_calls`` whose ``arguments`` are JSON strings are decoded to
   objects first (Hugging Face templates expect objects).
2. **Generation.** ``Sampling.temperature == 0`` is greedy; otherwise sampling with
   ``temperature``, ``top_p`` and ``top_k``. New tokens are capped by ``Sampling.max_tokens`` and by
   the model's context (``max_position_embeddings``); a prompt that leaves no room raises
   :class:`~shopping_companion.llm.base.BackendError` (recorded by the runner, never scored),
   like a server's "context too long" 400. Generation stops at the tokenizer's EOS token or
   ``<|im_end|>`` when the vocabulary has it. With ``Sampling.seed`` set, the request samples from
   its own random stream seeded with ``seed + len(messages)``, so the same request gives the same
   answer whatever ran before or beside it.
3. **Output.** ``content`` is the completion decoded with ``skip_special_tokens=True`` (the
   protocol tags ``<think>``/``<tool_call>`` must be *non-special* added tokens so they survive);
   when the rendered prompt ends with an opened ``<think>`` (Qwen3 thinking templates) and the
   completion closes it without opening it, ``"<think>\\n"`` is prepended so the environment
   sees a well-formed block. ``prompt_tokens`` / ``completion_tokens`` are exact token counts
   (completion up to and including the stop token), ``finish_reason`` is ``"stop"`` or
   ``"length"``, ``latency_s`` the wall time of generation.

Concurrent ``chat`` calls (an evaluation with ``concurrency`` > 1) are generated together as one
padded batch of up to ``batch_size`` requests (:mod:`shopping_companion.llm.batch_generate`): a
small model on a CPU generates a batch of 16 turns in little more time than one. For a large
model's throughput, serve the checkpoint with vLLM (``scripts/serve_vllm.sh``) instead.
:attr:`~LocalTransformersBackend.weights_sha256` is the content hash of the loaded weights
(:func:`~shopping_companion.llm.weights.weights_sha256`), which evaluations record.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from shopping_companion.errors import ConfigError
from shopping_companion.llm.batch_generate import GenRequest, ThreadBatcher, generate_batch
from shopping_companion.llm.base import AssistantMessage, BackendError, Messages, Sampling, ToolSchemas

__all__ = ["LocalTransformersBackend", "checkpoint_label", "checkpoint_step", "default_policy_name"]

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_TRAINER_STEP = re.compile(r"^checkpoint-(\d+)$")  # TRL / Hugging Face Trainer: <output_dir>/checkpoint-<N>
_VERL_STEP = re.compile(r"^global_step_(\d+)$")  # verl: <experiment>/global_step_<N>/actor[/huggingface]


def _step_dir(p: Path) -> Path | None:
    """The directory of ``p`` that names the training step (``checkpoint-<N>`` or
    ``global_step_<N>``): ``p`` itself, or for verl's layout its ``global_step_<N>`` above
    ``actor`` or ``actor/huggingface``; None for any other directory."""
    if _TRAINER_STEP.match(p.name) or _VERL_STEP.match(p.name):
        return p
    if p.name == "actor" and _VERL_STEP.match(p.parent.name):
        return p.parent
    if p.name == "huggingface" and p.parent.name == "actor" and _VERL_STEP.match(p.parent.parent.name):
        return p.parent.parent
    return None


def _absolute(path: str | Path) -> Path:
    """``path`` with ``~`` expanded, made absolute against the working directory and normalised
    (``..`` and a trailing ``/`` dropped), without resolving symlinks."""
    return Path(os.path.abspath(Path(path).expanduser()))


def checkpoint_label(path: str | Path) -> str:
    """A checkpoint directory named so that it tells the run and the step apart: for a TRL / Hugging
    Face Trainer ``<run>/checkpoint-<N>`` the label is ``<run>/checkpoint-<N>``; for verl's
    ``<experiment>/global_step_<N>/actor`` (or ``.../actor/huggingface``, or the step directory
    itself) it is ``<experiment>/global_step_<N>``; any other directory is its own name. A
    relative path is taken against the working directory; symlinks are not resolved (a link keeps
    the name it was given by)."""
    p = _absolute(path)
    step = _step_dir(p)
    if step is None:
        return p.name or str(p)
    parent = step.parent.name
    return f"{parent}/{step.name}" if parent else step.name


def checkpoint_step(path: str | Path) -> int | None:
    """The training step a checkpoint directory names (:func:`checkpoint_label`'s layouts), else None."""
    step = _step_dir(_absolute(path))
    if step is None:
        return None
    m = _TRAINER_STEP.match(step.name) or _VERL_STEP.match(step.name)
    return int(m.group(1)) if m else None


def default_policy_name(model_path: str | Path, adapter_path: str | Path | None = None) -> str:
    """The policy name a :class:`LocalTransformersBackend` reports when none is given:
    ``local:<checkpoint_label(model_path)>``, plus ``+lora:<checkpoint_label(adapter_path)>`` with
    an adapter. So two GRPO checkpoints of the same step in different runs
    (``runs/grpo/outcome_only/checkpoint-60``, ``runs/grpo/outcome_tool/checkpoint-60``) are
    ``local:outcome_only/checkpoint-60`` and ``local:outcome_tool/checkpoint-60``, and a plain
    directory (``/ckpt/sft-merged``) is ``local:sft-merged`` as before."""
    name = f"local:{checkpoint_label(model_path)}"
    return name + (f"+lora:{checkpoint_label(adapter_path)}" if adapter_path else "")


class LocalTransformersBackend:
    """A ChatBackend over a local checkpoint directory (or hub id available offline).

    Args:
        model_path: directory with ``config.json``, weights and a tokenizer with a chat template.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:<n>"`` or ``"auto"`` (CUDA when available).
        dtype: ``"auto"`` (bfloat16 on CUDA, float32 on CPU), ``"float32"``, ``"bfloat16"``,
            ``"float16"``.
        adapter_path: a LoRA adapter directory (``peft``); ``merge_adapter`` merges it into the
            weights after loading (faster generation, same outputs up to rounding).
        chat_template_kwargs: extra variables for the chat template.
        name: policy name for reports (default :func:`default_policy_name`:
            ``local:<dir name>[+lora:<adapter dir name>]``, a training checkpoint named with its run
            and step, e.g. ``local:outcome_only/checkpoint-60``).
        trust_remote_code: passed to ``from_pretrained``.
        batch_size: most concurrent requests generated as one batch (>= 1; 1: one at a time).
        batch_wait_s: seconds a request waits for others to join its batch (>= 0).

    Raises :class:`ConfigError` for a missing path, an unknown device or dtype, CUDA requested
    without CUDA, an adapter without ``peft`` installed, or a bad ``batch_size`` / ``batch_wait_s``.
    """

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: str = "auto",
        adapter_path: str | Path | None = None,
        *,
        merge_adapter: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        trust_remote_code: bool = False,
        batch_size: int = 16,
        batch_wait_s: float = 0.02,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        p = Path(model_path).expanduser()
        if not p.exists():
            raise ConfigError(f"model_path: {str(p)!r} does not exist")
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype: must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
            raise ConfigError(f"device: must be cpu, cuda, cuda:<n> or auto, got {device!r}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device: {device!r} requested but CUDA is not available")
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        self.model_path = str(p)
        self.device = device
        self.dtype = str(torch_dtype).replace("torch.", "")
        self.adapter_path = str(Path(adapter_path).expanduser()) if adapter_path else None
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tokenizer = AutoTokenizer.from_pretrained(str(p), trust_remote_code=trust_remote_code)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"model_path: the tokenizer in {str(p)!r} has no chat template")
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype, trust_remote_code=trust_remote_code)
        if self.adapter_path:
            if not Path(self.adapter_path).exists():
                raise ConfigError(f"adapter_path: {self.adapter_path!r} does not exist")
            try:
                from peft import PeftModel
            except ImportError:
                raise ConfigError("adapter_path: LoRA adapters need the 'peft' package (pip install peft)") from None
            model = PeftModel.from_pretrained(model, self.adapter_path)
            if merge_adapter:
                model = model.merge_and_unload()
        self.model = model.to(device).eval()
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        stop = []
        if self.tokenizer.eos_token_id is not None:
            stop.append(int(self.tokenizer.eos_token_id))
        im_end = (
            self.tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in self.tokenizer.get_vocab() else None
        )
        if im_end is not None and im_end not in stop:
            stop.append(int(im_end))
        self.stop_token_ids = stop
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (stop[0] if stop else 0)
        )
        self.name = name or default_policy_name(p, self.adapter_path)
        if batch_size < 1:
            raise ConfigError(f"batch_size: must be >= 1, got {batch_size}")
        if batch_wait_s < 0:
            raise ConfigError(f"batch_wait_s: must be >= 0, got {batch_wait_s}")
        self._lock = threading.Lock()
        self._batcher = ThreadBatcher(self._run_batch, max_batch=batch_size, max_wait_s=batch_wait_s)
        self._weights_sha256: str | None = None

    @property
    def weights_sha256(self) -> str:
        """Content hash of the weights this backend generates with (computed once)."""
        if self._weights_sha256 is None:
            from shopping_companion.llm.weights import weights_sha256

            with self._lock:
                self._weights_sha256 = weights_sha256(self.model)
        return self._weights_sha256

    def _run_batch(self, requests: list[GenRequest]) -> list[list[int]]:
        with self._lock:
            return generate_batch(self.model, requests, stop_ids=self.stop_token_ids, pad_id=self.pad_token_id)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model_path={self.model_path!r}, device={self.device!r}, "
            f"dtype={self.dtype!r}, adapter_path={self.adapter_path!r})"
        )

    # ------------------------------------------------------------------ the protocol
    def render(self, messages: Messages, tools: ToolSchemas | None = None) -> str:
        """The prompt text the model sees for ``messages`` and ``tools``."""
        return self.tokenizer.apply_chat_template(
            _template_messages(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=True,
            tokenize=False,
            **self.chat_template_kwargs,
        )

    def chat(
        self, messages: Messages, tools: ToolSchemas | None = None, sampling: Sampling | None = None
    ) -> AssistantMessage:
        """One assistant turn (module docstring). Raises :class:`BackendError` when the prompt
        does not fit the model's context or generation fails."""

        sampling = sampling or Sampling()
        try:
            prompt = self.render(messages, tools)
        except Exception as e:  # a template error is a request error, like a server's 400
            raise BackendError(f"{self.name}: chat template failed: {type(e).__name__}: {e}") from None
        ids = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        n_prompt = int(ids.shape[1])
        max_new = int(sampling.max_tokens)
        if self.max_context:
            room = self.max_context - n_prompt
            if room <= 0:
                raise BackendError(
                    f"{self.name}: prompt has {n_prompt} tokens but the model's context is {self.max_context}"
                )
            max_new = min(max_new, room)
        request = GenRequest(
            ids[0].tolist(),
            max_new,
            temperature=float(sampling.temperature),
            top_p=float(sampling.top_p),
            top_k=int(sampling.top_k) if sampling.top_k is not None else None,
            seed=int(sampling.seed) + len(messages) if sampling.seed is not None else None,
        )
        start = time.perf_counter()
        try:
            new = self._batcher.generate(request)
        except Exception as e:
            raise BackendError(f"{self.name}: generation failed: {type(e).__name__}: {e}") from None
        latency = time.perf_counter() - start
        finish = "stop" if new and new[-1] in self.stop_token_ids else "length"
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        if prompt.rstrip().endswith("<think>") and "</think>" in text and "<think>" not in text.split("</think>")[0]:
            text = "<think>\n" + text
        return AssistantMessage(
            content=text, prompt_tokens=n_prompt, completion_tokens=len(new), latency_s=latency, finish_reason=finish
        )


def _template_messages(messages: Messages) -> list[dict[str, Any]]:
    """Copies of ``messages`` with structured tool-call arguments decoded from JSON strings."""
    out = []
    for m in messages:
        m = dict(m)
        calls = m.get("tool_calls")
        if calls:
            fixed = []
            for c in calls:
                c = json.loads(json.dumps(c))
                fn = c.get("function") or {}
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args)
                    except ValueError:
                        fn["arguments"] = {"_raw": args}
                fixed.append(c)
            m["tool_calls"] = fixed
        out.append(m)
    return out
