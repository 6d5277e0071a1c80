"""The ``shopcomp`` command line (one module per command group; :mod:`.main` assembles them)."""

from shopping_companion.cli.main import app, main

__all__ = ["app", "main"]
