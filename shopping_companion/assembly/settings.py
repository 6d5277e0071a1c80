"""The settings groups every runner shares (an evaluation, an SFT collection, a GRPO run, the
tool service): how the policy samples (:class:`SamplingConfig`), which policy backend
(:class:`BackendConfig`), where the data is (:class:`DataConfig`) and which Ray cluster runs the
episodes (:class:`RayConfig`). Each refuses unknown keys (:data:`~shopping_companion.config.STRICT`);
every field is documented on its class."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from shopping_companion.assembly.endpoints import Endpoint
from shopping_companion.config import STRICT

__all__ = ["BackendConfig", "DataConfig", "RayConfig", "SamplingConfig"]


class SamplingConfig(BaseModel):
    """Sampling of the policy (passed to the backend on every assistant turn).

    ``temperature`` >= 0; ``top_p`` in (0, 1]; ``top_k`` >= 0 (0: not sent); ``max_tokens`` >= 1 new
    tokens per assistant turn; ``send_seed``: send a per-episode sampling seed
    ``derive_seed(seed, task_id, trial)`` so a rerun asks for the same samples.
    """

    model_config = STRICT
    temperature: float = Field(default=0.6, ge=0.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    top_k: int = Field(default=20, ge=0)
    max_tokens: int = Field(default=4096, ge=1)
    send_seed: bool = True


class BackendConfig(Endpoint):
    """The policy under evaluation.

    ``kind``: ``reference`` (the scripted rule-based baseline, offline), ``openai`` (any
    OpenAI-compatible endpoint: vLLM, SGLang, a provider) or ``local`` (a Hugging Face checkpoint
    run in-process). ``model`` (openai: the served model name, required), ``base_url`` (openai:
    e.g. ``http://localhost:8000/v1``), ``api_key_env`` (the variable holding the key).
    ``timeout_s``: wall-clock seconds of one HTTP attempt (> 0); ``max_retries`` (>= 0) after
    timeouts, 5xx, 429 and invalid JSON; ``deadline_s``: seconds for one request over all attempts
    (default ``min(600, (retries+1) x timeout)`` or ``$SHOPCOMP_DEADLINE_S``);
    ``breaker_threshold``: consecutive connection failures or timeouts that stop the run (default 5
    or ``$SHOPCOMP_BREAKER_THRESHOLD``). ``model_path`` / ``adapter`` (a LoRA adapter, needs peft)
    / ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``) / ``dtype`` / ``batch_size`` (>= 1: most
    concurrent episodes' turns generated as one batch; set ``concurrency`` at least as high) for
    ``local``.
    """

    kind: Literal["reference", "openai", "local"] = "reference"
    timeout_s: float = Field(default=120.0, gt=0.0)
    max_retries: int = Field(default=3, ge=0)
    deadline_s: float | None = Field(default=None, gt=0.0)
    breaker_threshold: int | None = Field(default=None, ge=1)
    model_path: Path | None = None
    adapter: Path | None = None
    device: str = "cpu"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    batch_size: int = Field(default=16, ge=1)
    sampling: SamplingConfig = SamplingConfig()

    @model_validator(mode="after")
    def _required_per_kind(self) -> "BackendConfig":
        if self.kind == "openai" and not self.model:
            raise ValueError(
                "backend.model is required with backend.kind=openai (e.g. --model Qwen/Qwen3-4B-Thinking-2507)"
            )
        if self.kind == "local" and not self.model_path:
            raise ValueError(
                "backend.model_path is required with backend.kind=local (a Hugging Face checkpoint directory)"
            )
        return self


class DataConfig(BaseModel):
    """Where the raw data and the index are: ``data_dir`` (default ``$SHOPCOMP_DATA_DIR``, else
    ``../shared/data``; a named directory that does not exist is an error), ``index_dir`` (the
    BM25 index; default: the cache directory)."""

    model_config = STRICT
    data_dir: Path | None = None
    index_dir: Path | None = None


class RayConfig(BaseModel):
    """Evaluation on a Ray cluster (``shopcomp eval --ray ADDRESS``): ``address`` (``auto``, a
    ``ray://host:port`` client address, ``host:port`` of a running cluster, or ``local`` to start
    a private one on this machine); ``workers``: episode workers (Ray actors, each builds its own
    policy backend and tools once; None: one per ``num_cpus`` of the cluster's CPUs);
    ``num_cpus``: CPUs each worker reserves (> 0)."""

    model_config = STRICT
    address: str = Field(min_length=1)
    workers: int | None = Field(default=None, ge=1)
    num_cpus: float = Field(default=1.0, gt=0)
