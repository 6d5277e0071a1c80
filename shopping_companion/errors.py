"""Exceptions shared across the package."""

from __future__ import annotations


class ToolInputError(ValueError):
    """A tool was called with bad arguments.

    The message names the offending field and the allowed values; the environment turns it into
    an error observation for the agent (the episode goes on).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class IndexError_(RuntimeError):
    """An on-disk index is missing, corrupted, stale or foreign; the message says how to rebuild."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and the allowed values."""
