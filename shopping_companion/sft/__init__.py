"""Supervised fine-tuning data for Shopping Companion (paper §6.1, App. D).

Pipeline: :mod:`~shopping_companion.sft.collect` rejection-samples trajectories from a teacher
policy on the train split (the evaluation runner, judged by the same judge as evaluation), keeps
the stages judged successful, :mod:`~shopping_companion.sft.examples` turns every assistant turn
of a kept stage into one step-level example, :mod:`~shopping_companion.sft.decontam` checks that
no test-split task leaked into them, and :mod:`~shopping_companion.sft.export` writes LLaMA-Factory
ShareGPT-with-tools data, ``dataset_info.json`` and a LoRA training YAML (paper settings).
The command line is :mod:`~shopping_companion.cli.sft` (``shopcomp sft``), configured by
:mod:`~shopping_companion.sft.config`. LLaMA-Factory itself is never imported here: it lives in its
own environment (``scripts/install_sft.sh``).
"""

from shopping_companion.sft.collect import KeepPolicy, KeptStage, select_kept
from shopping_companion.sft.examples import StepExample, example_stats, step_examples

__all__ = ["KeepPolicy", "KeptStage", "select_kept", "StepExample", "step_examples", "example_stats"]
