"""Judges (docs/architecture.md, judges): the deterministic rule judge, the LLM judge over any OpenAI-compatible
endpoint, judge agreement (per-field agreement, Cohen's κ, Pearson/Spearman, the paper's OPC) and
the per-episode metrics Acc / Succ (:mod:`~shopping_companion.judges.base`, with the
``Judge`` protocol). Modules import lazily: ``from shopping_companion.judges.rule
import RuleJudge``; judge classes are also in :data:`shopping_companion.registry.JUDGES`
(``rule``, ``llm``)."""
