"""``PersonalizeRunConfig``: the configuration of ``shopcomp personalize run``.

It is the ``run:`` section of a ``configs/personalization/*.yaml`` file (the ``build:`` section is
:class:`~shopping_companion.personalization.build.BuildConfig`), or a whole YAML file holding only
these keys. :func:`load_run_config` reads it with the one loader of both sections
(:class:`SectionLoader` over :func:`shopping_companion.config.load_model`: file < flags <
``--set key=value``, the keys relative to the section). Defaults are the paper's ("Personalization Matters", Gao et al. 2026):
all five variants of Table 2, retrieval depths k_d = 1, k_p = 5, k_r = 5 (§3.6).

Secrets never enter a config: API keys are read from the environment variable ``api_key_env`` names.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shopping_companion.errors import ConfigError

__all__ = ["DEFAULT_CONFIG", "PersonalizeRunConfig", "SectionLoader", "config_section", "load_run_config"]

#: The paper settings; read when ``--config`` is not given.
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "personalization" / "default.yaml"


class PersonalizeRunConfig(BaseModel):
    """One ``personalize run``.

    ``dataset``: the directory ``personalize build`` wrote; ``out``: the run directory
    (``dialogues.jsonl``, ``run.json``, ``config.yaml``). ``variants``: ``all`` or names of
    baseline, textrag, norev, single, full (Table 2); ``memory``: ``all`` or modes of full, none,
    summary, top1 applied to the Full variant (Table 11 ablation). ``roles``: ``extractive`` (an
    offline rule-based baseline, not an LLM) or ``llm`` (``model`` at the OpenAI-compatible
    ``base_url``, required then; ``timeout_s`` > 0 per HTTP attempt, ``max_retries`` >= 0).
    ``embedder``: ``minilm`` or ``openai:<model>`` at ``embed_base_url``. ``api_key_env``: the
    variable holding the key of the role model and the embeddings endpoint. ``k_d`` / ``k_p`` /
    ``k_r`` >= 1: prior turns, products and reviews retrieved per turn. ``categories``: only these
    (``None``: all); ``max_cases``: the first N cases (>= 1); ``concurrency``: dialogues in flight
    (>= 1); ``force``: adopt this config for dialogues whose ``run.json`` is missing or corrupt.
    """

    model_config = ConfigDict(extra="forbid")
    dataset: Path
    out: Path
    variants: list[str] = Field(default="all", validate_default=True)
    memory: list[str] = Field(default="full", validate_default=True)
    roles: Literal["extractive", "llm"] = "extractive"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(default=120.0, gt=0.0)
    max_retries: int = Field(default=3, ge=0)
    embedder: str = "minilm"
    embed_base_url: str | None = None
    k_d: int = Field(default=1, ge=1)
    k_p: int = Field(default=5, ge=1)
    k_r: int = Field(default=5, ge=1)
    categories: list[str] | None = None
    max_cases: int | None = Field(default=None, ge=1)
    concurrency: int = Field(default=1, ge=1)
    force: bool = False

    @field_validator("variants", mode="before")
    @classmethod
    def _variants(cls, v: Any) -> list[str]:
        from shopping_companion.personalization.agents import parse_variants

        return parse_variants(v)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> list[str]:
        from shopping_companion.personalization.agents import parse_memory_modes

        return parse_memory_modes(v)

    @field_validator("categories", mode="before")
    @classmethod
    def _categories(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [c.strip() for c in v.split(",") if c.strip()] or None
        return v

    @model_validator(mode="after")
    def _llm_needs_model(self) -> "PersonalizeRunConfig":
        if self.roles == "llm" and not self.model:
            raise ValueError("model is required with roles=llm (--model)")
        return self


def config_section(path: str | os.PathLike[str] | None, section: str) -> tuple[dict[str, Any], str]:
    """``(mapping, where)``: the ``section`` (``build`` or ``run``) of a personalization YAML file,
    the whole file when it has neither section, ``({}, "")`` when ``path`` is ``None`` and
    :data:`DEFAULT_CONFIG` is absent; ``where`` names the file and section for messages. Raises
    :class:`ConfigError` for a missing or malformed file."""
    from shopping_companion.config import load_config

    p = Path(path) if path is not None else DEFAULT_CONFIG
    if path is None and not p.is_file():
        return {}, ""
    raw = load_config(p)
    if "build" in raw or "run" in raw:
        part = raw.get(section) or {}
        if not isinstance(part, dict):
            raise ConfigError(f"{p}: the {section}: section must be a mapping, got {type(part).__name__}")
        return part, f"{p} ({section}: section)"
    return raw, str(p)


M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class SectionLoader(Generic[M]):
    """The one loader of a personalization config section: ``loader(path, sets, overrides, names)``
    is ``path``'s ``section`` (:func:`config_section`; ``None``: :data:`DEFAULT_CONFIG`), then
    ``overrides`` (dotted keys of the flags given), then ``sets`` (``key=value``), validated as
    ``model`` by :func:`shopping_companion.config.load_model`; ``names`` maps keys to the flags that
    set them (for messages). Raises :class:`ConfigError` naming the file and section, each bad field
    and the allowed keys or values."""

    model: type[M]
    section: Literal["build", "run"]

    def __call__(
        self,
        path: str | os.PathLike[str] | None,
        sets: Iterable[str] = (),
        overrides: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> M:
        from shopping_companion.config import load_model

        data, where = config_section(path, self.section)
        try:
            return load_model(self.model, data, sets, overrides, names=names)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}" if where else str(e)) from None


#: The resolved ``personalize run`` config: the ``run:`` section as a :class:`PersonalizeRunConfig`.
load_run_config = SectionLoader(PersonalizeRunConfig, "run")
