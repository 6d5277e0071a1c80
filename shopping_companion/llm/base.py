"""The chat-backend protocol every policy implements (docs/architecture.md, backends)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from shopping_companion.errors import BackendError, ContextLengthError, CircuitOpenError  # noqa: F401 - re-exported

Messages = list[dict[str, Any]]
"""OpenAI-style chat messages: dicts with ``role``, ``content`` and optional ``tool_call_id``/``name``/``tool_calls``."""

ToolSchemas = list[dict[str, Any]]
"""OpenAI function schemas (``{"type": "function", "function": {"name", "description", "parameters"}}``)."""


class Sampling(BaseModel):
    """Sampling settings passed to a backend. ``max_tokens`` is per assistant turn."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    temperature: float = Field(default=0.6, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    top_k: int | None = Field(default=20, ge=1)
    max_tokens: int = Field(default=4096, ge=1)
    seed: int | None = None


class StructuredToolCall(BaseModel):
    """A tool call returned in OpenAI's structured ``tool_calls`` field.

    ``arguments`` is the raw JSON string exactly as the server sent it (it may be malformed:
    the environment reports that to the agent instead of crashing).
    """

    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    arguments: str


class AssistantMessage(BaseModel):
    """What a backend produced for one assistant turn.

    ``content`` is the text (may contain ``<think>``, ``<tool_call>`` and ``<answer>`` blocks);
    ``reasoning`` is separate reasoning text when the server returns it apart from content;
    ``tool_calls`` are structured calls when the server parsed them itself.
    Token counts are None when the backend does not report them.
    """

    model_config = ConfigDict(extra="forbid")
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[StructuredToolCall] = Field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    finish_reason: str | None = None


@runtime_checkable
class ChatBackend(Protocol):
    """``chat(messages, tools, sampling) -> AssistantMessage``.

    ``messages`` are OpenAI-style dicts (role, content, optional tool_call_id/name);
    ``tools`` are OpenAI function schemas. ``name`` identifies the policy in reports.
    """

    name: str

    def chat(
        self, messages: Messages, tools: ToolSchemas | None = None, sampling: Sampling | None = None
    ) -> AssistantMessage: ...
