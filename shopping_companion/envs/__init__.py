"""The Shopping Companion environment (paper §5.1, App. B; docs/architecture.md, the environment).

- :mod:`~shopping_companion.envs.env`: ``ShoppingCompanionEnv``, ``EnvConfig`` (modes
  ``two_stage`` / ``one_stage`` / ``oracle``, hints ``none`` / ``low`` / ``high``), ``StepResult``;
- :mod:`~shopping_companion.envs.simulator`: user simulators (``ScriptedSimulator``,
  ``LLMSimulator``), leak checks, registry glue;
- :mod:`~shopping_companion.envs.tools`: the four tools (``ToolBox``);
- :mod:`~shopping_companion.envs.parsing`: the action protocol;
- :mod:`~shopping_companion.envs.prompts`: system prompts and hand-off messages;
- :mod:`~shopping_companion.envs.gym`: the gymnasium adapter (imported on demand);
- :mod:`~shopping_companion.envs.scripted`: ``GoldPolicy``, a gold-knowing scripted policy for
  tests and overhead measurements (never a baseline).

Nothing is imported here, so ``import shopping_companion.envs.parsing`` stays light.
"""
