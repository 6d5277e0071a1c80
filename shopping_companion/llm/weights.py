"""A content hash of a model's weights: the proof of every hand-off between training phases.

:func:`weights_sha256` hashes the weights a model computes with, in a form that does not depend on
how they are stored: parameters and buffers of ``state_dict()`` sorted by name, each cast to
float32 (so a bfloat16 copy of float32 weights that round-trips hashes alike) and hashed with its
name and shape; a tensor that shares storage with an earlier one (tied input and output
embeddings) is hashed once, under its first name. For a PEFT model the hash is that of the base
weights (the ``base_layer`` names mapped back to the plain ones, adapter tensors left out), which
equals the effective weights while every ``lora_B`` is zero — true of a fresh adapter, the GRPO
case the pipeline checks; :func:`adapter_is_zero` says whether that holds.

Given a directory it loads the checkpoint on the CPU with ``AutoModelForCausalLM`` first, so a
saved checkpoint and the model that was saved hash alike. The CPU pipeline records these hashes
for the base, SFT and GRPO checkpoints and checks that GRPO's first rollouts and every evaluation
used the weights they name (docs/pipeline.md).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

__all__ = ["adapter_is_zero", "weights_sha256"]


def _base_model(model: Any) -> Any:
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) and hasattr(model, "peft_config") else model


def _plain_name(name: str) -> str:
    return name.replace(".base_layer.", ".").replace("base_model.model.", "")


def weights_sha256(model_or_dir: Any) -> str:
    """Hex SHA-256 of the weights (module docstring). ``model_or_dir``: a ``torch.nn.Module`` or a
    checkpoint directory. Raises ``FileNotFoundError`` for a directory without ``config.json``."""
    import torch

    if isinstance(model_or_dir, (str, Path)):
        path = Path(model_or_dir)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: no config.json, not a model checkpoint directory")
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    else:
        model = model_or_dir
    base = _base_model(model)
    state = base.state_dict()
    h = hashlib.sha256()
    seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    named = sorted(((_plain_name(k), v) for k, v in state.items() if "lora_" not in k), key=lambda kv: kv[0])
    with torch.no_grad():
        for name, tensor in named:
            if not isinstance(tensor, torch.Tensor):
                continue
            view = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride())) if tensor.numel() else None
            if view is not None and view in seen:  # the same tensor under a second name (tied weights)
                continue
            if view is not None:
                seen.add(view)
            data = tensor.detach().to("cpu", torch.float32).contiguous()
            h.update(name.encode())
            h.update(str(tuple(data.shape)).encode())
            h.update(data.numpy().tobytes())
    return h.hexdigest()


def adapter_is_zero(model: Any) -> bool:
    """True when ``model`` has no LoRA adapter or every ``lora_B`` weight is zero (a fresh adapter:
    the effective weights are the base weights)."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name and bool(torch.any(p != 0)):
                return False
    return True
