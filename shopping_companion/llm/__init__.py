"""Chat backends: OpenAI-compatible HTTP, and the scripted reference policy (a baseline)."""

from shopping_companion.llm.base import AssistantMessage, BackendError, ChatBackend, Sampling, StructuredToolCall

__all__ = ["AssistantMessage", "BackendError", "ChatBackend", "Sampling", "StructuredToolCall"]
