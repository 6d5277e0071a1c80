"""``CollectConfig``: the one configuration object of ``shopcomp sft collect``.

``shopcomp sft collect --config collect.yaml`` reads it (``configs/sft/collect_example.yaml`` is
an example), the command line's flags and ``--set dotted.key=value`` override it
(:func:`shopping_companion.config.load_model`). A collection is an evaluation of the train split
with a keep rule (Shopping Companion §6.1, App. D: rejection sampling), so the config reuses the
evaluation's groups (:class:`~shopping_companion.benchmark.run_config.EpisodeConfig`), and the
evaluation's builders (:mod:`shopping_companion.benchmark.run`) take it unchanged.

Groups (every field is documented on its class):

- ``bench`` (:class:`CollectBench`: the benchmark directory; ``split`` is always ``train``)
- ``out``: the collect directory (``rollouts.jsonl``, ``kept.jsonl``, ``collect.json``, ``config.yaml``)
- ``strategies``, ``trials``, ``seed``, ``simulator``, ``concurrency``
- ``backend`` (the teacher, with its ``sampling``), ``judge``, ``rubric``, ``env``, ``data``
- ``keep`` (:class:`~shopping_companion.sft.collect.KeepPolicy`: which stage trajectories are kept)

Secrets never enter a config: API keys are read from the environment variable a field names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from shopping_companion.benchmark.run_config import BenchmarkSelection, EpisodeConfig
from shopping_companion.sft.collect import KeepPolicy

__all__ = ["CollectBench", "CollectConfig"]


class CollectBench(BenchmarkSelection):
    """The benchmark to collect from: ``path`` (a directory written by ``shopcomp synth``),
    ``limit`` (the first N train tasks, >= 1), ``skip_missing_gold``. ``split`` must be ``train``:
    test-split tasks never become training data."""

    split: Literal["train"] = "train"


class CollectConfig(EpisodeConfig):
    """Everything one ``sft collect`` run needs (module docstring): the
    :class:`~shopping_companion.benchmark.run_config.EpisodeConfig` groups an evaluation has too
    (teacher ``backend`` with its sampling, ``judge``, ``simulator``, ``rubric`` — the reward written
    with each rollout, it does not decide what is kept —, ``env``, ``seed``, ``trials``,
    ``strategies``, ``concurrency``, ``data``), so the evaluation's builders
    (:mod:`shopping_companion.benchmark.run`) take it as it is; plus ``bench`` (train split only),
    ``out`` and ``keep``."""

    bench: CollectBench
    out: Path = Path("runs/sft/collect")
    keep: KeepPolicy = KeepPolicy()

    @field_validator("keep", mode="before")
    @classmethod
    def _keep_stages_text(cls, v: Any) -> Any:
        """``keep.stages`` may be written ``1,2`` (as on the command line): parsed by
        :meth:`KeepPolicy.parse`, which names the field and the allowed values."""
        if isinstance(v, dict) and isinstance(v.get("stages"), (str, int)):
            stages = KeepPolicy.parse(str(v.get("rule", "succ")), float(v.get("min_acc", 1.0)), str(v["stages"])).stages
            v = {**v, "stages": stages}
        return v
