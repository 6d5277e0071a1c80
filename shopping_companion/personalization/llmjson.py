"""Ask a chat backend for one strict JSON object validated by a pydantic model.

Shared by the LLM profile builder, the LLM query generator and the trajectory judge. Follows the
conventions of :mod:`shopping_companion.judges.llm` (and reuses its reply parser and cache): the
reply must be exactly one JSON object (``<think>`` blocks and one code fence are tolerated); an
invalid reply is answered with the validation error and asked again up to ``max_retries`` times;
backend errors are retried with exponential backoff unless the HTTP status cannot succeed on retry
(the loop is :func:`shopping_companion.judges.llm.ask_strict_json`);
valid replies are cached under ``sha256(model, sampling, messages)`` (memory, plus an SQLite file
when ``cache_path`` is given).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from shopping_companion.judges.llm import ask_strict_json, bounded_call
from shopping_companion.llm.replies import ReplyCache
from shopping_companion.llm.base import ChatBackend, Sampling
from shopping_companion.errors import JSONAskError  # noqa: F401 - re-exported

__all__ = ["JSONAsker", "JSONAskError", "openai_chat"]

M = TypeVar("M", bound=BaseModel)


def openai_chat(
    model: str | None,
    base_url: str | None,
    api_key_env: str,
    option: str,
    *,
    ping: bool = True,
    timeout_s: float = 120.0,
    max_retries: int = 3,
) -> Any:
    """An OpenAI-compatible chat backend of ``model`` at ``base_url`` (key in ``$api_key_env``;
    top-k not sent); with ``ping`` an endpoint that cannot be reached is a
    :class:`~shopping_companion.errors.BackendError` naming the command-line ``option`` at once."""
    from shopping_companion.assembly.endpoints import check_reachable
    from shopping_companion.llm.openai_backend import OpenAIBackend

    backend = OpenAIBackend(
        model=model or "",
        base_url=base_url,
        api_key_env=api_key_env,
        timeout_s=timeout_s,
        max_retries=max_retries,
        send_top_k=False,
    )
    return check_reachable(backend, option) if ping else backend


class JSONAsker:
    """``ask(messages, Model, context=None) -> Model`` over a :class:`ChatBackend`.

    Args:
        backend: any chat backend (e.g. ``OpenAIBackend``).
        sampling: default greedy (temperature 0, top-p 1, no top-k), 2,048 tokens.
        max_retries: re-asks after the first attempt (invalid replies and retryable errors).
        cache_path: SQLite reply cache (None: in-memory only).
        backoff_s, max_backoff_s: delay after a backend error, ``min(backoff_s * 2**k, max)``.
        timeout_s: wall-clock limit of one attempt, in seconds (> 0; ``None``: the backend's own).
        deadline_s: wall-clock limit of one :meth:`ask` over all attempts, re-asks and backoffs, in
            seconds (> 0; default 600).

    Raises:
        ConfigError: a ``timeout_s`` / ``deadline_s`` that is not a number of seconds > 0.
    """

    def __init__(
        self,
        backend: ChatBackend,
        *,
        sampling: Sampling | None = None,
        max_retries: int = 2,
        cache_path: str | Path | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        timeout_s: float | None = None,
        deadline_s: float = 600.0,
    ) -> None:
        from shopping_companion.llm.breaker import positive_seconds

        self.timeout_s = positive_seconds("timeout_s", timeout_s, allow_none=True)
        self.deadline_s = positive_seconds("deadline_s", deadline_s)
        self.backend = backend
        self.sampling = sampling or Sampling(temperature=0.0, top_p=1.0, top_k=None, max_tokens=2048)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._cache = ReplyCache(cache_path)
        self.model_id = getattr(backend, "model", None) or getattr(backend, "name", type(backend).__name__)
        self.stats = {"requests": 0, "cache_hits": 0, "retries": 0}
        self._lock = threading.Lock()

    def _bump(self, k: str) -> None:
        with self._lock:
            self.stats[k] += 1

    def _key(self, messages: list[dict[str, Any]], model: type[BaseModel]) -> str:
        return ReplyCache.key(
            {
                "model": self.model_id,
                "schema": model.__name__,
                "sampling": self.sampling.model_dump(),
                "messages": messages,
            }
        )

    def ask(self, messages: list[dict[str, Any]], model: type[M], context: dict[str, Any] | None = None) -> M:
        """The validated reply. Raises :class:`JSONAskError` after ``max_retries`` re-asks or when
        ``deadline_s`` is up, and :class:`~shopping_companion.llm.base.CircuitOpenError` when the
        endpoint's circuit breaker opens."""
        deadline = time.monotonic() + self.deadline_s

        def call(convo: list[dict[str, Any]]) -> str:
            self._bump("requests")
            left = deadline - time.monotonic()
            budget = left if self.timeout_s is None else min(self.timeout_s, left)
            return bounded_call(lambda: self.backend.chat(convo, None, self.sampling), budget).content

        out, errors = ask_strict_json(
            call,
            messages,
            lambda obj: model.model_validate(obj, context=context),
            self._cache,
            self._key(messages, model),
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s,
            bump=self._bump,
            name=f"{model.__name__} asker",
            deadline_s=self.deadline_s,
        )
        if out is None:
            raise JSONAskError(f"{model.__name__}: no valid reply from {self.model_id}", errors)
        return out

    def close(self) -> None:
        self._cache.close()
