"""The Shopping Companion benchmark as a verifiers environment: taskset id
``shopping-companion-bench`` (``vf-eval shopping-companion-bench --env.taskset.bench DIR``). The
taskset, its default harness and the environment are those of
:mod:`shopping_companion.integrations.verifiers` (docs/integrations.md, verifiers)."""

from shopping_companion.integrations.verifiers import ShoppingEnv, ShoppingHarness, ShoppingTaskset

__all__ = ["ShoppingTaskset", "ShoppingHarness", "ShoppingEnv"]
